"""The report's charts as vector files for papers (SVG and PDF), written from the very drawing calls that
paint their PNG (`charts`): `Recorder` passes each call on to Pillow and keeps it, and `svg_bytes` and
`pdf_bytes` write the kept calls out. One layout for all three formats, and no matplotlib: importing
it and laying a figure out twice more cost more than the whole scoring of a results file.

Text is set in Helvetica (PDF's built-in font, nothing embedded; SVG asks for Helvetica or Arial) and
stretched to the width Pillow measured for it, so labels sit where they sit in the PNG. Coordinates are
Pillow's, divided by the drawing's scale: one SVG pixel or one PDF point per PNG pixel. The same
drawing always gives the same bytes (no dates, no random ids): shipped outputs are compared with what
`--eval` writes.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Sequence

from cir_demo.utils.io import atomic_path

VECTOR_FORMATS = ("svg", "pdf")
FONT_FAMILY = "Helvetica, Arial, sans-serif"
# Helvetica's advance widths (1/1000 em) of ASCII 32-126, from Adobe's AFM (WinAnsi: ' is quotesingle)
_HELVETICA = [278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278]
_HELVETICA += [556] * 10 + [278, 278, 584, 584, 584, 556, 1015, 667, 667, 722, 722, 667, 611, 778, 722, 278]
_HELVETICA += [500, 667, 556, 833, 722, 778, 667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 278, 278]
_HELVETICA += [278, 469, 556, 333, 556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500, 222, 833, 556, 556]
_HELVETICA += [556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334, 260, 334, 584]


class Recorder:
    """An ImageDraw stand-in: each call is drawn by `draw` (Pillow) and kept in `ops`, in Pillow's pixels."""

    def __init__(self, draw, size: tuple[int, int], scale: int):
        self.draw, self.size, self.scale, self.ops = draw, size, scale, []

    def textbbox(self, xy, text, font):
        return self.draw.textbbox(xy, text, font=font)

    def text(self, xy, text: str, fill: str, font) -> None:
        self.draw.text(xy, text, fill=fill, font=font)
        self.ops.append(("text", xy, text, fill, font.size, font.getmetrics()[0], font.getlength(text)))

    def line(self, xy, fill: str, width: int = 1) -> None:
        self.draw.line(xy, fill=fill, width=width)
        self.ops.append(("line", [float(v) for v in xy], fill, width))

    def rectangle(self, xy, fill: str | None = None, outline: str | None = None, width: int = 1) -> None:
        self.draw.rectangle(xy, fill=fill, outline=outline, width=width)
        self.ops.append(("rect", [float(v) for v in xy], fill, outline, width))

    def ellipse(self, xy, fill: str) -> None:
        self.draw.ellipse(xy, fill=fill)
        self.ops.append(("ellipse", [float(v) for v in xy], fill))

    def polygon(self, xy, fill: str, opacity: float = 1.0) -> None:
        """A filled polygon; `opacity` < 1 blends it over what is below (the draw must be an RGBA one)."""
        self.draw.polygon(xy, fill=_rgba(fill, opacity))
        self.ops.append(("polygon", [float(v) for v in xy], fill, opacity))


def _rgba(colour: str, opacity: float) -> tuple[int, int, int, int]:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return r, g, b, round(255 * opacity)


def _n(v: float) -> str:
    """A coordinate as few characters as it needs (2 decimals)."""
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def svg_bytes(rec: Recorder) -> bytes:
    s = rec.scale
    w, h = rec.size
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(w / s)}" height="{_n(h / s)}" '
        f'viewBox="0 0 {w} {h}" font-family="{FONT_FAMILY}">',
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>',
    ]
    for op in rec.ops:
        kind = op[0]
        if kind == "text":
            _, (x, y), text, fill, size, ascent, width = op
            out.append(
                f'<text x="{_n(x)}" y="{_n(y + ascent)}" font-size="{size}" fill="{fill}" '
                f'textLength="{_n(width)}" lengthAdjust="spacingAndGlyphs">{_escape(text)}</text>'
            )
        elif kind == "line":
            _, xy, fill, width = op
            points = " ".join(_n(v) for v in xy)
            out.append(f'<polyline points="{points}" fill="none" stroke="{fill}" stroke-width="{width}"/>')
        elif kind == "rect":
            _, (x0, y0, x1, y1), fill, outline, width = op
            paint = f'fill="{fill}"' if fill else 'fill="none"'
            paint += f' stroke="{outline}" stroke-width="{width}"' if outline else ""
            out.append(f'<rect x="{_n(x0)}" y="{_n(y0)}" width="{_n(x1 - x0)}" height="{_n(y1 - y0)}" {paint}/>')
        elif kind == "ellipse":
            _, (x0, y0, x1, y1), fill = op
            out.append(
                f'<ellipse cx="{_n((x0 + x1) / 2)}" cy="{_n((y0 + y1) / 2)}" rx="{_n((x1 - x0) / 2)}" '
                f'ry="{_n((y1 - y0) / 2)}" fill="{fill}"/>'
            )
        elif kind == "polygon":
            _, xy, fill, opacity = op
            points = " ".join(_n(v) for v in xy)
            out.append(f'<polygon points="{points}" fill="{fill}" fill-opacity="{opacity:g}"/>')
    out.append("</svg>\n")
    return "\n".join(out).encode("utf-8")


def _pdf_colour(colour: str) -> str:
    return " ".join(_n(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5))


def _pdf_text(text: str) -> bytes:
    data = text.replace("\u2212", "-").encode("cp1252", errors="replace")
    return b"(" + data.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def _helvetica_width(text: str) -> float:
    """Width of `text` in Helvetica at size 1 (characters outside ASCII: the width of a digit)."""
    return sum(_HELVETICA[ord(c) - 32] if 32 <= ord(c) <= 126 else 556 for c in text) / 1000


def _pdf_ops(rec: Recorder) -> bytes:
    """The page's content stream: PDF's y runs up, so y becomes height - y; units are Pillow's pixels
    (the page's matrix scales them)."""
    h = rec.size[1]
    out = []
    for op in rec.ops:
        kind = op[0]
        if kind == "text":
            _, (x, y), text, fill, size, ascent, width = op
            natural = _helvetica_width(text) * size
            stretch = 100 * width / natural if natural > 0 else 100
            out.append(
                f"BT /F1 {size} Tf {_n(stretch)} Tz {_pdf_colour(fill)} rg {_n(x)} {_n(h - y - ascent)} Td ".encode()
                + _pdf_text(text)
                + b" Tj ET"
            )
        elif kind == "line":
            _, xy, fill, width = op
            path = " ".join(f"{_n(xy[i])} {_n(h - xy[i + 1])} {'m' if i == 0 else 'l'}" for i in range(0, len(xy), 2))
            out.append(f"{_pdf_colour(fill)} RG {width} w {path} S".encode())
        elif kind == "rect":
            _, (x0, y0, x1, y1), fill, outline, width = op
            box = f"{_n(x0)} {_n(h - y1)} {_n(x1 - x0)} {_n(y1 - y0)} re"
            if fill:
                out.append(f"{_pdf_colour(fill)} rg {box} f".encode())
            if outline:
                out.append(f"{_pdf_colour(outline)} RG {width} w {box} S".encode())
        elif kind == "ellipse":
            _, (x0, y0, x1, y1), fill = op
            out.append(
                f"{_pdf_colour(fill)} rg {_ellipse_path((x0 + x1) / 2, h - (y0 + y1) / 2, (x1 - x0) / 2)} f".encode()
            )
        elif kind == "polygon":
            _, xy, fill, opacity = op
            path = " ".join(f"{_n(xy[i])} {_n(h - xy[i + 1])} {'m' if i == 0 else 'l'}" for i in range(0, len(xy), 2))
            alpha = f"/A{round(opacity * 100)} gs " if opacity < 1 else ""
            out.append(f"q {alpha}{_pdf_colour(fill)} rg {path} h f Q".encode())
    return b"\n".join(out)


def _ellipse_path(cx: float, cy: float, r: float) -> str:
    """A circle as four Bézier arcs."""
    k = r * 4 * (math.sqrt(2) - 1) / 3
    pts = [
        (cx + r, cy, "m"),
        (cx + r, cy + k, cx + k, cy + r, cx, cy + r),
        (cx - k, cy + r, cx - r, cy + k, cx - r, cy),
        (cx - r, cy - k, cx - k, cy - r, cx, cy - r),
        (cx + k, cy - r, cx + r, cy - k, cx + r, cy),
    ]
    out = [f"{_n(pts[0][0])} {_n(pts[0][1])} m"]
    out += [" ".join(_n(v) for v in p) + " c" for p in pts[1:]]
    return " ".join(out) + " h"


def pdf_bytes(rec: Recorder) -> bytes:
    """A one-page PDF 1.4 of the drawing (compressed content, Helvetica by reference, one graphics state
    per opacity used)."""
    s = rec.scale
    w, h = rec.size
    content = zlib.compress(f"{_n(1 / s)} 0 0 {_n(1 / s)} 0 0 cm\n".encode() + _pdf_ops(rec), 6)
    alphas = sorted({round(op[3] * 100) for op in rec.ops if op[0] == "polygon" and op[3] < 1})
    states = " ".join(f"/A{a} << /Type /ExtGState /ca {_n(a / 100)} >>" for a in alphas)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {_n(w / s)} {_n(h / s)}] /Contents 4 0 R "
        f"/Resources << /Font << /F1 5 0 R >> /ExtGState << {states} >> >> >>".encode(),
        f"<< /Length {len(content)} /Filter /FlateDecode >>\nstream\n".encode() + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def save(rec: Recorder, png: Path, formats: Sequence[str] = VECTOR_FORMATS) -> list[Path]:
    """The drawing as `png` with each vector format's suffix."""
    out = []
    for fmt in formats:
        path = Path(png).with_suffix(f".{fmt}")
        path.parent.mkdir(parents=True, exist_ok=True)
        data = svg_bytes(rec) if fmt == "svg" else pdf_bytes(rec)
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(data)
        out.append(path)
    return out

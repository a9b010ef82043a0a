"""The subject's fill (colour, pattern, material as a texture) and the painter that draws
shape lists onto the transparent subject layer in the style's outline convention."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from .. import attributes as A
from .palette import FLAT_OUTLINE, SENTINEL, contrast_rgb


@dataclass(frozen=True)
class Tex:
    """Fill of the subject: its colour, pattern and material."""

    color: str
    pattern: str
    material: str
    period: float  # pattern period in pixels


@functools.lru_cache(maxsize=256)
def _texture_array(color: str, pattern: str, material: str, style: str, w: int, h: int, period: int) -> np.ndarray:
    base = np.array(A.COLOR_RGB[color], dtype=np.float32)
    second = np.array(contrast_rgb(color), dtype=np.float32)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.broadcast_to(base, (h, w, 3)).copy()
    p = max(3.0, float(period))
    if pattern == "striped":
        band = ((yy // (p / 2)) % 2 == 1)[..., None]
        img = np.where(band, second, img)
    elif pattern == "dotted":
        row = yy // p
        cx = (xx + (row % 2) * p / 2) % p - p / 2
        cy = yy % p - p / 2
        dot = ((cx * cx + cy * cy) < (0.26 * p) ** 2)[..., None]
        img = np.where(dot, second, img)
    elif pattern == "checked":
        hb = (yy // (p / 2)) % 2
        vb = (xx // (p / 2)) % 2
        k = ((hb + vb) / 2.0)[..., None]  # 0, 0.5, 1
        light = base + (second - base) * 0.5  # keep the base colour dominant (it is what queries name)
        img = light + (base - light) * k
    if material == "glossy":
        hl = np.exp(-((((xx / max(w, 1)) - 0.3) / 0.07) ** 2)) * np.clip(1.2 - yy / max(h, 1), 0.3, 1.0)
        img = img + (255 - img) * (0.75 * hl)[..., None]
        img = img * (1.05 - 0.2 * (xx / max(w, 1)))[..., None]
    elif material == "metallic":
        # Anisotropic sheen: dark and bright vertical bands plus sharp highlights, visible on any colour.
        t = xx / max(w, 1)
        band = np.abs(np.sin(math.pi * (t * 2.3 + 0.1 + 0.08 * np.sin(yy / max(h, 1) * 6.0))))
        img = img * (0.55 + 0.45 * band[..., None])
        peak = np.exp(-(((band - 1.0) / 0.06) ** 2)) * 0.7 + 0.8 * np.exp(-(((t - 0.63) / 0.02) ** 2))
        img = img + (235 - img) * np.clip(peak, 0, 0.85)[..., None]
    elif material == "knitted":
        k = max(2.5, p / 2.2)
        rib = 0.72 + 0.28 * np.abs(np.sin(math.pi * xx / k))
        vee = ((yy + np.abs((xx % k) - k / 2)) % (k * 0.9)) < (k * 0.3)
        img = img * rib[..., None] * np.where(vee, 0.8, 1.0)[..., None] + 18 * (1 - rib)[..., None]
    if style == "photo" and material in ("matte", "knitted"):
        img = img * (1.1 - 0.28 * (xx / max(w, 1)) - 0.1 * (yy / max(h, 1)))[..., None]
    return np.clip(img, 0, 255).astype(np.uint8)


def texture_image(tex: Tex, style: str, w: int, h: int) -> Image.Image:
    # Computed at half resolution: the whole image is box-downsampled 2x at the end anyway.
    hw, hh = (w + 1) // 2, (h + 1) // 2
    arr = _texture_array(tex.color, tex.pattern, tex.material, style, hw, hh, int(round(tex.period / 2)))
    return Image.fromarray(arr, "RGB").resize((w, h), Image.BILINEAR)


class Painter:
    """Draws shape lists onto the transparent subject layer, in the style's outline convention."""

    def __init__(self, size: int, style: str):
        self.size = size
        self.style = style
        self.img = Image.new("RGBA", (size, size), (0, 0, 0, 0))
        self.draw = ImageDraw.Draw(self.img)
        self.ow = {"flat": max(2, size // 70), "sketch": max(1, size // 110)}.get(style, max(1, size // 220))
        self.outline = SENTINEL if style == "sketch" else (FLAT_OUTLINE if style == "flat" else None)
        self.shadows: list[tuple[float, float, float, float]] = []  # ellipses on the ground

    # shapes: ("poly", pts) | ("ellipse", box) | ("limb", pts, width) | ("rrect", box, r) | ("chord", box, a0, a1)
    #         | ("arc", box, a0, a1, width)
    def _render(self, d: ImageDraw.ImageDraw, shapes, fill, grow: float = 0.0, dx: float = 0.0, dy: float = 0.0):
        for s in shapes:
            kind = s[0]
            if kind == "poly":
                pts = [(x + dx, y + dy) for x, y in s[1]]
                d.polygon(pts, fill=fill)
                if grow > 0:
                    d.line(pts + [pts[0]], fill=fill, width=int(round(2 * grow)), joint="curve")
            elif kind == "ellipse":
                x0, y0, x1, y1 = s[1]
                d.ellipse((x0 + dx - grow, y0 + dy - grow, x1 + dx + grow, y1 + dy + grow), fill=fill)
            elif kind == "rrect":
                x0, y0, x1, y1 = s[1]
                d.rounded_rectangle(
                    (x0 + dx - grow, y0 + dy - grow, x1 + dx + grow, y1 + dy + grow), radius=s[2] + grow, fill=fill
                )
            elif kind == "limb":
                pts = [(x + dx, y + dy) for x, y in s[1]]
                w = s[2] + 2 * grow
                d.line(pts, fill=fill, width=max(1, int(round(w))), joint="curve")
                for x, y in (pts[0], pts[-1]):
                    d.ellipse((x - w / 2, y - w / 2, x + w / 2, y + w / 2), fill=fill)
            elif kind == "chord":
                x0, y0, x1, y1 = s[1]
                d.chord((x0 + dx - grow, y0 + dy - grow, x1 + dx + grow, y1 + dy + grow), s[2], s[3], fill=fill)
            elif kind == "arc":
                x0, y0, x1, y1 = s[1]
                d.arc(
                    (x0 + dx - grow, y0 + dy - grow, x1 + dx + grow, y1 + dy + grow),
                    s[2],
                    s[3],
                    fill=fill,
                    width=max(1, int(round(s[4] + 2 * grow))),
                )
            else:  # pragma: no cover - programming error
                raise ValueError(f"unknown shape kind {kind!r}")

    @staticmethod
    def _bbox(shapes) -> tuple[float, float, float, float]:
        xs, ys = [], []
        for s in shapes:
            if s[0] in ("poly", "limb"):
                pad = s[2] / 2 if s[0] == "limb" else 0
                for x, y in s[1]:
                    xs += [x - pad, x + pad]
                    ys += [y - pad, y + pad]
            else:
                x0, y0, x1, y1 = s[1]
                pad = s[4] if s[0] == "arc" else 0
                xs += [x0 - pad, x1 + pad]
                ys += [y0 - pad, y1 + pad]
        return min(xs), min(ys), max(xs), max(ys)

    def shape(self, shapes, fill, outline: bool = True, photo_edge=None):
        """Fill `shapes` (one silhouette) with a solid RGB or a `Tex`, outlined by the style."""
        if outline and self.outline is not None:
            self._render(self.draw, shapes, self.outline + (255,), grow=self.ow)
        elif outline and photo_edge is not None:
            self._render(self.draw, shapes, photo_edge + (255,), grow=self.ow)
        if isinstance(fill, Tex):
            x0, y0, x1, y1 = self._bbox(shapes)
            x0, y0 = int(math.floor(x0)) - 1, int(math.floor(y0)) - 1
            x1, y1 = int(math.ceil(x1)) + 2, int(math.ceil(y1)) + 2
            w, h = x1 - x0, y1 - y0
            if w <= 0 or h <= 0:
                return
            mask = Image.new("L", (w, h), 0)
            self._render(ImageDraw.Draw(mask), shapes, 255, dx=-x0, dy=-y0)
            self.img.paste(texture_image(fill, self.style, w, h), (x0, y0), mask)
        else:
            self._render(self.draw, shapes, tuple(fill) + (255,))

    def detail(self, shapes, rgb):
        """Small marks (buttons, eyes, seams) drawn without outline."""
        self._render(self.draw, shapes, tuple(rgb) + (255,))

    def line(self, pts, rgb, width: float):
        self.draw.line(pts, fill=tuple(rgb) + (255,), width=max(1, int(round(width))), joint="curve")

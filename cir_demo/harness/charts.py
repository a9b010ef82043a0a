"""Small charts drawn with Pillow: grouped horizontal bars, a labelled scatter and lines over cutoffs,
each as PNG and, from the same drawing calls (`vector_charts.Recorder`), as SVG and PDF.

The report needs a handful of simple charts. matplotlib takes longer to import
and to draw them than the whole PinPoint evaluation takes, so we draw them
directly: Pillow's built-in scalable font, no global state, one drawing per
call for all formats. Bars run horizontally so that long category names stay readable.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from cir_demo.harness import vector_charts
from cir_demo.utils.io import atomic_path

# matplotlib's "tab10" colours: familiar, and distinguishable for most colour-blind readers
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
INK, GRID, BG = "#222222", "#dddddd", "white"
SCALE = 2  # drawn at twice the size for crisp text
ALL_FORMATS = ("png", *vector_charts.VECTOR_FORMATS)


def _fonts():
    from PIL import ImageFont

    return ImageFont.load_default(size=12 * SCALE), ImageFont.load_default(size=14 * SCALE)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About `n` round tick values covering [lo, hi] (steps 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi - lo < 1e-6:  # all values equal (e.g. all 0): show a unit range
        hi = lo + 1.0
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    i = math.floor(lo / step + 1e-9)
    ticks = [round(i * step, 12)]
    while ticks[-1] < hi - 1e-12:
        i += 1
        ticks.append(round(i * step, 12))
    return ticks


def _fmt(v: float, step: float = 0.01) -> str:
    """A tick value with the decimals its tick step needs (0.0025 steps: 0.0025, 0.005, never 0.01 twice)."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 2
    if abs(step * 10**decimals - round(step * 10**decimals)) > 1e-9:
        decimals += 1  # 2.5 x a power of ten
    return f"{v:.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{v:.0f}"


def _step(ticks: Sequence[float]) -> float:
    return ticks[1] - ticks[0] if len(ticks) > 1 else 1.0


def _place_label(draw, text: str, font, px: float, py: float, r: float, taken: list, bounds) -> tuple[float, float]:
    """Where a point's label goes: right of the dot, else left, else stepped below or above it, the
    first place that overlaps no label placed before and stays inside `bounds` (x0, y0, x1, y1)."""
    w, h = _text_w(draw, text, font), 16 * SCALE
    gap = r + 4 * SCALE
    spots = [(px + gap, py - h / 2), (px - gap - w, py - h / 2)]
    for i in range(1, 12):
        for dy in (i * h, -i * h):
            spots += [(px + gap, py - h / 2 + dy), (px - gap - w, py - h / 2 + dy)]
    for x, y in spots:
        box = (x, y, x + w, y + h)
        inside = box[0] >= bounds[0] and box[1] >= bounds[1] and box[2] <= bounds[2] and box[3] <= bounds[3]
        if inside and not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in taken):
            taken.append(box)
            return x, y
    return spots[0]


def _text_w(draw, text: str, font) -> int:
    box = draw.textbbox((0, 0), text, font=font)
    return box[2] - box[0]


def _fit(draw, text: str, font, width: int) -> str:
    if _text_w(draw, text, font) <= width:
        return text
    while len(text) > 1 and _text_w(draw, text + "…", font) > width:
        text = text[:-1]
    return text + "…"


def _canvas(width: int, height: int):
    """(image, its recording draw): alpha fills blend over what is drawn below them."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), BG)
    return img, vector_charts.Recorder(ImageDraw.Draw(img, "RGBA"), (width, height), SCALE)


def _save(img, rec, path: Path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """`path` (PNG) and the vector formats beside it, each asked for in `formats`."""
    out = []
    if "png" in formats:
        path.parent.mkdir(parents=True, exist_ok=True)
        small = img.resize((img.width // SCALE, img.height // SCALE), resample=4)  # LANCZOS
        with atomic_path(path) as tmp:
            small.save(tmp, format="PNG", optimize=False)
        out.append(path)
    return out + vector_charts.save(rec, path, [f for f in formats if f != "png"])


def _legend(draw, names: Sequence[str], x: int, y: int, font) -> int:
    """Legend rows from (x, y); returns the y below it."""
    s = 10 * SCALE
    for i, name in enumerate(names):
        draw.rectangle([x, y + 3 * SCALE, x + s, y + 3 * SCALE + s], fill=PALETTE[i % len(PALETTE)])
        draw.text((x + s + 6 * SCALE, y), name, fill=INK, font=font)
        y += 18 * SCALE
    return y


def bar_chart(
    path: Path,
    categories: Sequence[str],
    series: dict[str, Sequence[float]],
    title: str,
    xlabel: str,
    intervals: dict[str, Sequence[tuple[float, float]]] | None = None,
) -> Path:
    """Grouped horizontal bars as PNG (`bar_chart_files`)."""
    return bar_chart_files(path, categories, series, title, xlabel, intervals, ("png",))[0]


def bar_chart_files(
    path: Path,
    categories: Sequence[str],
    series: dict[str, Sequence[float]],
    title: str,
    xlabel: str,
    intervals: dict[str, Sequence[tuple[float, float]]] | None = None,
    formats: Sequence[str] = ALL_FORMATS,
) -> list[Path]:
    """Grouped horizontal bars: one group per category, one bar per series (NaN: no bar), optional CI
    whiskers; as `path` and its other `formats`."""
    from PIL import Image, ImageDraw

    small, big = _fonts()
    names = list(series)
    n_cat, n_ser = max(len(categories), 1), max(len(names), 1)
    bar_h = 14 * SCALE
    group_h = bar_h * n_ser + 10 * SCALE
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_w = min(max([_text_w(probe, str(c), small) for c in categories] + [40 * SCALE]), 260 * SCALE)
    legend_w = max([_text_w(probe, n, small) for n in names] + [0]) + 30 * SCALE
    plot_w = 420 * SCALE
    left, top = label_w + 20 * SCALE, 40 * SCALE
    width = left + plot_w + 20 * SCALE + legend_w
    height = top + group_h * n_cat + 50 * SCALE
    img, draw = _canvas(width, height)
    draw.text((left, 10 * SCALE), title, fill=INK, font=big)

    values = [v for vs in series.values() for v in vs if v is not None and math.isfinite(v)]
    if intervals:
        values += [b for iv in intervals.values() for pair in iv for b in pair if b is not None and math.isfinite(b)]
    ticks = nice_ticks(min([0.0] + values), max(values + [0.0]))
    lo, hi = ticks[0], ticks[-1]

    def x_of(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    bottom = top + group_h * n_cat
    for t in ticks:
        x = x_of(t)
        draw.line([x, top, x, bottom], fill=GRID, width=SCALE)
        s = _fmt(t, _step(ticks))
        draw.text((x - _text_w(draw, s, small) / 2, bottom + 4 * SCALE), s, fill=INK, font=small)
    draw.text((left + plot_w / 2 - _text_w(draw, xlabel, small) / 2, bottom + 22 * SCALE), xlabel, fill=INK, font=small)
    for ci, cat in enumerate(categories):
        y0 = top + ci * group_h + 5 * SCALE
        label = _fit(draw, str(cat), small, label_w)
        draw.text(
            (left - 8 * SCALE - _text_w(draw, label, small), y0 + (bar_h * n_ser) / 2 - 8 * SCALE),
            label,
            fill=INK,
            font=small,
        )
        for si, name in enumerate(names):
            v = series[name][ci]
            if v is None or not math.isfinite(v):
                continue
            y = y0 + si * bar_h
            draw.rectangle(
                [x_of(min(v, 0.0)), y + SCALE, x_of(max(v, 0.0)), y + bar_h - SCALE], fill=PALETTE[si % len(PALETTE)]
            )
            iv = (intervals or {}).get(name)
            if iv is not None and all(b is not None and math.isfinite(b) for b in iv[ci]):
                a, b = x_of(iv[ci][0]), x_of(iv[ci][1])
                mid = y + bar_h / 2
                draw.line([a, mid, b, mid], fill=INK, width=SCALE)
                draw.line([a, mid - 3 * SCALE, a, mid + 3 * SCALE], fill=INK, width=SCALE)
                draw.line([b, mid - 3 * SCALE, b, mid + 3 * SCALE], fill=INK, width=SCALE)
    draw.line(
        [x_of(0.0) if lo <= 0 <= hi else left, top, x_of(0.0) if lo <= 0 <= hi else left, bottom], fill=INK, width=SCALE
    )
    _legend(draw, names, left + plot_w + 20 * SCALE, top, small)
    return _save(img, draw, path, formats)


def scatter_chart(
    path: Path,
    points: dict[str, tuple[float, float]],
    title: str,
    xlabel: str,
    ylabel: str,
    formats: Sequence[str] = ("png",),
) -> list[Path]:
    """One labelled dot per name at (x, y); as `path` and its other `formats`."""
    small, big = _fonts()
    plot_w, plot_h = 460 * SCALE, 320 * SCALE
    left, top = 60 * SCALE, 56 * SCALE
    img, draw = _canvas(left + plot_w + 40 * SCALE, top + plot_h + 50 * SCALE)
    draw.text((left, 6 * SCALE), title, fill=INK, font=big)
    xs = [x for x, _ in points.values() if math.isfinite(x)]
    ys = [y for _, y in points.values() if math.isfinite(y)]
    xt = nice_ticks(min(xs + [0.0]), max(xs + [0.0]))
    yt = nice_ticks(min(ys + [0.0]), max(ys + [0.0]))

    def pos(x: float, y: float) -> tuple[float, float]:
        return (left + (x - xt[0]) / (xt[-1] - xt[0]) * plot_w, top + plot_h - (y - yt[0]) / (yt[-1] - yt[0]) * plot_h)

    for t in xt:
        x, _ = pos(t, yt[0])
        draw.line([x, top, x, top + plot_h], fill=GRID, width=SCALE)
        s = _fmt(t, _step(xt))
        draw.text((x - _text_w(draw, s, small) / 2, top + plot_h + 4 * SCALE), s, fill=INK, font=small)
    for t in yt:
        _, y = pos(xt[0], t)
        draw.line([left, y, left + plot_w, y], fill=GRID, width=SCALE)
        s = _fmt(t, _step(yt))
        draw.text((left - 6 * SCALE - _text_w(draw, s, small), y - 8 * SCALE), s, fill=INK, font=small)
    draw.rectangle([left, top, left + plot_w, top + plot_h], outline=INK, width=SCALE)
    draw.text(
        (left + plot_w / 2 - _text_w(draw, xlabel, small) / 2, top + plot_h + 24 * SCALE), xlabel, fill=INK, font=small
    )
    draw.text((left - 40 * SCALE, top - 20 * SCALE), ylabel, fill=INK, font=small)
    r = 5 * SCALE
    shown = [
        (i, name, pos(x, y)) for i, (name, (x, y)) in enumerate(points.items()) if math.isfinite(x) and math.isfinite(y)
    ]
    taken = [(px - r, py - r, px + r, py + r) for _, _, (px, py) in shown]  # labels never cover a dot
    for i, name, (px, py) in shown:
        draw.ellipse([px - r, py - r, px + r, py + r], fill=PALETTE[i % len(PALETTE)])
    for i, name, (px, py) in shown:
        lx, ly = _place_label(draw, name, small, px, py, r, taken, (left, top, img.width - 4 * SCALE, top + plot_h))
        if abs(ly + 8 * SCALE - py) > 8 * SCALE:  # moved off the dot's line: a leader line says whose it is
            draw.line(
                [px, py, lx if lx > px else lx + _text_w(draw, name, small), ly + 8 * SCALE],
                fill=PALETTE[i % len(PALETTE)],
                width=SCALE,
            )
        draw.text((lx, ly), name, fill=INK, font=small)
    return _save(img, draw, path, formats)


def line_chart_files(
    path: Path,
    ks: Sequence[int],
    series: dict[str, Sequence[float]],
    title: str,
    ylabel: str,
    bands: dict[str, Sequence[tuple[float, float]]] | None = None,
    formats: Sequence[str] = ALL_FORMATS,
) -> list[Path]:
    """One line per run over the cutoffs k (log-scaled when they span a decade), its 95% interval
    shaded; as `path` and its other `formats`."""
    small, big = _fonts()
    probe = _canvas(1, 1)[1]
    legend_w = max([_text_w(probe, n, small) for n in series] + [0]) + 30 * SCALE
    plot_w, plot_h = 420 * SCALE, 280 * SCALE
    left, top = 60 * SCALE, 56 * SCALE
    img, draw = _canvas(left + plot_w + 20 * SCALE + legend_w, top + plot_h + 50 * SCALE)
    draw.text((left, 6 * SCALE), title, fill=INK, font=big)
    values = [v for vs in series.values() for v in vs if _finite(v)]
    values += [b for band in (bands or {}).values() for pair in band for b in pair if _finite(b)]
    yt = nice_ticks(min(values + [0.0]), max(values + [0.0]))
    log = len(ks) > 1 and max(ks) / max(min(ks), 1) >= 10
    at = [math.log10(max(k, 1e-9)) if log else float(k) for k in ks]
    lo, hi = (min(at), max(at)) if len(at) > 1 and max(at) > min(at) else (at[0] - 1, at[0] + 1)

    def pos(i: int, y: float) -> tuple[float, float]:
        pad = 0.04 * plot_w
        x = left + pad + (at[i] - lo) / (hi - lo) * (plot_w - 2 * pad)
        return x, top + plot_h - (y - yt[0]) / (yt[-1] - yt[0]) * plot_h

    for t in yt:
        _, y = pos(0, t)
        draw.line([left, y, left + plot_w, y], fill=GRID, width=SCALE)
        s = _fmt(t, _step(yt))
        draw.text((left - 6 * SCALE - _text_w(draw, s, small), y - 8 * SCALE), s, fill=INK, font=small)
    last_right = -math.inf
    for i, k in enumerate(ks):
        x, _ = pos(i, yt[0])
        draw.line([x, top, x, top + plot_h], fill=GRID, width=SCALE)
        s, w = str(k), _text_w(draw, str(k), small)
        if x - w / 2 > last_right + 2 * SCALE:  # crowded cutoffs on a log scale: every label that fits
            draw.text((x - w / 2, top + plot_h + 4 * SCALE), s, fill=INK, font=small)
            last_right = x + w / 2
    for i, (name, band) in enumerate((bands or {}).items()):
        upper = [pos(j, hi_) for j, (_, hi_) in enumerate(band) if _finite(hi_)]
        lower = [pos(j, lo_) for j, (lo_, _) in enumerate(band) if _finite(lo_)]
        if len(upper) > 1 and len(upper) == len(lower):
            draw.polygon(
                [c for p in upper + lower[::-1] for c in p], fill=_colour(list(series).index(name)), opacity=0.2
            )
    for i, (name, vals) in enumerate(series.items()):
        points = [pos(j, v) for j, v in enumerate(vals) if _finite(v)]
        if len(points) > 1:
            draw.line([c for p in points for c in p], fill=_colour(i), width=SCALE)
        for px, py in points:
            draw.ellipse([px - 3 * SCALE, py - 3 * SCALE, px + 3 * SCALE, py + 3 * SCALE], fill=_colour(i))
    draw.rectangle([left, top, left + plot_w, top + plot_h], outline=INK, width=SCALE)
    xlabel = "k (cutoff)" + (", log scale" if log else "")
    draw.text(
        (left + plot_w / 2 - _text_w(draw, xlabel, small) / 2, top + plot_h + 24 * SCALE), xlabel, fill=INK, font=small
    )
    draw.text((left - 40 * SCALE, top - 20 * SCALE), ylabel, fill=INK, font=small)
    _legend(draw, list(series), left + plot_w + 20 * SCALE, top, small)
    return _save(img, draw, path, formats)


def _finite(v) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]

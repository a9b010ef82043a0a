"""One scene -> one image: background, subject layer, weather, then the art style (photo
shading and grain, flat outlines, sketch hatching), drawn at twice the size and downsampled."""

from __future__ import annotations

import functools
import random

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter

from ..scene import Scene
from .palette import GRAPHITE, LIGHT, PAPER, RENDER_SIZE, SENTINEL, SUPERSAMPLE
from .paint import Painter, Tex
from .figures import draw_item, draw_person, draw_secondary
from .layout import layout
from .backgrounds import background_image


@functools.lru_cache(maxsize=16)
def _weather_overlay(weather: str, style: str, S: int, seed: int) -> Image.Image:
    """Rain or snow over the whole outdoor picture (RGBA)."""
    ov = Image.new("RGBA", (S, S), (0, 0, 0, 0))
    d = ImageDraw.Draw(ov)
    rnd = random.Random(f"weather/{weather}/{seed}")
    if weather == "rainy":
        col = SENTINEL + (255,) if style == "sketch" else (220, 228, 244, 190)
        for _ in range(170):
            x, y = rnd.random() * S * 1.2, rnd.random() * S
            ln = (0.04 + 0.035 * rnd.random()) * S
            d.line((x, y, x - ln * 0.3, y + ln), fill=col, width=max(1, S // 200))
    elif weather == "snowy":
        for _ in range(150):
            x, y = rnd.random() * S, rnd.random() * S
            r = (0.006 + 0.007 * rnd.random()) * S
            d.ellipse(
                (x - r, y - r, x + r, y + r),
                fill=(255, 255, 255, 235),
                outline=SENTINEL + (255,) if style == "sketch" else (190, 196, 210, 160),
            )
    return ov


@functools.lru_cache(maxsize=4)
def _grain(S: int) -> Image.Image:
    """Film grain, centred on 16 (subtracted again when added), twice as wide as the image."""
    rng = np.random.default_rng(12345)
    g = np.clip(rng.normal(16, 5.0, size=(S, 2 * S, 1)), 0, 32).astype(np.uint8)
    return Image.fromarray(np.repeat(g, 3, axis=2), "RGB")


@functools.lru_cache(maxsize=4)
def _photo_light(S: int) -> Image.Image:
    yy, xx = np.mgrid[0:S, 0:S].astype(np.float32) / S
    v = 1.0 - 0.16 * (0.6 * xx + 0.4 * yy) - 0.3 * ((xx - 0.5) ** 2 + (yy - 0.5) ** 2)
    v = np.clip(255 * v, 0, 255).astype(np.uint8)
    return Image.fromarray(np.dstack([v, v, v]), "RGB")


@functools.lru_cache(maxsize=4)
def _hatch_weights(S: int) -> tuple[Image.Image, Image.Image, Image.Image]:
    """Per-pixel pencil strength on subjects and on the background, and the paper."""
    yy, xx = np.mgrid[0:S, 0:S]
    pf, pb = max(5, S // 48), max(7, S // 26)
    fg = np.where(((xx + yy) % pf) < max(2, pf // 3), 0.97, 0.6)
    bg = np.where(((xx + yy) % pb) < max(2, pb // 4), 0.6, 0.26)
    rng = np.random.default_rng(7)
    paper = np.clip(PAPER + rng.normal(0, 3.0, size=(S, S, 1)), 0, 255).astype(np.uint8)
    return (
        Image.fromarray((fg * 255).astype(np.uint8), "L"),
        Image.fromarray((bg * 255).astype(np.uint8), "L"),
        Image.fromarray(paper, "RGB"),
    )


def _to_sketch(img: Image.Image, fg_alpha: Image.Image, S: int) -> Image.Image:
    """Graphite outlines (sentinel pixels) and coloured-pencil hatching on paper."""
    a = np.asarray(img)
    lines = (a[..., 0] == SENTINEL[0]) & (a[..., 1] == SENTINEL[1]) & (a[..., 2] == SENTINEL[2])
    thick = lines.copy()  # PIL strokes come out thin: thicken by one pixel
    thick[1:, :] |= lines[:-1, :]
    thick[:, 1:] |= lines[:, :-1]
    k_fg, k_bg, paper = _hatch_weights(S)
    k = Image.composite(k_fg, k_bg, fg_alpha)
    out = Image.composite(img, paper, k)
    out.paste(tuple(int(v) for v in GRAPHITE), (0, 0), Image.fromarray(thick.astype(np.uint8) * 255, "L"))
    return out


@functools.lru_cache(maxsize=8)
def _light_lut(time_: str) -> list[int]:
    f = LIGHT[time_]
    lut = []
    for band in range(3):
        lut += [min(255, int(round(v * f[band]))) for v in range(256)]
    return lut + list(range(256))


@functools.lru_cache(maxsize=2)
def _shadow_sprite() -> Image.Image:
    m = Image.new("L", (128, 48), 0)
    ImageDraw.Draw(m).ellipse((16, 12, 112, 36), fill=120)
    return m.filter(ImageFilter.GaussianBlur(7))


def render_scene(scene: Scene, size: int = RENDER_SIZE) -> Image.Image:
    """The scene as an RGB image of `size` x `size` pixels (deterministic)."""
    if size < 32:
        raise ValueError(f"render size must be at least 32 pixels, got {size}")
    S = size * SUPERSAMPLE
    rnd = random.Random(scene.variant)
    style = scene.style
    bg = background_image(scene.place, scene.time, scene.weather, style, scene.view, S, scene.variant % 2).copy()

    pt = Painter(S, style)
    placed = layout(scene, S, rnd)
    period = max(6.0, (placed[-1].h if not scene.has_person else placed[-1].h * 0.6) / 7.0)
    tex = Tex(scene.color, scene.pattern, scene.material, period)

    # ground shadows (photo: soft, flat: a solid darker ellipse, sketch: none)
    if style != "sketch":
        for p in placed:
            if scene.has_person and scene.view == "close-up" and p.what == "subject":
                continue
            sw = p.w * 0.55
            box = (int(p.cx - sw), int(p.base - 0.03 * S), int(p.cx + sw), int(p.base + 0.025 * S))
            if style == "photo":
                m = _shadow_sprite().resize((max(1, box[2] - box[0]), max(1, box[3] - box[1])), Image.BILINEAR)
            else:
                m = Image.new("L", (max(1, box[2] - box[0]), max(1, box[3] - box[1])), 0)
                ImageDraw.Draw(m).ellipse((0, m.height * 0.2, m.width - 1, m.height * 0.85), fill=70)
            bg.paste((20, 20, 30), box[:2], m)

    for p in placed:
        if p.what == "secondary":
            draw_secondary(pt, scene.secondary, p.cx, p.base, p.h)
    for p in placed:
        if p.what == "subject":
            if scene.has_person:
                draw_person(pt, scene, p.cx, p.base, p.h, rnd, tex)
            else:
                draw_item(pt, scene, p.cx, p.base, p.h, tex)

    fg = pt.img
    if style != "sketch" and scene.time != "day":  # sketches keep true colours; time shows in the sky
        fg = fg.point(_light_lut(scene.time))
    out = bg
    out.paste(fg, (0, 0), fg)
    if scene.weather == "foggy" and scene.place != "room":
        out = Image.blend(out, Image.new("RGB", (S, S), (220, 220, 224)), 0.2)
    if scene.weather in ("rainy", "snowy") and scene.place != "room":
        ov = _weather_overlay(scene.weather, style, S, scene.variant % 3)
        out.paste(ov, (0, 0), ov)
    if style == "sketch":
        out = _to_sketch(out, pt.img.getchannel("A"), S)
    out = out.reduce(SUPERSAMPLE)
    if style == "photo":  # light from the upper left, vignette and film grain, at output size (cheap)
        out = ImageChops.multiply(out, _photo_light(size))
        shift = scene.variant % size
        out = ImageChops.add(out, _grain(size).crop((shift, 0, shift + size, size)), offset=-16)
    return out

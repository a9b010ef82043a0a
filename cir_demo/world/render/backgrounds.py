"""The background: sky by time of day and weather, room or outdoor place, particles (cached)."""

from __future__ import annotations

import functools
import math
import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from .palette import FLAT_OUTLINE, SENTINEL, mix, shade


SKY = {
    "morning": [(0.0, (120, 172, 222)), (0.7, (236, 206, 190)), (1.0, (252, 214, 160))],
    "day": [(0.0, (52, 124, 218)), (1.0, (168, 208, 246))],
    "sunset": [(0.0, (64, 44, 112)), (0.55, (222, 92, 70)), (1.0, (255, 176, 78))],
    "night": [(0.0, (8, 12, 34)), (1.0, (34, 44, 86))],
}
# Bad weather greys the sky, but not so much that the time of day disappears.
WEATHER_SKY = {"rainy": ((104, 110, 122), 0.55), "snowy": ((150, 160, 176), 0.5), "foggy": ((206, 206, 210), 0.62)}
GROUND_LIGHT = {
    "morning": (1.0, 0.97, 0.92),
    "day": (1.0, 1.0, 1.0),
    "sunset": (0.95, 0.76, 0.62),
    "night": (0.3, 0.34, 0.5),
}


def _gradient(stops, n: int) -> np.ndarray:
    t = np.linspace(0, 1, n)
    pos = [s[0] for s in stops]
    cols = np.array([s[1] for s in stops], dtype=np.float32)
    return np.stack([np.interp(t, pos, cols[:, c]) for c in range(3)], axis=1)


def _sky_array(time_: str, weather: str, w: int, h: int, style: str) -> np.ndarray:
    if style == "photo":
        col = _gradient(SKY[time_], h)
    else:  # flat and sketch: two bands instead of a smooth gradient
        g = _gradient(SKY[time_], 4)
        col = np.repeat(g[[1, 1, 2, 2]], int(math.ceil(h / 4)), axis=0)[:h]
    if weather in WEATHER_SKY:
        c, k = WEATHER_SKY[weather]
        light = np.array(GROUND_LIGHT[time_]) ** 0.7
        col = col * (1 - k) + np.array(c, dtype=np.float32) * light * k
    return np.broadcast_to(col[:, None, :], (h, w, 3)).copy()


def _lit(rgb, time_: str, weather: str = "clear"):
    f = GROUND_LIGHT[time_]
    c = tuple(x * m for x, m in zip(rgb, f))
    if weather == "snowy":
        c = mix(c, shade((236, 240, 246), max(f)), 0.7)
    elif weather == "rainy":
        c = shade(c, 0.82)
    return tuple(int(max(0, min(255, v))) for v in c)


def _sky_decor(
    d: ImageDraw.ImageDraw,
    S: int,
    time_: str,
    weather: str,
    x0: float,
    y0: float,
    x1: float,
    y1: float,
    outline,
    rnd: random.Random,
    sun: bool = True,
):
    """Sun, moon, stars and clouds inside the sky rectangle (x0, y0)-(x1, y1)."""
    w, h = x1 - x0, y1 - y0
    ol = dict(outline=outline, width=max(1, S // 160)) if outline else {}
    if weather == "clear":
        if time_ == "night":
            for _ in range(int(40 * w * h / (S * S)) + 4):
                sx, sy = x0 + rnd.random() * w, y0 + rnd.random() * h * 0.8
                r = S * 0.004 * (1 + rnd.random())
                d.ellipse((sx - r, sy - r, sx + r, sy + r), fill=(240, 240, 220))
            if sun:
                mx, my, r = x0 + 0.7 * w, y0 + 0.28 * h, 0.065 * S
                d.ellipse((mx - r, my - r, mx + r, my + r), fill=(244, 240, 214), **ol)
                d.ellipse((mx - r * 0.4, my - r * 1.1, mx + r * 1.5, my + r * 0.8), fill=(16, 22, 50))
        elif not sun:
            pass
        elif time_ == "sunset":
            sx, sy, r = x0 + 0.7 * w, y1 - 0.02 * S, 0.12 * S
            d.ellipse((sx - r, sy - r, sx + r, sy + r), fill=(255, 120, 50), **ol)
        elif time_ == "morning":
            sx, sy, r = x0 + 0.2 * w, y0 + 0.72 * h, 0.07 * S
            d.ellipse((sx - r * 1.6, sy - r * 1.6, sx + r * 1.6, sy + r * 1.6), fill=(252, 226, 180))
            d.ellipse((sx - r, sy - r, sx + r, sy + r), fill=(255, 236, 150), **ol)
        else:
            sx, sy, r = x0 + 0.82 * w, y0 + 0.2 * h, 0.065 * S
            d.ellipse((sx - r * 1.5, sy - r * 1.5, sx + r * 1.5, sy + r * 1.5), fill=(214, 234, 252))
            d.ellipse((sx - r, sy - r, sx + r, sy + r), fill=(255, 244, 170), **ol)
            for cx_, cy_ in ((0.25, 0.3), (0.55, 0.18)):
                cx, cy = x0 + cx_ * w, y0 + cy_ * h
                for dx, dy, rr in ((-0.05, 0.01, 0.035), (0, -0.015, 0.045), (0.05, 0.01, 0.035)):
                    d.ellipse(
                        (cx + (dx - rr) * S, cy + (dy - rr) * S, cx + (dx + rr) * S, cy + (dy + rr) * S),
                        fill=(250, 250, 252),
                    )
    elif weather in ("rainy", "snowy"):
        cloud = _lit((92, 96, 108) if weather == "rainy" else (176, 182, 194), time_, "clear")
        for cx_, cy_ in ((0.2, 0.15), (0.5, 0.08), (0.82, 0.18)):
            cx, cy = x0 + cx_ * w, y0 + cy_ * h
            for dx, dy, rr in ((-0.08, 0.02, 0.06), (0, -0.02, 0.08), (0.08, 0.02, 0.06)):
                d.ellipse((cx + (dx - rr) * S, cy + (dy - rr) * S, cx + (dx + rr) * S, cy + (dy + rr) * S), fill=cloud)


def _bg_room(img, d, S, time_, weather, style, outline, rnd, close: bool = False):
    wall = _lit((226, 212, 188), "day" if time_ != "night" else "night")
    if time_ == "night":
        wall = mix(wall, (120, 96, 70), 0.35)
    elif time_ == "sunset":
        wall = mix(wall, (236, 170, 120), 0.3)
    floor_y = int((0.8 if close else 0.7) * S)
    d.rectangle((0, 0, S, floor_y), fill=wall)
    step = S // 6 if close else S // 10
    for x in range(0, S, step):  # wallpaper stripes
        d.rectangle((x, 0, x + step // 4, floor_y), fill=shade(wall, 0.96))
    wood = _lit((156, 108, 66), "day" if time_ != "night" else "night")
    d.rectangle((0, floor_y, S, S), fill=wood)
    for i in range(6):
        y = floor_y + (S - floor_y) * (i / 6) ** 1.3
        d.line((0, y, S, y), fill=shade(wood, 0.85), width=max(1, S // 200))
    d.rectangle((0, floor_y - S // 40, S, floor_y), fill=shade(wall, 0.8))
    # Two windows show the time of day and the weather outside, so the subject never hides both.
    if close:
        windows = [(0.02, 0.03, 0.3, 0.5), (0.7, 0.03, 0.98, 0.5)]
    else:
        windows = [(0.05, 0.08, 0.33, 0.5), (0.67, 0.08, 0.95, 0.5)]
    frame = (250, 250, 246) if time_ != "night" else (150, 150, 150)
    fw = max(2, S // 45)
    for k, (u0, v0, u1, v1) in enumerate(windows):
        wx0, wy0, wx1, wy1 = int(u0 * S), int(v0 * S), int(u1 * S), int(v1 * S)
        ww, wh = wx1 - wx0, wy1 - wy0
        win = Image.fromarray(_sky_array(time_, weather, ww, wh, style).astype(np.uint8), "RGB")
        wd = ImageDraw.Draw(win)  # drawn on the pane itself, so clouds stay inside the window
        _sky_decor(wd, S, time_, weather, 0, 0, ww, wh, outline, rnd, sun=(k == 0))
        hills = _lit((110, 160, 96), time_, weather)
        wd.polygon([(0, wh), (0, wh - 0.06 * S), (0.12 * S, wh - 0.1 * S), (ww, wh - 0.05 * S), (ww, wh)], fill=hills)
        _particles(wd, S, weather, (0, 0, ww, wh), rnd, outline, density=2.5)
        if weather == "foggy":
            win = Image.blend(win, Image.new("RGB", (ww, wh), (224, 224, 228)), 0.7)
        img.paste(win, (wx0, wy0))
        d.rectangle((wx0, wy0, wx1, wy1), outline=frame, width=fw)
        d.line(((wx0 + wx1) / 2, wy0, (wx0 + wx1) / 2, wy1), fill=frame, width=fw)
        d.line((wx0, (wy0 + wy1) / 2, wx1, (wy0 + wy1) / 2), fill=frame, width=fw)
        d.rectangle((wx0 - fw, wy1, wx1 + fw, wy1 + fw * 1.5), fill=shade(frame, 0.9))
        if outline:
            d.rectangle((wx0 - fw, wy0 - fw, wx1 + fw, wy1 + fw), outline=outline, width=max(1, S // 160))
    if outline:
        d.line((0, floor_y, S, floor_y), fill=outline, width=max(1, S // 160))


def _bg_outdoor(img, d, S, place, time_, weather, style, outline, rnd):
    horizon = {"beach": 0.5, "city": 0.64, "garden": 0.58}[place]
    hy = int(horizon * S)
    sky = _sky_array(time_, weather, S, hy, style).astype(np.uint8)
    img.paste(Image.fromarray(sky, "RGB"), (0, 0))
    _sky_decor(d, S, time_, weather, 0, 0, S, hy, outline, rnd)
    ow = max(1, S // 160)
    if place == "beach":
        sea = _lit((40, 118, 182), time_, "clear" if weather == "snowy" else weather)
        d.rectangle((0, hy, S, int(0.62 * S)), fill=sea)
        for i in range(5):
            y = hy + (0.62 * S - hy) * (i + 0.5) / 5
            for x in range(int(-S * 0.05 + rnd.random() * S * 0.1), S, S // 6):
                d.line((x, y, x + S // 14, y), fill=mix(sea, (255, 255, 255), 0.5), width=max(1, S // 180))
        sand = _lit((236, 212, 152), time_, weather)
        d.rectangle((0, int(0.62 * S), S, S), fill=sand)
        d.polygon([(0, 0.62 * S), (S, 0.62 * S), (S, 0.65 * S), (0, 0.66 * S)], fill=mix(sand, (255, 255, 255), 0.35))
        if outline:
            d.line((0, hy, S, hy), fill=outline, width=ow)
            d.line((0, 0.62 * S, S, 0.62 * S), fill=outline, width=ow)
    elif place == "city":
        x = -rnd.random() * 0.1 * S
        i = 0
        while x < S:
            bw = (0.14 + 0.1 * rnd.random()) * S
            top = (0.16 + 0.3 * rnd.random()) * S
            base_c = [(150, 152, 168), (176, 150, 132), (128, 140, 160), (168, 168, 156)][i % 4]
            c = _lit(base_c, time_, "clear")
            d.rectangle((x, top, x + bw, hy), fill=c, outline=outline, width=ow if outline else 0)
            if weather == "snowy":
                d.rectangle((x, top, x + bw, top + 0.015 * S), fill=(240, 242, 248))
            lit = time_ in ("night", "sunset")
            for wy in np.arange(top + 0.03 * S, hy - 0.05 * S, 0.07 * S):
                for wx in np.arange(x + 0.025 * S, x + bw - 0.04 * S, 0.055 * S):
                    on = lit and rnd.random() < 0.6
                    wc = (255, 214, 110) if on else _lit((196, 216, 232), time_, "clear")
                    d.rectangle((wx, wy, wx + 0.028 * S, wy + 0.035 * S), fill=wc)
            x += bw + 0.01 * S
            i += 1
        road = _lit((150, 150, 156), time_, weather)
        d.rectangle((0, hy, S, S), fill=road)
        d.rectangle((0, hy, S, hy + 0.025 * S), fill=shade(road, 0.75))
        for x in range(0, S, S // 5):
            d.line((x, hy + 0.025 * S, x - 0.1 * S, S), fill=shade(road, 0.88), width=max(1, S // 200))
        if outline:
            d.line((0, hy, S, hy), fill=outline, width=ow)
    else:  # garden
        lawn = _lit((96, 172, 72), time_, weather)
        d.rectangle((0, hy, S, S), fill=lawn)
        hedge = _lit((46, 118, 54), time_, weather if weather != "snowy" else "clear")
        tx = (0.12 + 0.06 * rnd.random()) * S
        d.rectangle(
            (tx - 0.025 * S, 0.25 * S, tx + 0.025 * S, hy),
            fill=_lit((110, 74, 44), time_, "clear"),
            outline=outline,
            width=ow if outline else 0,
        )
        d.ellipse(
            (tx - 0.13 * S, 0.06 * S, tx + 0.13 * S, 0.34 * S), fill=hedge, outline=outline, width=ow if outline else 0
        )
        for x in range(-S // 20, S + S // 10, S // 9):
            d.ellipse(
                (x, hy - 0.06 * S, x + S // 7, hy + 0.04 * S), fill=hedge, outline=outline, width=ow if outline else 0
            )
        d.rectangle((0, hy, S, hy + 0.02 * S), fill=hedge)
        if weather == "snowy":
            for x in range(-S // 20, S + S // 10, S // 9):
                d.chord((x, hy - 0.06 * S, x + S // 7, hy - 0.0 * S), 180, 360, fill=(240, 242, 248))
        flower_cols = [(236, 70, 80), (250, 220, 70), (250, 250, 250), (200, 110, 220)]
        for _ in range(14):
            fx, fy = rnd.random() * S, hy + (0.06 + rnd.random() * 0.34) * S
            r = 0.008 * S
            d.ellipse((fx - r, fy - r, fx + r, fy + r), fill=_lit(rnd.choice(flower_cols), time_, weather))
        if outline:
            d.line((0, hy + 0.02 * S, S, hy + 0.02 * S), fill=outline, width=ow)


def _particles(d: ImageDraw.ImageDraw, S: int, weather: str, rect, rnd: random.Random, outline, density: float = 1.0):
    x0, y0, x1, y1 = rect
    area = (x1 - x0) * (y1 - y0) / (S * S)
    if weather == "rainy":
        col = SENTINEL if outline == SENTINEL else (214, 222, 238)
        for _ in range(int(150 * area * density)):
            x, y = x0 + rnd.random() * (x1 - x0), y0 + rnd.random() * (y1 - y0)
            ln = (0.035 + 0.03 * rnd.random()) * S
            d.line((x, y, x - ln * 0.3, y + ln), fill=col, width=max(1, S // 240))
    elif weather == "snowy":
        for _ in range(int(130 * area * density)):
            x, y = x0 + rnd.random() * (x1 - x0), y0 + rnd.random() * (y1 - y0)
            r = (0.006 + 0.006 * rnd.random()) * S
            d.ellipse(
                (x - r, y - r, x + r, y + r), fill=(252, 252, 255), outline=SENTINEL if outline == SENTINEL else None
            )


@functools.lru_cache(maxsize=400)
def background_image(place: str, time_: str, weather: str, style: str, view: str, S: int, seed: int) -> Image.Image:
    rnd = random.Random(f"bg/{place}/{time_}/{weather}/{seed}")
    img = Image.new("RGB", (S, S))
    d = ImageDraw.Draw(img)
    outline = SENTINEL if style == "sketch" else (FLAT_OUTLINE if style == "flat" else None)
    if place == "room":
        _bg_room(img, d, S, time_, weather, style, outline, rnd, close=view == "close-up")
    else:
        _bg_outdoor(img, d, S, place, time_, weather, style, outline, rnd)
    if view == "close-up" and place != "room":
        # Closer camera: a zoomed crop of the same place.
        z = 1.55
        cw = S / z
        cx, cy = S * 0.5, S * 0.46
        img = img.crop((int(cx - cw / 2), int(cy - cw / 2), int(cx + cw / 2), int(cy + cw / 2))).resize(
            (S, S), Image.BILINEAR
        )
    if style == "photo":  # depth of field: the background is out of focus, more so up close
        img = img.filter(ImageFilter.GaussianBlur(S / (100 if view == "close-up" else 240)))
    if weather == "foggy" and place != "room":
        img = Image.blend(img, Image.new("RGB", (S, S), (214, 214, 218)), 0.5)
    return img

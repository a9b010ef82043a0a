"""Deterministic PIL/NumPy renderer: one scene graph -> one RGB image.

Readable shapes and clear colours over realism. Each image is drawn at twice its output
size and box-downsampled (cheap anti-aliasing). The same scene always gives the same bytes:
all jitter comes from `scene.variant`, never from global state.

Layers, back to front: background (place x time x weather, cached), the subjects and the
secondary object on a transparent layer (tinted by the time-of-day light), weather
particles, then the art style: photo (shading, soft shadows, depth blur, grain), flat
(bold outlines, solid fills) or sketch (graphite lines and coloured hatching on paper).
"""
from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter

from . import attributes as A
from .scene import Scene

RENDER_SIZE = 160
SUPERSAMPLE = 2

# Sketch outlines are drawn in this exact colour and found again by equality (PIL draws aliased).
SENTINEL = (1, 2, 3)
FLAT_OUTLINE = (28, 28, 34)
GRAPHITE = np.array([58, 58, 68], dtype=np.float32)
PAPER = np.array([246, 241, 229], dtype=np.float32)

TROUSERS = (58, 62, 74)
SHOES = (40, 36, 36)
HAT_STRAW = (214, 178, 112)
HAT_BAND = (92, 56, 40)
BAG_TAN = (186, 140, 92)
LENS = (36, 40, 52)
METAL = (150, 152, 160)
HAIR_RGB = {"black": (34, 28, 28), "brown": (104, 62, 36), "blonde": (226, 192, 112), "auburn": (152, 62, 32),
            "gray": (176, 176, 180), "none": (0, 0, 0)}
STOOL = (96, 84, 78)

# Light on the subjects by time of day (RGB multipliers).
# Mild on purpose: a white mug at sunset must still read as white.
LIGHT = {"morning": (1.0, 0.97, 0.93), "day": (1.0, 1.0, 1.0), "sunset": (1.0, 0.9, 0.8), "night": (0.8, 0.82, 0.95)}


def _mix(a, b, t: float):
    return tuple(int(round(x + (y - x) * t)) for x, y in zip(a, b))


def _shade(c, f: float):
    return tuple(max(0, min(255, int(round(x * f)))) for x in c)


def _contrast_rgb(color: str):
    """Second colour of a pattern: white on dark/mid colours, navy on light ones."""
    return (40, 44, 80) if color in ("white", "yellow", "pink") else (250, 250, 246)


# --------------------------------------------------------------------------- textures
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
    second = np.array(_contrast_rgb(color), dtype=np.float32)
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
        hl = np.exp(-(((xx / max(w, 1)) - 0.3) / 0.07) ** 2) * np.clip(1.2 - yy / max(h, 1), 0.3, 1.0)
        img = img + (255 - img) * (0.75 * hl)[..., None]
        img = img * (1.05 - 0.2 * (xx / max(w, 1)))[..., None]
    elif material == "metallic":
        # Anisotropic sheen: dark and bright vertical bands plus sharp highlights, visible on any colour.
        t = xx / max(w, 1)
        band = np.abs(np.sin(math.pi * (t * 2.3 + 0.1 + 0.08 * np.sin(yy / max(h, 1) * 6.0))))
        img = img * (0.55 + 0.45 * band[..., None])
        peak = np.exp(-((band - 1.0) / 0.06) ** 2) * 0.7 + 0.8 * np.exp(-((t - 0.63) / 0.02) ** 2)
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


# --------------------------------------------------------------------------- painter
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
                d.rounded_rectangle((x0 + dx - grow, y0 + dy - grow, x1 + dx + grow, y1 + dy + grow), radius=s[2] + grow, fill=fill)
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
                d.arc((x0 + dx - grow, y0 + dy - grow, x1 + dx + grow, y1 + dy + grow), s[2], s[3], fill=fill,
                      width=max(1, int(round(s[4] + 2 * grow))))
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


# --------------------------------------------------------------------------- people
def _pose_points(pose: str) -> dict:
    """Joint positions in body units: u across (0 = centre), v down (0 = top of head, 1 = feet)."""
    p = {
        "head": (0.0, 0.085), "neck": (0.0, 0.165),
        "sh_l": (-0.115, 0.205), "sh_r": (0.115, 0.205),
        "el_l": (-0.15, 0.35), "ha_l": (-0.16, 0.49), "el_r": (0.15, 0.35), "ha_r": (0.16, 0.49),
        "hip_l": (-0.055, 0.5), "hip_r": (0.055, 0.5),
        "kn_l": (-0.06, 0.73), "ft_l": (-0.065, 0.965), "kn_r": (0.06, 0.73), "ft_r": (0.065, 0.965),
        "waist": 0.48, "lift": 0.0,
    }
    if pose == "waving":
        p.update(el_r=(0.23, 0.15), ha_r=(0.25, -0.02))
    elif pose == "running":  # leaning into a stride: front arm up, back arm down, knee high
        lean = 0.035
        for k in ("head", "neck", "sh_l", "sh_r"):
            p[k] = (p[k][0] + lean, p[k][1])
        p.update(el_r=(0.21, 0.31), ha_r=(0.29, 0.22), el_l=(-0.15, 0.36), ha_l=(-0.25, 0.43),
                 kn_l=(-0.08, 0.73), ft_l=(-0.25, 0.85), kn_r=(0.18, 0.62), ft_r=(0.15, 0.86), lift=0.06)
    elif pose == "sitting":
        d = 0.17
        for k in ("head", "neck", "sh_l", "sh_r", "el_l", "el_r", "hip_l", "hip_r"):
            p[k] = (p[k][0], p[k][1] + d)
        p.update(ha_l=(-0.02, 0.63), ha_r=(0.16, 0.63), el_l=(-0.14, 0.52), el_r=(0.16, 0.52),
                 hip_l=(-0.04, 0.67), hip_r=(0.04, 0.67), kn_l=(0.2, 0.665), kn_r=(0.22, 0.685),
                 ft_l=(0.2, 0.965), ft_r=(0.24, 0.965), waist=0.48 + d)
    return p


# Garment hem heights (v) by type and length.
HEM = {("t-shirt", "short"): 0.44, ("t-shirt", "long"): 0.62, ("dress", "short"): 0.7, ("dress", "long"): 0.93,
       ("coat", "short"): 0.56, ("coat", "long"): 0.83, ("hoodie", "short"): 0.45, ("hoodie", "long"): 0.61}


def draw_person(pt: Painter, scene: Scene, cx: float, base: float, H: float, rnd: random.Random, tex: Tex):
    kp = _pose_points(scene.pose)
    lift = kp["lift"]

    def P(name_or_uv):
        u, v = kp[name_or_uv] if isinstance(name_or_uv, str) else name_or_uv
        return (cx + u * H, base - H + (v - lift) * H)

    def U(u, v):
        return (cx + u * H, base - H + (v - lift) * H)

    skin = A.MONK_RGB[scene.skin_tone]
    skin_edge = _shade(skin, 0.75)
    hair = HAIR_RGB[scene.hair]
    long_hair = rnd.random() < 0.45
    sitting = scene.pose == "sitting"
    dy = kp["neck"][1] - 0.165  # vertical shift of the upper body (sitting)
    hem_v = HEM[(scene.type, scene.shape)] + (dy if scene.type != "dress" or not sitting else 0)
    edge = _shade(A.COLOR_RGB[scene.color], 0.6)

    if sitting:  # a plain stool, clearly not one of the chairs in the home domain
        pt.shape([("rrect", (*U(-0.13, 0.665), *U(0.17, 0.715)), 0.01 * H)], STOOL)
        pt.shape([("limb", [U(-0.1, 0.71), U(-0.11, 0.975)], 0.03 * H), ("limb", [U(0.14, 0.71), U(0.15, 0.975)], 0.03 * H)], _shade(STOOL, 0.8))

    hx, hy = P("head")
    r = 0.07 * H
    if long_hair:
        pt.shape([("rrect", (hx - r * 1.12, hy - r * 0.9, hx + r * 1.12, hy + r * 2.3), r)], hair)
    if scene.type == "hoodie":
        pt.shape([("ellipse", (hx - r * 1.32, hy - r * 0.8, hx + r * 1.32, hy + r * 1.75))], tex, photo_edge=edge)

    # legs (trousers, or bare legs under a dress) and shoes
    leg_rgb = skin if scene.type == "dress" else TROUSERS
    leg_w = (0.055 if scene.type == "dress" else 0.075) * H
    legs = [("limb", [P("hip_l"), P("kn_l"), P("ft_l")], leg_w), ("limb", [P("hip_r"), P("kn_r"), P("ft_r")], leg_w)]
    if scene.type != "dress":
        wv = kp["waist"]
        legs.append(("poly", [U(-0.095, wv), U(0.095, wv), U(0.085, wv + 0.09), U(-0.085, wv + 0.09)]))
    pt.shape(legs, leg_rgb, photo_edge=_shade(leg_rgb, 0.7))
    for f in ("ft_l", "ft_r"):
        fx, fy = P(f)
        toe = 0.035 * H if not sitting else 0.05 * H
        pt.shape([("ellipse", (fx - 0.04 * H, fy - 0.022 * H, fx + toe, fy + 0.02 * H))], SHOES)

    # neck and bare torso (visible under cropped tops and dress straps)
    nx, ny = P("neck")
    sl, sr = P("sh_l"), P("sh_r")
    hl, hr = P("hip_l"), P("hip_r")
    wv = kp["waist"]
    torso_skin = [("poly", [U(-0.035, 0.13 + dy), U(0.035, 0.13 + dy), sr, U(0.09, wv + 0.01), U(-0.09, wv + 0.01), sl])]
    pt.shape(torso_skin, skin, photo_edge=skin_edge)

    # arms: skin first, sleeves over them
    arm_w = 0.052 * H
    arms = {side: [P("sh_" + side), P("el_" + side), P("ha_" + side)] for side in ("l", "r")}

    def sleeve(side, frac):
        a, b, c = arms[side]
        if frac <= 0.5:
            t = frac / 0.5
            return [a, (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)]
        t = (frac - 0.5) / 0.5
        return [a, b, (b[0] + (c[0] - b[0]) * t, b[1] + (c[1] - b[1]) * t)]

    # garment body
    t = scene.type
    top = 0.19 + dy
    if t == "dress":
        waist_v = 0.37 + dy
        flare = 0.2 if scene.shape == "short" else 0.25
        if sitting:
            # over the lap to the knees, then straight down to the hem
            hem = 0.78 if scene.shape == "short" else 0.94
            body = [U(-0.095, top), U(0.095, top), U(0.085, waist_v), U(0.12, 0.61), U(0.27, 0.625), U(0.285, hem),
                    U(0.15, hem), U(0.13, 0.72), U(-0.13, 0.72), U(-0.11, waist_v)]
        else:
            body = [U(-0.095, top), U(0.095, top), U(0.085, waist_v), U(flare, hem_v), U(-flare, hem_v), U(-0.085, waist_v)]
        garment = [("poly", body)]
    elif t == "coat":
        flare = 0.02 if scene.shape == "short" else 0.06
        bottom = hem_v if not sitting else min(hem_v, 0.78)
        garment = [("poly", [U(-0.13, top), U(0.13, top), U(0.125 + flare, bottom), U(-0.125 - flare, bottom)])]
        if sitting and scene.shape == "long":
            garment.append(("poly", [U(0.0, 0.62), U(0.26, 0.63), U(0.27, 0.76), U(0.0, 0.76)]))
        garment += [("limb", sleeve("l", 0.92), 0.068 * H), ("limb", sleeve("r", 0.92), 0.068 * H)]
    elif t == "hoodie":
        garment = [("poly", [U(-0.125, top), U(0.125, top), U(0.12, hem_v), U(-0.12, hem_v)]),
                   ("limb", sleeve("l", 0.93), 0.07 * H), ("limb", sleeve("r", 0.93), 0.07 * H)]
    else:  # t-shirt
        garment = [("poly", [U(-0.12, top), U(0.12, top), U(0.108, hem_v), U(-0.108, hem_v)]),
                   ("limb", sleeve("l", 0.3), 0.078 * H), ("limb", sleeve("r", 0.3), 0.078 * H)]
    sleeve_len = {"t-shirt": 0.3, "dress": 0.0, "coat": 0.92, "hoodie": 0.93}[t]
    # bare arms go under the garment so the silhouettes merge cleanly
    pt.shape([("limb", arms["l"], arm_w), ("limb", arms["r"], arm_w)], skin, photo_edge=skin_edge)
    pt.shape(garment, tex, photo_edge=edge)
    for side in ("l", "r"):
        hx2, hy2 = arms[side][2]
        pt.shape([("ellipse", (hx2 - 0.032 * H, hy2 - 0.032 * H, hx2 + 0.032 * H, hy2 + 0.032 * H))], skin, photo_edge=skin_edge)

    dark = _shade(A.COLOR_RGB[scene.color], 0.55) if scene.color != "black" else (90, 90, 96)
    if t == "coat":  # lapels, opening and buttons
        pt.detail([("poly", [U(-0.05, top), U(0.0, 0.33 + dy), U(-0.075, top + 0.06)]),
                   ("poly", [U(0.05, top), U(0.0, 0.33 + dy), U(0.075, top + 0.06)])], dark)
        pt.line([U(0.0, 0.33 + dy), U(0.0, min(hem_v, 0.78 if sitting else hem_v))], dark, 0.008 * H)
        for bv in (0.37, 0.44, 0.51):
            bx, by = U(0.025, bv + dy)
            pt.detail([("ellipse", (bx - 0.012 * H, by - 0.012 * H, bx + 0.012 * H, by + 0.012 * H))], dark)
    elif t == "hoodie":
        pv = hem_v - 0.12
        pt.detail([("poly", [U(-0.07, pv), U(0.07, pv), U(0.09, pv + 0.09), U(-0.09, pv + 0.09)])], dark)
        for sx in (-0.03, 0.03):
            pt.line([U(sx, top + 0.01), U(sx * 1.2, top + 0.11)], (245, 245, 245), 0.008 * H)
        pt.detail([("rrect", (*U(-0.12, hem_v - 0.025), *U(0.12, hem_v)), 0.005 * H)], dark)

    # neck, head, hair, face
    pt.shape([("rrect", (nx - 0.03 * H, ny - 0.04 * H, nx + 0.03 * H, ny + 0.035 * H), 0.01 * H)], skin, outline=False)
    if t in ("t-shirt", "hoodie", "coat"):
        pt.detail([("chord", (nx - 0.045 * H, ny - 0.005 * H, nx + 0.045 * H, ny + 0.055 * H), 0, 180)], skin)
    pt.shape([("ellipse", (hx - r, hy - r * 1.08, hx + r, hy + r * 1.02))], skin, photo_edge=skin_edge)
    pt.shape([("chord", (hx - r * 1.06, hy - r * 1.18, hx + r * 1.06, hy + r * 0.55), 180, 360)], hair, outline=False)
    eye = (20, 20, 24)
    er = 0.0095 * H
    for sx in (-0.026, 0.026):
        ex, ey = hx + sx * H, hy + 0.004 * H
        pt.detail([("ellipse", (ex - er * 1.6, ey - er * 1.35, ex + er * 1.6, ey + er * 1.35))], (250, 250, 250))
        pt.detail([("ellipse", (ex - er, ey - er, ex + er, ey + er))], eye)
    if scene.pose == "running":  # speed lines behind the runner
        for k, v in enumerate((0.3, 0.4, 0.5)):
            x0_, y0_ = U(-0.3 - 0.04 * k, v)
            pt.line([(x0_ - 0.14 * H, y0_), (x0_, y0_)], (120, 120, 130) if pt.outline is None else pt.outline, 0.012 * H)
    pt.draw.arc((hx - 0.022 * H, hy + 0.01 * H, hx + 0.022 * H, hy + 0.045 * H), 20, 160, fill=(150, 60, 60, 255),
                width=max(1, int(0.007 * H)))
    if scene.glasses:  # pale lenses in dark frames read on every skin tone
        gr = 0.026 * H
        gw = max(2, int(round(0.011 * H)))
        for sx in (-0.029, 0.029):
            ex, ey = hx + sx * H, hy + 0.004 * H
            pt.draw.ellipse((ex - gr, ey - gr, ex + gr, ey + gr), fill=(206, 230, 250, 255), outline=(16, 16, 20, 255), width=gw)
            pt.draw.ellipse((ex - er * 0.8, ey - er * 0.8, ex + er * 0.8, ey + er * 0.8), fill=eye + (255,))
        pt.line([(hx - 0.006 * H, hy), (hx + 0.006 * H, hy)], (16, 16, 20), gw)
    if scene.hat:
        pt.shape([("ellipse", (hx - 0.125 * H, hy - 0.08 * H, hx + 0.125 * H, hy - 0.035 * H)),
                  ("rrect", (hx - 0.07 * H, hy - 0.16 * H, hx + 0.07 * H, hy - 0.05 * H), 0.03 * H)], HAT_STRAW,
                 photo_edge=_shade(HAT_STRAW, 0.7))
        pt.detail([("rrect", (hx - 0.07 * H, hy - 0.085 * H, hx + 0.07 * H, hy - 0.06 * H), 0.004 * H)], HAT_BAND)
    if scene.bag:
        sx, sy = sl
        bx, by = U(0.13, 0.5 + dy)
        pt.line([(sx + 0.02 * H, sy), (bx, by)], _shade(BAG_TAN, 0.6), 0.014 * H)
        pt.shape([("rrect", (bx - 0.05 * H, by - 0.035 * H, bx + 0.07 * H, by + 0.06 * H), 0.015 * H)], BAG_TAN,
                 photo_edge=_shade(BAG_TAN, 0.6))
        pt.detail([("poly", [(bx - 0.05 * H, by - 0.035 * H), (bx + 0.07 * H, by - 0.035 * H), (bx + 0.01 * H, by + 0.015 * H)])],
                  _shade(BAG_TAN, 0.82))


# --------------------------------------------------------------------------- objects
def draw_item(pt: Painter, scene: Scene, cx: float, base: float, h: float, tex: Tex):
    t, shape = scene.type, scene.shape
    rgb = A.COLOR_RGB[scene.color]
    edge = _shade(rgb, 0.6)
    dark = _shade(rgb, 0.62) if scene.color != "black" else (95, 95, 100)

    def U(u, v):
        return (cx + u * h, base - h + v * h)

    def box(u0, v0, u1, v1):
        return (*U(u0, v0), *U(u1, v1))

    if t == "vase":
        if shape == "round":
            body = [("ellipse", box(-0.42, 0.25, 0.42, 1.0)), ("rrect", box(-0.12, 0.08, 0.12, 0.4), 0.03 * h),
                    ("ellipse", box(-0.19, 0.04, 0.19, 0.14))]
        else:
            body = [("poly", [U(-0.3, 0.3), U(-0.12, 0.2), U(0.12, 0.2), U(0.3, 0.3), U(0.3, 1.0), U(-0.3, 1.0)]),
                    ("rrect", box(-0.12, 0.06, 0.12, 0.26), 0.02 * h), ("rrect", box(-0.18, 0.02, 0.18, 0.1), 0.02 * h)]
        pt.shape(body, tex, photo_edge=edge)
        pt.detail([("ellipse", box(-0.13, 0.055, 0.13, 0.11))], _shade(dark, 0.6))
    elif t == "lamp":
        pt.shape([("rrect", box(-0.028, 0.38, 0.028, 0.95), 0.01 * h), ("ellipse", box(-0.22, 0.91, 0.22, 1.0))], METAL,
                 photo_edge=_shade(METAL, 0.6))
        if shape == "round":
            shade_ = [("chord", box(-0.38, 0.0, 0.38, 0.86), 180, 360)]
        else:
            shade_ = [("poly", [U(-0.22, 0.02), U(0.22, 0.02), U(0.38, 0.43), U(-0.38, 0.43)])]
        pt.shape(shade_, tex, photo_edge=edge)
    elif t == "chair":
        legs = [("limb", [U(-0.3, 0.58), U(-0.31, 1.0)], 0.06 * h), ("limb", [U(0.3, 0.58), U(0.31, 1.0)], 0.06 * h),
                ("limb", [U(-0.2, 0.58), U(-0.2, 0.9)], 0.05 * h), ("limb", [U(0.2, 0.58), U(0.2, 0.9)], 0.05 * h)]
        pt.shape(legs, dark)
        if shape == "round":
            back = [("ellipse", box(-0.3, 0.0, 0.3, 0.52)), ("rrect", box(-0.05, 0.4, 0.05, 0.56), 0.01 * h)]
        else:
            back = [("rrect", box(-0.28, 0.0, 0.28, 0.5), 0.03 * h)]
        seat = [("poly", [U(-0.3, 0.5), U(0.3, 0.5), U(0.36, 0.6), U(-0.36, 0.6)]), ("rrect", box(-0.36, 0.58, 0.36, 0.66), 0.02 * h)]
        pt.shape(back + seat, tex, photo_edge=edge)
    elif t == "cushion":
        if shape == "round":
            pt.shape([("ellipse", box(-0.5, 0.0, 0.5, 1.0))], tex, photo_edge=edge)
            pt.draw.ellipse(box(-0.42, 0.08, 0.42, 0.92), outline=dark + (255,), width=max(1, int(0.025 * h)))
            cxy = U(0, 0.5)
            for ang in range(0, 360, 60):
                a = math.radians(ang)
                pt.line([cxy, (cxy[0] + math.cos(a) * 0.13 * h, cxy[1] + math.sin(a) * 0.13 * h)], dark, 0.02 * h)
            pt.detail([("ellipse", box(-0.06, 0.44, 0.06, 0.56))], dark)
        else:
            pt.shape([("rrect", box(-0.55, 0.0, 0.55, 1.0), 0.16 * h)], tex, photo_edge=edge)
            pt.draw.rounded_rectangle(box(-0.45, 0.1, 0.45, 0.9), radius=0.1 * h, outline=dark + (255,), width=max(1, int(0.02 * h)))
            for u, v in ((-0.5, 0.06), (0.5, 0.06), (-0.5, 0.94), (0.5, 0.94)):
                x, y = U(u, v)
                pt.detail([("ellipse", (x - 0.05 * h, y - 0.05 * h, x + 0.05 * h, y + 0.05 * h))], dark)
    elif t == "mug":
        hr = 0.34 if shape == "square" else 0.4
        pt.shape([("arc", box(hr - 0.12, 0.22, hr + 0.32, 0.72), 270, 90, 0.1 * h)], tex, photo_edge=edge)
        if shape == "round":
            body = [("rrect", box(-0.4, 0.05, 0.4, 0.6), 0.05 * h), ("ellipse", box(-0.4, 0.25, 0.4, 1.0))]
        else:
            body = [("rrect", box(-0.34, 0.0, 0.34, 1.0), 0.04 * h)]
        pt.shape(body, tex, photo_edge=edge)
        top_v = 0.0 if shape == "square" else 0.05
        pt.detail([("ellipse", box(-hr + 0.04, top_v - 0.01, hr - 0.04, top_v + 0.07))], _shade(dark, 0.55))
    elif t == "handbag":
        if shape == "round":
            pt.shape([("arc", box(-0.28, 0.0, 0.28, 0.7), 180, 360, 0.07 * h)], dark)
            body = [("chord", box(-0.5, -0.3, 0.5, 1.0), 0, 180)]
        else:
            pt.shape([("arc", box(-0.3, 0.0, -0.02, 0.6), 180, 360, 0.06 * h), ("arc", box(0.02, 0.0, 0.3, 0.6), 180, 360, 0.06 * h)], dark)
            body = [("rrect", box(-0.46, 0.3, 0.46, 1.0), 0.05 * h)]
        pt.shape(body, tex, photo_edge=edge)
        pt.detail([("rrect", box(-0.06, 0.38, 0.06, 0.46), 0.01 * h)], (226, 196, 90))
    elif t == "hat":
        if shape == "round":
            crown = [("chord", box(-0.32, 0.0, 0.32, 1.3), 180, 360)]
        else:
            crown = [("rrect", box(-0.3, 0.02, 0.3, 0.72), 0.04 * h)]
        brim = [("ellipse", box(-0.6, 0.6, 0.6, 0.95))]
        pt.shape(brim + crown, tex, photo_edge=edge)
        pt.detail([("rrect", box(-0.315 if shape == "round" else -0.3, 0.5, 0.315 if shape == "round" else 0.3, 0.62), 0.01 * h)], dark)
    elif t == "sunglasses":
        rr = 0.34
        frames, lenses = [], []
        for su in (-0.42, 0.42):
            if shape == "round":
                frames.append(("ellipse", box(su - rr, 0.5 - rr, su + rr, 0.5 + rr)))
                lenses.append(("ellipse", box(su - rr + 0.09, 0.5 - rr + 0.09, su + rr - 0.09, 0.5 + rr - 0.09)))
            else:
                frames.append(("rrect", box(su - rr - 0.02, 0.5 - rr * 0.85, su + rr + 0.02, 0.5 + rr * 0.85), 0.08 * h))
                lenses.append(("rrect", box(su - rr + 0.07, 0.5 - rr * 0.85 + 0.09, su + rr - 0.07, 0.5 + rr * 0.85 - 0.09), 0.05 * h))
        frames.append(("arc", box(-0.14, 0.32, 0.14, 0.62), 200, 340, 0.08 * h))
        frames.append(("limb", [U(-0.78, 0.42), U(-0.86, 0.36)], 0.08 * h))
        frames.append(("limb", [U(0.78, 0.42), U(0.86, 0.36)], 0.08 * h))
        pt.shape(frames, tex, photo_edge=edge)
        pt.detail(lenses, LENS)
        for su in (-0.42, 0.42):
            pt.line([U(su - 0.12, 0.4), U(su - 0.02, 0.32)], (200, 205, 215), 0.03 * h)
    elif t == "watch":
        pt.shape([("rrect", box(-0.17, 0.0, 0.17, 1.0), 0.05 * h)], tex, photo_edge=edge)
        for v in (0.8, 0.88):
            pt.detail([("ellipse", box(-0.025, v - 0.02, 0.025, v + 0.02))], dark)
        if shape == "round":
            case = [("ellipse", box(-0.3, 0.2, 0.3, 0.8))]
            face = [("ellipse", box(-0.23, 0.27, 0.23, 0.73))]
        else:
            case = [("rrect", box(-0.28, 0.22, 0.28, 0.78), 0.07 * h)]
            face = [("rrect", box(-0.21, 0.29, 0.21, 0.71), 0.04 * h)]
        pt.shape(case, tex, photo_edge=edge)
        pt.detail(face, (250, 250, 246))
        c = U(0, 0.5)
        pt.line([c, U(0.0, 0.35)], (30, 30, 30), 0.03 * h)
        pt.line([c, U(0.12, 0.52)], (30, 30, 30), 0.025 * h)
        pt.detail([("ellipse", box(-0.025, 0.475, 0.025, 0.525))], (200, 40, 40))


def draw_secondary(pt: Painter, kind: str, cx: float, base: float, h: float):
    def U(u, v):
        return (cx + u * h, base - h + v * h)

    def box(u0, v0, u1, v1):
        return (*U(u0, v0), *U(u1, v1))

    if kind == "plant":
        leaf = (58, 150, 70)
        leaves = []
        for ang, ln in ((-70, 0.62), (-35, 0.66), (0, 0.7), (35, 0.66), (70, 0.62), (-52, 0.5), (52, 0.5)):
            a = math.radians(ang - 90)
            bx, by = U(0, 0.55)
            tx, ty = bx + math.cos(a) * ln * h, by + math.sin(a) * ln * h
            nxv, nyv = -math.sin(a) * 0.09 * h, math.cos(a) * 0.09 * h
            mx, my = (bx + tx) / 2, (by + ty) / 2
            leaves.append(("poly", [(bx, by), (mx + nxv, my + nyv), (tx, ty), (mx - nxv, my - nyv)]))
        pt.shape(leaves, leaf, photo_edge=_shade(leaf, 0.6))
        pt.shape([("poly", [U(-0.27, 0.55), U(0.27, 0.55), U(0.2, 1.0), U(-0.2, 1.0)]), ("rrect", box(-0.3, 0.52, 0.3, 0.62), 0.02 * h)],
                 (196, 98, 60), photo_edge=(120, 60, 36))
    elif kind == "box":
        card = (204, 160, 108)
        pt.shape([("poly", [U(-0.55, 0.22), U(0.35, 0.22), U(0.55, 0.06), U(-0.35, 0.06)])], _shade(card, 1.12), photo_edge=(130, 100, 66))
        pt.shape([("rrect", box(-0.55, 0.22, 0.35, 1.0), 0.01 * h), ("poly", [U(0.35, 0.22), U(0.55, 0.06), U(0.55, 0.84), U(0.35, 1.0)])],
                 card, photo_edge=(130, 100, 66))
        pt.detail([("poly", [U(0.35, 0.22), U(0.55, 0.06), U(0.55, 0.84), U(0.35, 1.0)])], _shade(card, 0.82))
        pt.detail([("poly", [U(-0.22, 0.06), U(-0.08, 0.06), U(-0.18, 0.22), U(-0.32, 0.22)]), ("rrect", box(-0.32, 0.22, -0.18, 0.5), 0)],
                  (232, 214, 176))
    elif kind == "cat":
        fur = (112, 112, 124)
        pt.shape([("arc", box(0.18, 0.25, 0.62, 0.95), 200, 40, 0.08 * h)], fur)
        body = [("ellipse", box(-0.38, 0.35, 0.32, 1.0)), ("ellipse", box(-0.5, 0.02, -0.04, 0.48)),
                ("poly", [U(-0.48, 0.18), U(-0.46, -0.1), U(-0.32, 0.08)]), ("poly", [U(-0.06, 0.18), U(-0.08, -0.1), U(-0.22, 0.08)])]
        pt.shape(body, fur, photo_edge=(70, 70, 80))
        for su in (-0.36, -0.18):
            pt.detail([("ellipse", box(su - 0.04, 0.2, su + 0.04, 0.28))], (190, 220, 90))
        pt.detail([("poly", [U(-0.3, 0.32), U(-0.24, 0.32), U(-0.27, 0.36)])], (230, 150, 160))


# --------------------------------------------------------------------------- layout
# World sizes, as fractions of the image height in the wide view: (height, width/height).
SUBJECT_SIZE = {
    "vase": (0.44, 0.86), "lamp": (0.6, 0.8), "chair": (0.52, 0.76), "cushion": (0.32, 1.12), "mug": (0.28, 1.0),
    "handbag": (0.36, 1.0), "hat": (0.3, 1.22), "sunglasses": (0.18, 1.75), "watch": (0.38, 0.62),
}
SECONDARY_SIZE = {"plant": (0.3, 0.9), "box": (0.2, 1.12), "cat": (0.2, 1.15)}
PERSON_H = {1: 0.64, 2: 0.6, 3: 0.56}
PERSON_CLOSE_H = {1: 1.22, 2: 1.08, 3: 0.98}


@dataclass(frozen=True)
class Placed:
    what: str  # "subject" or "secondary"
    cx: float
    base: float
    h: float
    w: float


def layout(scene: Scene, S: int, rnd: random.Random) -> list[Placed]:
    """Positions of the subjects and the secondary object, left to right."""
    close = scene.view == "close-up"
    n = scene.count
    person = scene.has_person
    if person:
        h = (PERSON_CLOSE_H if close else PERSON_H)[n] * S
        w = 0.46 * h if scene.pose in ("waving", "running", "sitting") else 0.38 * h
        step = (min(0.42 * h, 0.31 * S) if close else 0.5 * h) if n > 1 else 0
        top_v = {"sitting": 0.17, "running": -0.06}.get(scene.pose, 0.0)  # where the head starts
        ground = S * 0.05 + h * (1 - top_v) if close else S * 0.9
    else:
        hw, aspect = SUBJECT_SIZE[scene.type]
        w_unit = aspect
        if close:
            h = min(0.7 * S, 0.94 * S / (n * w_unit + (n - 1) * 0.12))
        else:
            h = hw * S
            h = min(h, 0.78 * S / (n * w_unit + (n - 1) * 0.15))
        w = w_unit * h
        step = w + 0.12 * h if n > 1 else 0
        ground = S * (0.9 if close else 0.88)
    group_w = w + step * (n - 1)
    sec = None
    if scene.secondary != "none":
        sh, sa = SECONDARY_SIZE[scene.secondary]
        zoom = (h / (PERSON_H[n] * S)) if person else (h / (SUBJECT_SIZE[scene.type][0] * S))
        s_h = sh * S * min(zoom, 1.6 if close else 1.0)
        if close and not person:
            s_h = min(s_h, 0.75 * h)
        sec = (s_h, sa * s_h)
    jitter = (rnd.random() - 0.5) * 0.06 * S
    total = group_w + (sec[1] + 0.04 * S if sec else 0)
    left = (S - total) / 2 + jitter
    placed = []
    if sec and scene.relation == "left":
        sx = left + sec[1] / 2
        gx0 = left + sec[1] + 0.04 * S
    else:
        gx0 = left
        sx = left + group_w + 0.04 * S + (sec[1] / 2 if sec else 0)
    if sec:
        # Keep the secondary object mostly in frame (it may tuck behind the group in close-ups).
        lo_x, hi_x = sec[1] * 0.55, S - sec[1] * 0.55
        sx = min(max(sx, lo_x), hi_x)
        s_base = ground if not person else (S * 0.97 if close else ground)
        placed.append(Placed("secondary", sx, s_base, sec[0], sec[1]))
    for i in range(n):
        placed.append(Placed("subject", gx0 + w / 2 + i * step, ground, h, w))
    return placed


# --------------------------------------------------------------------------- backgrounds
SKY = {
    "morning": [(0.0, (120, 172, 222)), (0.7, (236, 206, 190)), (1.0, (252, 214, 160))],
    "day": [(0.0, (52, 124, 218)), (1.0, (168, 208, 246))],
    "sunset": [(0.0, (64, 44, 112)), (0.55, (222, 92, 70)), (1.0, (255, 176, 78))],
    "night": [(0.0, (8, 12, 34)), (1.0, (34, 44, 86))],
}
# Bad weather greys the sky, but not so much that the time of day disappears.
WEATHER_SKY = {"rainy": ((104, 110, 122), 0.55), "snowy": ((150, 160, 176), 0.5), "foggy": ((206, 206, 210), 0.62)}
GROUND_LIGHT = {"morning": (1.0, 0.97, 0.92), "day": (1.0, 1.0, 1.0), "sunset": (0.95, 0.76, 0.62), "night": (0.3, 0.34, 0.5)}


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
        c = _mix(c, _shade((236, 240, 246), max(f)), 0.7)
    elif weather == "rainy":
        c = _shade(c, 0.82)
    return tuple(int(max(0, min(255, v))) for v in c)


def _sky_decor(d: ImageDraw.ImageDraw, S: int, time_: str, weather: str, x0: float, y0: float, x1: float, y1: float,
               outline, rnd: random.Random, sun: bool = True):
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
                    d.ellipse((cx + (dx - rr) * S, cy + (dy - rr) * S, cx + (dx + rr) * S, cy + (dy + rr) * S), fill=(250, 250, 252))
    elif weather in ("rainy", "snowy"):
        cloud = _lit((92, 96, 108) if weather == "rainy" else (176, 182, 194), time_, "clear")
        for cx_, cy_ in ((0.2, 0.15), (0.5, 0.08), (0.82, 0.18)):
            cx, cy = x0 + cx_ * w, y0 + cy_ * h
            for dx, dy, rr in ((-0.08, 0.02, 0.06), (0, -0.02, 0.08), (0.08, 0.02, 0.06)):
                d.ellipse((cx + (dx - rr) * S, cy + (dy - rr) * S, cx + (dx + rr) * S, cy + (dy + rr) * S), fill=cloud)


def _bg_room(img, d, S, time_, weather, style, outline, rnd, close: bool = False):
    wall = _lit((226, 212, 188), "day" if time_ != "night" else "night")
    if time_ == "night":
        wall = _mix(wall, (120, 96, 70), 0.35)
    elif time_ == "sunset":
        wall = _mix(wall, (236, 170, 120), 0.3)
    floor_y = int((0.8 if close else 0.7) * S)
    d.rectangle((0, 0, S, floor_y), fill=wall)
    step = S // 6 if close else S // 10
    for x in range(0, S, step):  # wallpaper stripes
        d.rectangle((x, 0, x + step // 4, floor_y), fill=_shade(wall, 0.96))
    wood = _lit((156, 108, 66), "day" if time_ != "night" else "night")
    d.rectangle((0, floor_y, S, S), fill=wood)
    for i in range(6):
        y = floor_y + (S - floor_y) * (i / 6) ** 1.3
        d.line((0, y, S, y), fill=_shade(wood, 0.85), width=max(1, S // 200))
    d.rectangle((0, floor_y - S // 40, S, floor_y), fill=_shade(wall, 0.8))
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
        d.rectangle((wx0 - fw, wy1, wx1 + fw, wy1 + fw * 1.5), fill=_shade(frame, 0.9))
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
                d.line((x, y, x + S // 14, y), fill=_mix(sea, (255, 255, 255), 0.5), width=max(1, S // 180))
        sand = _lit((236, 212, 152), time_, weather)
        d.rectangle((0, int(0.62 * S), S, S), fill=sand)
        d.polygon([(0, 0.62 * S), (S, 0.62 * S), (S, 0.65 * S), (0, 0.66 * S)], fill=_mix(sand, (255, 255, 255), 0.35))
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
        d.rectangle((0, hy, S, hy + 0.025 * S), fill=_shade(road, 0.75))
        for x in range(0, S, S // 5):
            d.line((x, hy + 0.025 * S, x - 0.1 * S, S), fill=_shade(road, 0.88), width=max(1, S // 200))
        if outline:
            d.line((0, hy, S, hy), fill=outline, width=ow)
    else:  # garden
        lawn = _lit((96, 172, 72), time_, weather)
        d.rectangle((0, hy, S, S), fill=lawn)
        hedge = _lit((46, 118, 54), time_, weather if weather != "snowy" else "clear")
        tx = (0.12 + 0.06 * rnd.random()) * S
        d.rectangle((tx - 0.025 * S, 0.25 * S, tx + 0.025 * S, hy), fill=_lit((110, 74, 44), time_, "clear"), outline=outline, width=ow if outline else 0)
        d.ellipse((tx - 0.13 * S, 0.06 * S, tx + 0.13 * S, 0.34 * S), fill=hedge, outline=outline, width=ow if outline else 0)
        for x in range(-S // 20, S + S // 10, S // 9):
            d.ellipse((x, hy - 0.06 * S, x + S // 7, hy + 0.04 * S), fill=hedge, outline=outline, width=ow if outline else 0)
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
            d.ellipse((x - r, y - r, x + r, y + r), fill=(252, 252, 255), outline=SENTINEL if outline == SENTINEL else None)


@functools.lru_cache(maxsize=400)
def _background(place: str, time_: str, weather: str, style: str, view: str, S: int, seed: int) -> Image.Image:
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
        img = img.crop((int(cx - cw / 2), int(cy - cw / 2), int(cx + cw / 2), int(cy + cw / 2))).resize((S, S), Image.BILINEAR)
    if style == "photo":  # depth of field: the background is out of focus, more so up close
        img = img.filter(ImageFilter.GaussianBlur(S / (100 if view == "close-up" else 240)))
    if weather == "foggy" and place != "room":
        img = Image.blend(img, Image.new("RGB", (S, S), (214, 214, 218)), 0.5)
    return img


# --------------------------------------------------------------------------- overlays and styles
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
            d.ellipse((x - r, y - r, x + r, y + r), fill=(255, 255, 255, 235),
                      outline=SENTINEL + (255,) if style == "sketch" else (190, 196, 210, 160))
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
    return (Image.fromarray((fg * 255).astype(np.uint8), "L"), Image.fromarray((bg * 255).astype(np.uint8), "L"),
            Image.fromarray(paper, "RGB"))


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
    bg = _background(scene.place, scene.time, scene.weather, style, scene.view, S, scene.variant % 2).copy()

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

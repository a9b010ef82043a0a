"""The subjects: people (pose, hair, hat, bag, garment) and objects (the nine item types),
and the secondary object, as shape lists for the painter."""

from __future__ import annotations

import math
import random


from .. import attributes as A
from ..scene import Scene
from .palette import BAG_TAN, HAIR_RGB, HAT_BAND, HAT_STRAW, LENS, METAL, SHOES, STOOL, TROUSERS, shade
from .paint import Painter, Tex


def _pose_points(pose: str) -> dict:
    """Joint positions in body units: u across (0 = centre), v down (0 = top of head, 1 = feet)."""
    p = {
        "head": (0.0, 0.085),
        "neck": (0.0, 0.165),
        "sh_l": (-0.115, 0.205),
        "sh_r": (0.115, 0.205),
        "el_l": (-0.15, 0.35),
        "ha_l": (-0.16, 0.49),
        "el_r": (0.15, 0.35),
        "ha_r": (0.16, 0.49),
        "hip_l": (-0.055, 0.5),
        "hip_r": (0.055, 0.5),
        "kn_l": (-0.06, 0.73),
        "ft_l": (-0.065, 0.965),
        "kn_r": (0.06, 0.73),
        "ft_r": (0.065, 0.965),
        "waist": 0.48,
        "lift": 0.0,
    }
    if pose == "waving":
        p.update(el_r=(0.23, 0.15), ha_r=(0.25, -0.02))
    elif pose == "running":  # leaning into a stride: front arm up, back arm down, knee high
        lean = 0.035
        for k in ("head", "neck", "sh_l", "sh_r"):
            p[k] = (p[k][0] + lean, p[k][1])
        p.update(
            el_r=(0.21, 0.31),
            ha_r=(0.29, 0.22),
            el_l=(-0.15, 0.36),
            ha_l=(-0.25, 0.43),
            kn_l=(-0.08, 0.73),
            ft_l=(-0.25, 0.85),
            kn_r=(0.18, 0.62),
            ft_r=(0.15, 0.86),
            lift=0.06,
        )
    elif pose == "sitting":
        d = 0.17
        for k in ("head", "neck", "sh_l", "sh_r", "el_l", "el_r", "hip_l", "hip_r"):
            p[k] = (p[k][0], p[k][1] + d)
        p.update(
            ha_l=(-0.02, 0.63),
            ha_r=(0.16, 0.63),
            el_l=(-0.14, 0.52),
            el_r=(0.16, 0.52),
            hip_l=(-0.04, 0.67),
            hip_r=(0.04, 0.67),
            kn_l=(0.2, 0.665),
            kn_r=(0.22, 0.685),
            ft_l=(0.2, 0.965),
            ft_r=(0.24, 0.965),
            waist=0.48 + d,
        )
    return p


# Garment hem heights (v) by type and length.
HEM = {
    ("t-shirt", "short"): 0.44,
    ("t-shirt", "long"): 0.62,
    ("dress", "short"): 0.7,
    ("dress", "long"): 0.93,
    ("coat", "short"): 0.56,
    ("coat", "long"): 0.83,
    ("hoodie", "short"): 0.45,
    ("hoodie", "long"): 0.61,
}


class _Body:
    """One person's joints in image coordinates, and the colours and sizes every part of the drawing
    shares. `rnd` draws the hair length (the person's only random choice)."""

    def __init__(self, scene: Scene, cx: float, base: float, H: float, rnd: random.Random):
        self.scene, self.cx, self.base, self.H = scene, cx, base, H
        self.kp = _pose_points(scene.pose)
        self.lift = self.kp["lift"]
        self.skin = A.MONK_RGB[scene.skin_tone]
        self.skin_edge = shade(self.skin, 0.75)
        self.hair = HAIR_RGB[scene.hair]
        self.long_hair = rnd.random() < 0.45
        self.sitting = scene.pose == "sitting"
        self.dy = self.kp["neck"][1] - 0.165  # vertical shift of the upper body (sitting)
        self.hem_v = HEM[(scene.type, scene.shape)] + (self.dy if scene.type != "dress" or not self.sitting else 0)
        self.edge = shade(A.COLOR_RGB[scene.color], 0.6)
        self.top = 0.19 + self.dy  # the garment's top edge
        self.hx, self.hy = self.P("head")
        self.r = 0.07 * H  # head radius
        self.arms = {side: [self.P("sh_" + side), self.P("el_" + side), self.P("ha_" + side)] for side in ("l", "r")}

    def P(self, name_or_uv):
        u, v = self.kp[name_or_uv] if isinstance(name_or_uv, str) else name_or_uv
        return (self.cx + u * self.H, self.base - self.H + (v - self.lift) * self.H)

    def U(self, u, v):
        return (self.cx + u * self.H, self.base - self.H + (v - self.lift) * self.H)

    def sleeve(self, side, frac):
        """The arm's polyline from the shoulder to `frac` of its length (elbow at 0.5)."""
        a, b, c = self.arms[side]
        if frac <= 0.5:
            t = frac / 0.5
            return [a, (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)]
        t = (frac - 0.5) / 0.5
        return [a, b, (b[0] + (c[0] - b[0]) * t, b[1] + (c[1] - b[1]) * t)]


def _draw_stool(pt: Painter, b: _Body):
    """A plain stool under a sitting person, clearly not one of the chairs in the home domain."""
    U, H = b.U, b.H
    pt.shape([("rrect", (*U(-0.13, 0.665), *U(0.17, 0.715)), 0.01 * H)], STOOL)
    pt.shape(
        [("limb", [U(-0.1, 0.71), U(-0.11, 0.975)], 0.03 * H), ("limb", [U(0.14, 0.71), U(0.15, 0.975)], 0.03 * H)],
        shade(STOOL, 0.8),
    )


def _draw_behind_head(pt: Painter, b: _Body, tex: Tex):
    """Long hair and a hoodie's hood, behind the head and body."""
    hx, hy, r = b.hx, b.hy, b.r
    if b.long_hair:
        pt.shape([("rrect", (hx - r * 1.12, hy - r * 0.9, hx + r * 1.12, hy + r * 2.3), r)], b.hair)
    if b.scene.type == "hoodie":
        pt.shape([("ellipse", (hx - r * 1.32, hy - r * 0.8, hx + r * 1.32, hy + r * 1.75))], tex, photo_edge=b.edge)


def _draw_legs(pt: Painter, b: _Body):
    """Trousers, or bare legs under a dress, and shoes."""
    P, U, H, scene = b.P, b.U, b.H, b.scene
    leg_rgb = b.skin if scene.type == "dress" else TROUSERS
    leg_w = (0.055 if scene.type == "dress" else 0.075) * H
    legs = [("limb", [P("hip_l"), P("kn_l"), P("ft_l")], leg_w), ("limb", [P("hip_r"), P("kn_r"), P("ft_r")], leg_w)]
    if scene.type != "dress":
        wv = b.kp["waist"]
        legs.append(("poly", [U(-0.095, wv), U(0.095, wv), U(0.085, wv + 0.09), U(-0.085, wv + 0.09)]))
    pt.shape(legs, leg_rgb, photo_edge=shade(leg_rgb, 0.7))
    for f in ("ft_l", "ft_r"):
        fx, fy = P(f)
        toe = 0.035 * H if not b.sitting else 0.05 * H
        pt.shape([("ellipse", (fx - 0.04 * H, fy - 0.022 * H, fx + toe, fy + 0.02 * H))], SHOES)


def _draw_torso_skin(pt: Painter, b: _Body):
    """The bare torso, visible under cropped tops and dress straps."""
    U, dy, wv = b.U, b.dy, b.kp["waist"]
    sl, sr = b.P("sh_l"), b.P("sh_r")
    torso_skin = [
        ("poly", [U(-0.035, 0.13 + dy), U(0.035, 0.13 + dy), sr, U(0.09, wv + 0.01), U(-0.09, wv + 0.01), sl])
    ]
    pt.shape(torso_skin, b.skin, photo_edge=b.skin_edge)


def _dress_shapes(b: _Body) -> list:
    U, top, scene = b.U, b.top, b.scene
    waist_v = 0.37 + b.dy
    flare = 0.2 if scene.shape == "short" else 0.25
    if b.sitting:
        # over the lap to the knees, then straight down to the hem
        hem = 0.78 if scene.shape == "short" else 0.94
        body = [
            U(-0.095, top),
            U(0.095, top),
            U(0.085, waist_v),
            U(0.12, 0.61),
            U(0.27, 0.625),
            U(0.285, hem),
            U(0.15, hem),
            U(0.13, 0.72),
            U(-0.13, 0.72),
            U(-0.11, waist_v),
        ]
    else:
        body = [
            U(-0.095, top),
            U(0.095, top),
            U(0.085, waist_v),
            U(flare, b.hem_v),
            U(-flare, b.hem_v),
            U(-0.085, waist_v),
        ]
    return [("poly", body)]


def _coat_shapes(b: _Body) -> list:
    U, top, hem_v, H, sleeve = b.U, b.top, b.hem_v, b.H, b.sleeve
    flare = 0.02 if b.scene.shape == "short" else 0.06
    bottom = hem_v if not b.sitting else min(hem_v, 0.78)
    garment = [("poly", [U(-0.13, top), U(0.13, top), U(0.125 + flare, bottom), U(-0.125 - flare, bottom)])]
    if b.sitting and b.scene.shape == "long":
        garment.append(("poly", [U(0.0, 0.62), U(0.26, 0.63), U(0.27, 0.76), U(0.0, 0.76)]))
    return garment + [("limb", sleeve("l", 0.92), 0.068 * H), ("limb", sleeve("r", 0.92), 0.068 * H)]


def _garment_shapes(b: _Body) -> list:
    """The garment's body and sleeves."""
    U, top, hem_v, H, sleeve, t = b.U, b.top, b.hem_v, b.H, b.sleeve, b.scene.type
    if t == "dress":
        return _dress_shapes(b)
    if t == "coat":
        return _coat_shapes(b)
    if t == "hoodie":
        return [
            ("poly", [U(-0.125, top), U(0.125, top), U(0.12, hem_v), U(-0.12, hem_v)]),
            ("limb", sleeve("l", 0.93), 0.07 * H),
            ("limb", sleeve("r", 0.93), 0.07 * H),
        ]
    # t-shirt
    return [
        ("poly", [U(-0.12, top), U(0.12, top), U(0.108, hem_v), U(-0.108, hem_v)]),
        ("limb", sleeve("l", 0.3), 0.078 * H),
        ("limb", sleeve("r", 0.3), 0.078 * H),
    ]


def _draw_arms_and_garment(pt: Painter, b: _Body, tex: Tex):
    """Bare arms go under the garment so the silhouettes merge cleanly; hands on top."""
    H, arms = b.H, b.arms
    garment = _garment_shapes(b)
    pt.shape([("limb", arms["l"], 0.052 * H), ("limb", arms["r"], 0.052 * H)], b.skin, photo_edge=b.skin_edge)
    pt.shape(garment, tex, photo_edge=b.edge)
    for side in ("l", "r"):
        hx2, hy2 = arms[side][2]
        pt.shape(
            [("ellipse", (hx2 - 0.032 * H, hy2 - 0.032 * H, hx2 + 0.032 * H, hy2 + 0.032 * H))],
            b.skin,
            photo_edge=b.skin_edge,
        )


def _draw_garment_details(pt: Painter, b: _Body):
    """A coat's lapels, opening and buttons; a hoodie's pocket, drawstrings and hem band."""
    U, H, dy, top, hem_v, scene = b.U, b.H, b.dy, b.top, b.hem_v, b.scene
    dark = shade(A.COLOR_RGB[scene.color], 0.55) if scene.color != "black" else (90, 90, 96)
    if scene.type == "coat":
        pt.detail(
            [
                ("poly", [U(-0.05, top), U(0.0, 0.33 + dy), U(-0.075, top + 0.06)]),
                ("poly", [U(0.05, top), U(0.0, 0.33 + dy), U(0.075, top + 0.06)]),
            ],
            dark,
        )
        pt.line([U(0.0, 0.33 + dy), U(0.0, min(hem_v, 0.78 if b.sitting else hem_v))], dark, 0.008 * H)
        for bv in (0.37, 0.44, 0.51):
            bx, by = U(0.025, bv + dy)
            pt.detail([("ellipse", (bx - 0.012 * H, by - 0.012 * H, bx + 0.012 * H, by + 0.012 * H))], dark)
    elif scene.type == "hoodie":
        pv = hem_v - 0.12
        pt.detail([("poly", [U(-0.07, pv), U(0.07, pv), U(0.09, pv + 0.09), U(-0.09, pv + 0.09)])], dark)
        for sx in (-0.03, 0.03):
            pt.line([U(sx, top + 0.01), U(sx * 1.2, top + 0.11)], (245, 245, 245), 0.008 * H)
        pt.detail([("rrect", (*U(-0.12, hem_v - 0.025), *U(0.12, hem_v)), 0.005 * H)], dark)


_EYE = (20, 20, 24)


def _draw_head(pt: Painter, b: _Body):
    """Neck, head, hair, eyes, the runner's speed lines and the mouth."""
    H, U, hx, hy, r, skin = b.H, b.U, b.hx, b.hy, b.r, b.skin
    nx, ny = b.P("neck")
    pt.shape([("rrect", (nx - 0.03 * H, ny - 0.04 * H, nx + 0.03 * H, ny + 0.035 * H), 0.01 * H)], skin, outline=False)
    if b.scene.type in ("t-shirt", "hoodie", "coat"):
        pt.detail([("chord", (nx - 0.045 * H, ny - 0.005 * H, nx + 0.045 * H, ny + 0.055 * H), 0, 180)], skin)
    pt.shape([("ellipse", (hx - r, hy - r * 1.08, hx + r, hy + r * 1.02))], skin, photo_edge=b.skin_edge)
    pt.shape([("chord", (hx - r * 1.06, hy - r * 1.18, hx + r * 1.06, hy + r * 0.55), 180, 360)], b.hair, outline=False)
    er = 0.0095 * H
    for sx in (-0.026, 0.026):
        ex, ey = hx + sx * H, hy + 0.004 * H
        pt.detail([("ellipse", (ex - er * 1.6, ey - er * 1.35, ex + er * 1.6, ey + er * 1.35))], (250, 250, 250))
        pt.detail([("ellipse", (ex - er, ey - er, ex + er, ey + er))], _EYE)
    if b.scene.pose == "running":  # speed lines behind the runner
        for k, v in enumerate((0.3, 0.4, 0.5)):
            x0_, y0_ = U(-0.3 - 0.04 * k, v)
            pt.line(
                [(x0_ - 0.14 * H, y0_), (x0_, y0_)], (120, 120, 130) if pt.outline is None else pt.outline, 0.012 * H
            )
    pt.draw.arc(
        (hx - 0.022 * H, hy + 0.01 * H, hx + 0.022 * H, hy + 0.045 * H),
        20,
        160,
        fill=(150, 60, 60, 255),
        width=max(1, int(0.007 * H)),
    )


def _draw_worn_glasses(pt: Painter, b: _Body):
    """Pale lenses in dark frames read on every skin tone."""
    H, hx, hy = b.H, b.hx, b.hy
    er = 0.0095 * H
    gr = 0.026 * H
    gw = max(2, int(round(0.011 * H)))
    for sx in (-0.029, 0.029):
        ex, ey = hx + sx * H, hy + 0.004 * H
        pt.draw.ellipse(
            (ex - gr, ey - gr, ex + gr, ey + gr), fill=(206, 230, 250, 255), outline=(16, 16, 20, 255), width=gw
        )
        pt.draw.ellipse((ex - er * 0.8, ey - er * 0.8, ex + er * 0.8, ey + er * 0.8), fill=_EYE + (255,))
    pt.line([(hx - 0.006 * H, hy), (hx + 0.006 * H, hy)], (16, 16, 20), gw)


def _draw_worn_hat(pt: Painter, b: _Body):
    H, hx, hy = b.H, b.hx, b.hy
    pt.shape(
        [
            ("ellipse", (hx - 0.125 * H, hy - 0.08 * H, hx + 0.125 * H, hy - 0.035 * H)),
            ("rrect", (hx - 0.07 * H, hy - 0.16 * H, hx + 0.07 * H, hy - 0.05 * H), 0.03 * H),
        ],
        HAT_STRAW,
        photo_edge=shade(HAT_STRAW, 0.7),
    )
    pt.detail([("rrect", (hx - 0.07 * H, hy - 0.085 * H, hx + 0.07 * H, hy - 0.06 * H), 0.004 * H)], HAT_BAND)


def _draw_shoulder_bag(pt: Painter, b: _Body):
    """A shoulder bag on a strap from the left shoulder."""
    H = b.H
    sx, sy = b.P("sh_l")
    bx, by = b.U(0.13, 0.5 + b.dy)
    pt.line([(sx + 0.02 * H, sy), (bx, by)], shade(BAG_TAN, 0.6), 0.014 * H)
    pt.shape(
        [("rrect", (bx - 0.05 * H, by - 0.035 * H, bx + 0.07 * H, by + 0.06 * H), 0.015 * H)],
        BAG_TAN,
        photo_edge=shade(BAG_TAN, 0.6),
    )
    pt.detail(
        [("poly", [(bx - 0.05 * H, by - 0.035 * H), (bx + 0.07 * H, by - 0.035 * H), (bx + 0.01 * H, by + 0.015 * H)])],
        shade(BAG_TAN, 0.82),
    )


def draw_person(pt: Painter, scene: Scene, cx: float, base: float, H: float, rnd: random.Random, tex: Tex):
    """Back to front: stool, long hair and hood, legs, torso, arms and garment, garment details, head,
    then the accessories."""
    b = _Body(scene, cx, base, H, rnd)
    if b.sitting:
        _draw_stool(pt, b)
    _draw_behind_head(pt, b, tex)
    _draw_legs(pt, b)
    _draw_torso_skin(pt, b)
    _draw_arms_and_garment(pt, b, tex)
    _draw_garment_details(pt, b)
    _draw_head(pt, b)
    if scene.glasses:
        _draw_worn_glasses(pt, b)
    if scene.hat:
        _draw_worn_hat(pt, b)
    if scene.bag:
        _draw_shoulder_bag(pt, b)


class _ItemFrame:
    """An item's coordinates: u across from its centre, v down from its top, both in item heights."""

    def __init__(self, cx: float, base: float, h: float):
        self.cx, self.base, self.h = cx, base, h

    def U(self, u, v):
        return (self.cx + u * self.h, self.base - self.h + v * self.h)

    def box(self, u0, v0, u1, v1):
        return (*self.U(u0, v0), *self.U(u1, v1))


def _draw_vase(pt: Painter, f: _ItemFrame, shape: str, tex: Tex, edge, dark):
    """A round-bellied or straight-shouldered vase with its neck and opening."""
    U, box, h = f.U, f.box, f.h
    if shape == "round":
        body = [
            ("ellipse", box(-0.42, 0.25, 0.42, 1.0)),
            ("rrect", box(-0.12, 0.08, 0.12, 0.4), 0.03 * h),
            ("ellipse", box(-0.19, 0.04, 0.19, 0.14)),
        ]
    else:
        body = [
            ("poly", [U(-0.3, 0.3), U(-0.12, 0.2), U(0.12, 0.2), U(0.3, 0.3), U(0.3, 1.0), U(-0.3, 1.0)]),
            ("rrect", box(-0.12, 0.06, 0.12, 0.26), 0.02 * h),
            ("rrect", box(-0.18, 0.02, 0.18, 0.1), 0.02 * h),
        ]
    pt.shape(body, tex, photo_edge=edge)
    pt.detail([("ellipse", box(-0.13, 0.055, 0.13, 0.11))], shade(dark, 0.6))


def _draw_lamp(pt: Painter, f: _ItemFrame, shape: str, tex: Tex, edge, dark):
    """A lamp: metal stand and base, a dome or a tapered shade."""
    U, box, h = f.U, f.box, f.h
    pt.shape(
        [("rrect", box(-0.028, 0.38, 0.028, 0.95), 0.01 * h), ("ellipse", box(-0.22, 0.91, 0.22, 1.0))],
        METAL,
        photo_edge=shade(METAL, 0.6),
    )
    if shape == "round":
        shade_ = [("chord", box(-0.38, 0.0, 0.38, 0.86), 180, 360)]
    else:
        shade_ = [("poly", [U(-0.22, 0.02), U(0.22, 0.02), U(0.38, 0.43), U(-0.38, 0.43)])]
    pt.shape(shade_, tex, photo_edge=edge)


def _draw_chair(pt: Painter, f: _ItemFrame, shape: str, tex: Tex, edge, dark):
    """A chair: legs, a round or square back, the seat."""
    U, box, h = f.U, f.box, f.h
    legs = [
        ("limb", [U(-0.3, 0.58), U(-0.31, 1.0)], 0.06 * h),
        ("limb", [U(0.3, 0.58), U(0.31, 1.0)], 0.06 * h),
        ("limb", [U(-0.2, 0.58), U(-0.2, 0.9)], 0.05 * h),
        ("limb", [U(0.2, 0.58), U(0.2, 0.9)], 0.05 * h),
    ]
    pt.shape(legs, dark)
    if shape == "round":
        back = [("ellipse", box(-0.3, 0.0, 0.3, 0.52)), ("rrect", box(-0.05, 0.4, 0.05, 0.56), 0.01 * h)]
    else:
        back = [("rrect", box(-0.28, 0.0, 0.28, 0.5), 0.03 * h)]
    seat = [
        ("poly", [U(-0.3, 0.5), U(0.3, 0.5), U(0.36, 0.6), U(-0.36, 0.6)]),
        ("rrect", box(-0.36, 0.58, 0.36, 0.66), 0.02 * h),
    ]
    pt.shape(back + seat, tex, photo_edge=edge)


def _draw_cushion(pt: Painter, f: _ItemFrame, shape: str, tex: Tex, edge, dark):
    """A round cushion with a button and tufting lines, or a square one with piping and corner tufts."""
    U, box, h = f.U, f.box, f.h
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
        pt.draw.rounded_rectangle(
            box(-0.45, 0.1, 0.45, 0.9), radius=0.1 * h, outline=dark + (255,), width=max(1, int(0.02 * h))
        )
        for u, v in ((-0.5, 0.06), (0.5, 0.06), (-0.5, 0.94), (0.5, 0.94)):
            x, y = U(u, v)
            pt.detail([("ellipse", (x - 0.05 * h, y - 0.05 * h, x + 0.05 * h, y + 0.05 * h))], dark)


def _draw_mug(pt: Painter, f: _ItemFrame, shape: str, tex: Tex, edge, dark):
    """A mug: handle, body, the rim's opening."""
    U, box, h = f.U, f.box, f.h
    hr = 0.34 if shape == "square" else 0.4
    pt.shape([("arc", box(hr - 0.12, 0.22, hr + 0.32, 0.72), 270, 90, 0.1 * h)], tex, photo_edge=edge)
    if shape == "round":
        body = [("rrect", box(-0.4, 0.05, 0.4, 0.6), 0.05 * h), ("ellipse", box(-0.4, 0.25, 0.4, 1.0))]
    else:
        body = [("rrect", box(-0.34, 0.0, 0.34, 1.0), 0.04 * h)]
    pt.shape(body, tex, photo_edge=edge)
    top_v = 0.0 if shape == "square" else 0.05
    pt.detail([("ellipse", box(-hr + 0.04, top_v - 0.01, hr - 0.04, top_v + 0.07))], shade(dark, 0.55))


def _draw_handbag(pt: Painter, f: _ItemFrame, shape: str, tex: Tex, edge, dark):
    """A handbag: one arched handle over a half-round body, or two over a box."""
    U, box, h = f.U, f.box, f.h
    if shape == "round":
        pt.shape([("arc", box(-0.28, 0.0, 0.28, 0.7), 180, 360, 0.07 * h)], dark)
        body = [("chord", box(-0.5, -0.3, 0.5, 1.0), 0, 180)]
    else:
        pt.shape(
            [
                ("arc", box(-0.3, 0.0, -0.02, 0.6), 180, 360, 0.06 * h),
                ("arc", box(0.02, 0.0, 0.3, 0.6), 180, 360, 0.06 * h),
            ],
            dark,
        )
        body = [("rrect", box(-0.46, 0.3, 0.46, 1.0), 0.05 * h)]
    pt.shape(body, tex, photo_edge=edge)
    pt.detail([("rrect", box(-0.06, 0.38, 0.06, 0.46), 0.01 * h)], (226, 196, 90))


def _draw_hat(pt: Painter, f: _ItemFrame, shape: str, tex: Tex, edge, dark):
    """A hat: brim, a round or flat-topped crown, the band."""
    U, box, h = f.U, f.box, f.h
    if shape == "round":
        crown = [("chord", box(-0.32, 0.0, 0.32, 1.3), 180, 360)]
    else:
        crown = [("rrect", box(-0.3, 0.02, 0.3, 0.72), 0.04 * h)]
    brim = [("ellipse", box(-0.6, 0.6, 0.6, 0.95))]
    pt.shape(brim + crown, tex, photo_edge=edge)
    pt.detail(
        [("rrect", box(-0.315 if shape == "round" else -0.3, 0.5, 0.315 if shape == "round" else 0.3, 0.62), 0.01 * h)],
        dark,
    )


def _draw_sunglasses(pt: Painter, f: _ItemFrame, shape: str, tex: Tex, edge, dark):
    """Sunglasses: frames, bridge and arms, dark lenses with a glint."""
    U, box, h = f.U, f.box, f.h
    rr = 0.34
    frames, lenses = [], []
    for su in (-0.42, 0.42):
        if shape == "round":
            frames.append(("ellipse", box(su - rr, 0.5 - rr, su + rr, 0.5 + rr)))
            lenses.append(("ellipse", box(su - rr + 0.09, 0.5 - rr + 0.09, su + rr - 0.09, 0.5 + rr - 0.09)))
        else:
            frames.append(("rrect", box(su - rr - 0.02, 0.5 - rr * 0.85, su + rr + 0.02, 0.5 + rr * 0.85), 0.08 * h))
            lenses.append(
                ("rrect", box(su - rr + 0.07, 0.5 - rr * 0.85 + 0.09, su + rr - 0.07, 0.5 + rr * 0.85 - 0.09), 0.05 * h)
            )
    frames.append(("arc", box(-0.14, 0.32, 0.14, 0.62), 200, 340, 0.08 * h))
    frames.append(("limb", [U(-0.78, 0.42), U(-0.86, 0.36)], 0.08 * h))
    frames.append(("limb", [U(0.78, 0.42), U(0.86, 0.36)], 0.08 * h))
    pt.shape(frames, tex, photo_edge=edge)
    pt.detail(lenses, LENS)
    for su in (-0.42, 0.42):
        pt.line([U(su - 0.12, 0.4), U(su - 0.02, 0.32)], (200, 205, 215), 0.03 * h)


def _draw_watch(pt: Painter, f: _ItemFrame, shape: str, tex: Tex, edge, dark):
    """A wristwatch: strap with holes, round or square case, face and hands."""
    U, box, h = f.U, f.box, f.h
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


_ITEM_DRAWERS = {
    "vase": _draw_vase,
    "lamp": _draw_lamp,
    "chair": _draw_chair,
    "cushion": _draw_cushion,
    "mug": _draw_mug,
    "handbag": _draw_handbag,
    "hat": _draw_hat,
    "sunglasses": _draw_sunglasses,
    "watch": _draw_watch,
}


def draw_item(pt: Painter, scene: Scene, cx: float, base: float, h: float, tex: Tex):
    rgb = A.COLOR_RGB[scene.color]
    edge = shade(rgb, 0.6)
    dark = shade(rgb, 0.62) if scene.color != "black" else (95, 95, 100)
    draw = _ITEM_DRAWERS.get(scene.type)
    if draw is not None:
        draw(pt, _ItemFrame(cx, base, h), scene.shape, tex, edge, dark)


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
        pt.shape(leaves, leaf, photo_edge=shade(leaf, 0.6))
        pt.shape(
            [
                ("poly", [U(-0.27, 0.55), U(0.27, 0.55), U(0.2, 1.0), U(-0.2, 1.0)]),
                ("rrect", box(-0.3, 0.52, 0.3, 0.62), 0.02 * h),
            ],
            (196, 98, 60),
            photo_edge=(120, 60, 36),
        )
    elif kind == "box":
        card = (204, 160, 108)
        pt.shape(
            [("poly", [U(-0.55, 0.22), U(0.35, 0.22), U(0.55, 0.06), U(-0.35, 0.06)])],
            shade(card, 1.12),
            photo_edge=(130, 100, 66),
        )
        pt.shape(
            [
                ("rrect", box(-0.55, 0.22, 0.35, 1.0), 0.01 * h),
                ("poly", [U(0.35, 0.22), U(0.55, 0.06), U(0.55, 0.84), U(0.35, 1.0)]),
            ],
            card,
            photo_edge=(130, 100, 66),
        )
        pt.detail([("poly", [U(0.35, 0.22), U(0.55, 0.06), U(0.55, 0.84), U(0.35, 1.0)])], shade(card, 0.82))
        pt.detail(
            [
                ("poly", [U(-0.22, 0.06), U(-0.08, 0.06), U(-0.18, 0.22), U(-0.32, 0.22)]),
                ("rrect", box(-0.32, 0.22, -0.18, 0.5), 0),
            ],
            (232, 214, 176),
        )
    elif kind == "cat":
        fur = (112, 112, 124)
        pt.shape([("arc", box(0.18, 0.25, 0.62, 0.95), 200, 40, 0.08 * h)], fur)
        body = [
            ("ellipse", box(-0.38, 0.35, 0.32, 1.0)),
            ("ellipse", box(-0.5, 0.02, -0.04, 0.48)),
            ("poly", [U(-0.48, 0.18), U(-0.46, -0.1), U(-0.32, 0.08)]),
            ("poly", [U(-0.06, 0.18), U(-0.08, -0.1), U(-0.22, 0.08)]),
        ]
        pt.shape(body, fur, photo_edge=(70, 70, 80))
        for su in (-0.36, -0.18):
            pt.detail([("ellipse", box(su - 0.04, 0.2, su + 0.04, 0.28))], (190, 220, 90))
        pt.detail([("poly", [U(-0.3, 0.32), U(-0.24, 0.32), U(-0.27, 0.36)])], (230, 150, 160))

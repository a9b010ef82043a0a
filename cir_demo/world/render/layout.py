"""Where the subjects and the secondary object stand: world sizes, count, relation, view."""

from __future__ import annotations

import random
from dataclasses import dataclass


from ..scene import Scene


# World sizes, as fractions of the image height in the wide view: (height, width/height).
SUBJECT_SIZE = {
    "vase": (0.44, 0.86),
    "lamp": (0.6, 0.8),
    "chair": (0.52, 0.76),
    "cushion": (0.32, 1.12),
    "mug": (0.28, 1.0),
    "handbag": (0.36, 1.0),
    "hat": (0.3, 1.22),
    "sunglasses": (0.18, 1.75),
    "watch": (0.38, 0.62),
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

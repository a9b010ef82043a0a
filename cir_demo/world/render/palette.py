"""Sizes, colours and colour arithmetic shared by every layer of the renderer."""

from __future__ import annotations


import numpy as np


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
HAIR_RGB = {
    "black": (34, 28, 28),
    "brown": (104, 62, 36),
    "blonde": (226, 192, 112),
    "auburn": (152, 62, 32),
    "gray": (176, 176, 180),
    "none": (0, 0, 0),
}
STOOL = (96, 84, 78)

# Light on the subjects by time of day (RGB multipliers).
# Mild on purpose: a white mug at sunset must still read as white.
LIGHT = {"morning": (1.0, 0.97, 0.93), "day": (1.0, 1.0, 1.0), "sunset": (1.0, 0.9, 0.8), "night": (0.8, 0.82, 0.95)}


def mix(a, b, t: float):
    return tuple(int(round(x + (y - x) * t)) for x, y in zip(a, b))


def shade(c, f: float):
    return tuple(max(0, min(255, int(round(x * f)))) for x in c)


def contrast_rgb(color: str):
    """Second colour of a pattern: white on dark/mid colours, navy on light ones."""
    return (40, 44, 80) if color in ("white", "yellow", "pink") else (250, 250, 246)

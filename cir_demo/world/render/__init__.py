"""Deterministic PIL/NumPy renderer: one scene graph -> one RGB image.

Readable shapes and clear colours over realism. Each image is drawn at twice its output
size and box-downsampled (cheap anti-aliasing). The same scene always gives the same bytes:
all jitter comes from `scene.variant`, never from global state.

Layers, back to front: background (place x time x weather, cached), the subjects and the
secondary object on a transparent layer (tinted by the time-of-day light), weather
particles, then the art style: photo (shading, soft shadows, depth blur, grain), flat
(bold outlines, solid fills) or sketch (graphite lines and coloured hatching on paper).

Modules: palette (sizes, colours), paint (textures, the painter), figures (people, objects),
layout (placement), backgrounds, compose (layers and styles: `render_scene`).
"""

from .compose import RENDER_SIZE, render_scene

__all__ = ["RENDER_SIZE", "render_scene"]

"""The scene attributes the world models learn to read from an image (the CLIP's auxiliary heads, the
judge's stage 1): every scene field but the nuisance `hair` and the layout seed `variant`. Its order
is the order of those heads' outputs, so it is part of what a training run computes."""

from __future__ import annotations

from cir_demo.world.attributes import SCENE_FIELDS

PREDICTED_FIELDS = tuple(f for f in SCENE_FIELDS if f not in ("hair", "variant"))

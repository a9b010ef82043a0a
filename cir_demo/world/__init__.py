"""The offline world: a procedurally rendered CIR benchmark with exact, exhaustive judgments.

Every image is a scene graph (`Scene`) rendered on demand; every query's target is a set of
constraints over scene attributes, so positives are *all* test images that satisfy it and
explicit negatives are images that break exactly one constraint.

    from cir_demo.world import load_world, render_image
    bench = load_world(size="tiny", seed=0)        # generates into the cache on first use
    img = render_image(bench.queries[0].reference_ids[0])

Importing this package is cheap (no torch, no generation, no rendering).
"""

from __future__ import annotations

_LAZY = {
    "generate_world": "disk",
    "world_dir": "disk",
    "build_world": "generate",
    "SIZES": "generate",
    "GENERATOR_VERSION": "generate",
    "load_world": "loader",
    "load_train": "loader",
    "render_image": "loader",
    "render_batch": "loader",
    "scene_of": "loader",
    "open_world": "loader",
    "load_intents": "loader",
    "load_test_captions": "loader",
    "caption_hits": "loader",
    "intent_constraints": "loader",
    "TrainSplit": "loader",
    "TestCaption": "loader",
    "render_scene": "render",
    "RENDER_SIZE": "render",
    "Scene": "scene",
    "Constraint": "scene",
    "satisfies": "scene",
    "violations": "scene",
    "caption_matches": "captions",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

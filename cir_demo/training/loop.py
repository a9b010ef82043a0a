"""What the three world-model trainers share: the step plan and the learning-rate schedule."""

from __future__ import annotations

import math


def step_plan(steps_per_epoch: int, epochs: float, max_steps: int | None, desc: str, progress: bool):
    """(total steps, the step iterable: a tqdm bar when `progress`) for `epochs` of `steps_per_epoch`,
    capped at `max_steps` (tests: stop after a few steps)."""
    total = max(1, int(round(epochs * steps_per_epoch)))
    if max_steps is not None:
        total = min(total, max_steps)
    steps = range(total)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc=desc, unit="step")
    return total, steps


def lr_at(step: int, total: int, base: float, warmup: int = 0) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay from `base` to 0 at `total`."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

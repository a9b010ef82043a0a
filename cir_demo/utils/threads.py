"""Torch's CPU thread count for a stretch of work (the setting is process-wide; torch is imported
only by the callers that already use it)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def torch_threads(n: int):
    """torch on `n` CPU threads meanwhile, then on as many as before."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)

"""Out of GPU memory: retry with half the batch, down to one item, then say what to do.

`OomBackoff` keeps the batch size that worked, so after one halving every later batch
uses the smaller size instead of failing again.
"""

from __future__ import annotations

import sys
from typing import Callable, Sequence, TypeVar

import numpy as np

T = TypeVar("T")


def is_out_of_memory(exc: BaseException) -> bool:
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def _free_cache() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover
        pass


class OomBackoff:
    """Call `fn(chunk, batch_size)` over `items`, halving the batch on out-of-memory errors."""

    def __init__(self, batch_size: int, what: str, stream=None):
        self.batch_size = int(batch_size)
        self.what = what
        self.stream = stream

    def __call__(self, items: Sequence[T], fn: Callable[[Sequence[T], int], np.ndarray]) -> np.ndarray:
        from cir_demo.errors import UserError

        out: list[np.ndarray] = []
        start = 0
        while start < len(items):
            chunk = items[start : start + self.batch_size]
            try:
                out.append(np.asarray(fn(chunk, self.batch_size)))
            except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled, the rest re-raised
                if not is_out_of_memory(exc):
                    raise
                _free_cache()
                if self.batch_size == 1:
                    raise UserError(
                        f"{self.what}: out of GPU memory even with a batch of 1; free the GPU (other processes: "
                        "nvidia-smi), use fp16 weights, or run on the CPU with --device cpu"
                    ) from exc
                self.batch_size = max(1, self.batch_size // 2)
                print(
                    f"warning: {self.what}: out of GPU memory; retrying with batch size {self.batch_size} "
                    f"(pass --batch-size {self.batch_size} to start there)",
                    file=self.stream or sys.stderr,
                    flush=True,
                )
                continue
            start += len(chunk)
        return np.concatenate(out, axis=0) if out else np.zeros((0, 0), np.float32)

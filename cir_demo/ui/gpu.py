"""`on_gpu`: marks the callbacks that may run a model (retrieval, reranking) for Hugging Face
ZeroGPU Spaces, where a GPU is attached only while a function decorated with `spaces.GPU`
runs. Without the `spaces` package (anywhere but a Space) it returns the function unchanged,
so the app is the same everywhere. `spaces` is not a requirement: Spaces install it.
"""

from __future__ import annotations

from typing import Callable

try:  # pragma: no cover - only on a Space
    import spaces as _spaces
except ImportError:
    _spaces = None

GPU_SECONDS = 60  # ZeroGPU's default budget per call; a query view needs far less


def on_gpu(fn: Callable) -> Callable:
    """`spaces.GPU(duration=GPU_SECONDS)(fn)` when `spaces` is installed, else `fn` itself."""
    if _spaces is None:
        return fn
    return _spaces.GPU(duration=GPU_SECONDS)(fn)

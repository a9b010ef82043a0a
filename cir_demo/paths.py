"""Where the project keeps generated data. Override the cache with CIR_DEMO_CACHE."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Generated worlds, downloaded images, reranker score caches (never committed)."""
    return Path(os.environ.get("CIR_DEMO_CACHE", REPO_ROOT / "cache"))


def indexes_dir() -> Path:
    return Path(os.environ.get("CIR_DEMO_INDEXES", REPO_ROOT / "indexes"))


def assets_dir() -> Path:
    """Small committed weights (safetensors + manifest)."""
    return REPO_ROOT / "assets"


def runs_dir() -> Path:
    return Path(os.environ.get("CIR_DEMO_RUNS", REPO_ROOT / "runs"))

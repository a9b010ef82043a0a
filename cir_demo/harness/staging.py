"""Where an --eval run goes: `--out`, else a new `runs/<time>-<benchmark>`; it is written there by
`staged_run_dir` (cir_demo/utils/staged_folder.py), which every command writing a folder uses.
Caches (indexes, embeddings, reranker scores) live elsewhere, so a re-run after a kill reuses
all the work done before it.
"""
from __future__ import annotations

import time
from pathlib import Path

from cir_demo.utils.staged_folder import PARTIAL, clean_abandoned, staged_run_dir  # noqa: F401 (the run's staging)


def default_out_dir(benchmark_name: str) -> Path:
    """`runs/<time>-<benchmark>` (`-2`, `-3`, ... when a run of the same second has it): where a run
    goes when --out is not given; never an existing folder."""
    from cir_demo.paths import runs_dir

    base = runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-{benchmark_name}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path



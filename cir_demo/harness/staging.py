"""Where an --eval run goes: `--out`, else a new `runs/<time>-<benchmark>`; it is written there by
`staged_run_dir` (cir_demo/utils/owned_folder.py), which every command writing a folder uses.
Caches (indexes, embeddings, reranker scores) live elsewhere, so a re-run after a kill reuses
all the work done before it.
"""

from __future__ import annotations

from pathlib import Path

from cir_demo.utils.owned_folder import PARTIAL, staged_run_dir  # noqa: F401 (the run's staging)


def default_out_dir(benchmark_name: str) -> Path:
    """A new empty `runs/<time>-<benchmark>` of this run alone (results/run_folders.py): where a run goes
    when --out is not given; passed to `staged_run_dir` with `reserved=True`."""
    from cir_demo.results.run_folders import new_run_folder

    return new_run_folder(benchmark_name)

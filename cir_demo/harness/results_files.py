"""`--eval --results-json`: score rankings produced elsewhere (no images, no model, no torch
import) and write the same run folder a full run writes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from cir_demo.harness.settings import EvalSettings
from cir_demo.harness.staging import default_out_dir


def evaluate_results_files(settings: EvalSettings) -> int:
    """Score every `--results-json` file on the benchmark, write the run folder, print a summary."""
    from cir_demo.utils.gc_pause import collector_paused

    with collector_paused(collect_after=False):  # millions of ids, rankings and queries (utils/gc_pause.py)
        return _evaluate_results_files(settings)


def _evaluate_results_files(settings: EvalSettings) -> int:
    from cir_demo.harness.report import write_outputs

    if settings.dry_run:
        return _dry_run(settings)
    bench = settings.benchmark.load()
    for w in bench.warnings:
        text = str(w)
        print(text if len(text) <= 400 else text[:400] + " ...", file=sys.stderr)
    if bench.warnings:
        print(
            f"({len(bench.warnings)} warnings reading the benchmark; `python -m cir_demo validate` lists them in full)",
            file=sys.stderr,
        )
    paths = list(settings.results_json)
    if len(paths) > 1:  # a bar for one file says nothing, and importing tqdm is a share of a short run
        from tqdm import tqdm

        paths = tqdm(paths, desc="evaluating results files", unit="file")
    evaluations = score_results_files(bench, paths, settings.results_format, settings.n_boot, settings.bootstrap_seed)
    from cir_demo.harness.latex import check_baseline
    from cir_demo.harness.staging import staged_run_dir

    check_baseline([ev.name for ev in evaluations], settings.baseline)  # before any file is written

    final = Path(settings.out) if settings.out else default_out_dir(bench.name)
    with staged_run_dir(final, settings.overwrite, reserved=not settings.out, wait=settings.wait) as out:
        paths = write_outputs(
            bench,
            evaluations,
            out,
            n_boot=settings.n_boot,
            seed=settings.bootstrap_seed,
            plots=settings.plots,
            baseline=settings.baseline,
        )
        paths["run_info.json"] = write_run_info(bench, evaluations, out)
    print(f"wrote {len(paths) + 1} files to {final}")  # and the run's manifest; once the run is in place
    from cir_demo.results.run_folders import record_run_folder

    if not record_run_folder(final):  # outside runs/: remembered so the app's Report lists it
        print(
            f"note: the app's Report will not list {final} (the runs folder is not writable); "
            f"open it with python app.py --runs {final}",
            file=sys.stderr,
        )
    print(_summary(evaluations, bench))
    return 0


def _dry_run(settings: EvalSettings) -> int:
    """What scoring the files would write, each file read and checked; nothing is created (no world
    generated, no run folder, no results)."""
    from cir_demo.preflight.dry_run import not_generated_note
    from cir_demo.results import read_results

    note = not_generated_note(settings.benchmark)
    if note:
        print(note)
        return 0
    bench = settings.benchmark.load()
    for path in settings.results_json:
        rf = read_results(path, bench, fmt=settings.results_format)
        print(f"dry run: {path}: {rf.name}, {len(rf.run):,} rankings of {len(bench.queries):,} queries")
    where = settings.out or f"a new runs/<time>-{bench.name}"
    print(
        f"dry run: would score {len(settings.results_json)} results files and write the run to {where}; nothing was created"
    )
    return 0


def score_results_files(
    bench,
    paths,
    fmt: str = "auto",
    n_boot: int = 1000,
    seed: int = 0,
    names: Sequence[str | None] | None = None,
    store=None,
) -> list:
    """Each results file read onto the benchmark, its per-query rows read from the store (a stored eval
    run or the cache under the file's key, else scored and cached: `RunStore.file_rows`), its aggregates
    and intervals from those rows, with its coverage; warnings go to stderr naming the file. `names`: each
    run's name (None: the file's own, made unique). Each evaluation's `key` is its run's in the store."""
    from cir_demo.results import read_results
    from cir_demo.store.score import evaluation_of_rows
    from cir_demo.store.store import RunStore, results_file_key

    store = store or RunStore(bench)
    evaluations = []
    names_seen: set[str] = set()
    for i, path in enumerate(paths):
        rf = read_results(path, bench, fmt=fmt)
        given = names[i] if names is not None else None
        name = given or (rf.name if rf.name not in names_seen else f"{rf.name}_{len(names_seen)}")
        names_seen.add(name)
        msgs = [w.message for w in rf.warnings()]
        for m in msgs:
            print(f"warning: {path}: {m}", file=sys.stderr)
        key = results_file_key(bench, rf)
        rows, _ = store.file_rows(name, rf, key)
        ev = evaluation_of_rows(bench, rows, name, n_boot=n_boot, seed=seed, warnings=msgs)
        for m in ev.warnings[len(msgs) :]:  # what scoring found (e.g. queries without positives)
            print(f"warning: {path}: {m}", file=sys.stderr)
        ev.metrics["coverage"] = rf.coverage
        ev.metrics["unknown_ids"] = rf.n_unknown_ids
        ev.metrics["unknown_query_keys"] = len(rf.unknown_query_keys)
        ev.key = key.digest()
        evaluations.append(ev)
    return evaluations


def write_run_info(bench, evaluations, out: Path) -> Path:
    """run_info.json of an eval run of results files: its benchmark and `run_keys`, each run's key in the
    store (`RunEvaluation.key`), under which the app (`--runs`), `failures` and the Python API read its
    rows instead of scoring the files again."""
    from cir_demo.engine import benchmark_fingerprint
    from cir_demo.utils.io import write_json_atomic

    info = {
        "benchmark": bench.name,
        "benchmark_fingerprint": benchmark_fingerprint(bench),
        "run_keys": {ev.name: ev.key for ev in evaluations if ev.key},
    }
    write_json_atomic(out / "run_info.json", info)
    return out / "run_info.json"


def _summary(evaluations, bench) -> str:
    from cir_demo.store.score import family_of

    heads = family_of(bench).summary_columns()[:4]
    lines = []
    for ev in evaluations:
        vals = "  ".join(f"{h}={ev.metrics.get(h, float('nan')):.4f}" for h in heads)
        lines.append(f"{ev.name}: {vals}")
    return "\n".join(lines)

"""The shipped eval outputs (cir_demo/index/prebuilt_run.py) under `python -m cir_demo index prebuilt`:
building them runs `--eval` of the benchmark's defaults in this process, exactly as `python app.py
--eval` with the same flags does, in an empty temporary data folder (`empty_data_folder`: no cached
score, feature or embedding of any earlier run can stand in for a computed one), and packs the run;
`--check` says whether they match the benchmark, the weights, the code and the libraries (their key),
and, apart from that, recomputes every number they hold (harness/shipped_check.py: the rows of intents
drawn at check time from the models in an empty data folder, every other file from the rows), so a
shipped number forged with its records rewritten is found; `--check --rerun` runs the whole `--eval`
again and compares every shipped file with what it wrote, byte for byte."""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from cir_demo.benchmarks.cli_args import BenchmarkChoice

EVAL_COMMAND = ["python", "-m", "cir_demo", "eval"]
DATA_ENV = (
    "CIR_DEMO_DATA",
    "CIR_DEMO_CACHE",
    "CIR_DEMO_INDEXES",
    "CIR_DEMO_RUNS",
    "CIR_DEMO_BENCHMARK_CACHE",
    "CIR_DEMO_CODE_MEMO",
)
ROW_TOLERANCE = 1e-6  # per-query metrics; a reranker's last bits depend on its batch, a changed rank does not


@contextlib.contextmanager
def empty_data_folder() -> Iterator[Path]:
    """The data folder (cache, indexes, runs, stored benchmarks) is a new empty temporary folder for the
    block, removed after it: what the block computes is computed, never read from an earlier run."""
    saved = {k: os.environ.get(k) for k in DATA_ENV}
    with tempfile.TemporaryDirectory(prefix="cir-demo-empty-data-") as tmp:
        for k in DATA_ENV:
            os.environ.pop(k, None)
        os.environ["CIR_DEMO_DATA"] = tmp
        try:
            yield Path(tmp)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def eval_flags(choice: BenchmarkChoice, names: list[str], reranker: str | None) -> list[str]:
    """The `--eval` flags of the shipped run: the benchmark's, its retrievers and reranker, every other
    flag at its default (as the app's background run)."""
    from cir_demo.benchmarks.cli_args import benchmark_flags

    return [
        *benchmark_flags(choice.name, choice.kwargs, choice.limit),
        "--retrievers",
        ",".join(names),
        "--rerank",
        reranker or "none",
    ]


def run_eval(flags: list[str], out: Path) -> None:
    from cir_demo.harness import cli as eval_cli

    parser = argparse.ArgumentParser(prog="eval")
    eval_cli.add_arguments(parser)
    rc = eval_cli.run(parser.parse_args([*flags, "--out", str(out)]))
    if rc:
        raise ValueError(f"the --eval run for the shipped outputs failed (exit {rc}); see its message above")


def key_of_run(run_dir: Path) -> dict:
    """`run_key` of an `--eval` run folder, from its run_info.json and the code and libraries now."""
    from cir_demo.index.prebuilt_run import run_key
    from cir_demo.rerank.base import spec_hash_of
    from cir_demo.retrievers.base import spec_hash

    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    rr = info.get("reranker")
    return run_key(
        info["benchmark_fingerprint"],
        {n: spec_hash(s) for n, s in info["retrievers"].items()},
        spec_hash_of(rr) if rr else None,
        info.get("rerank_top_n"),
    )


def build_shipped_run(
    choice: BenchmarkChoice, bench, names: list[str], reranker: str | None, in_data_folder: bool = False
) -> Path:
    """Run `--eval` on the benchmark `choice` selects (`bench`, loaded) and write its outputs as the
    benchmark's shipped run, in an empty data folder unless `in_data_folder`; refuses when the code
    changed while it ran (the key names the code the outputs came from)."""
    from cir_demo.index.prebuilt import code_version
    from cir_demo.index.prebuilt_run import output_code_sha256, pack_run, shipped_dir

    flags = eval_flags(choice, names, reranker)
    code = output_code_sha256()
    with tempfile.TemporaryDirectory(prefix="cir-demo-shipped-") as tmp:
        out, started = Path(tmp) / "run", time.perf_counter()
        with empty_data_folder() if not in_data_folder else contextlib.nullcontext():
            run_eval(flags, out)
        output_code_sha256.cache_clear()
        if output_code_sha256() != code:
            raise ValueError("the code under cir_demo/ changed while the run ran; run the command again")
        provenance = {
            "code": code_version(),
            "eval_seconds": round(time.perf_counter() - started, 1),
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        return pack_run(
            out,
            shipped_dir(bench),
            key_of_run(out),
            [*EVAL_COMMAND, *flags],
            provenance,
            first_query_of_run(out, bench, names),
        )


def first_query_of_run(run_dir: Path, bench, names: list[str]) -> dict:
    """The shipped manifest's choice of the query the app's first visit opens, per set of these first-stage
    runs (`index.first_query`), so that a cold start's first page need not compute it."""
    from cir_demo.store.score import family_of
    from cir_demo.index.first_query import first_query_field, read_per_query

    primary = family_of(bench).primary
    order = [q.query_id for q in bench.queries]
    return first_query_field(read_per_query(run_dir, primary), primary, names, order)


def served_key(bench, names: list[str], reranker: str | None, top_n: int = 20) -> dict:
    """The key of the outputs `--eval` would write now for these retrievers and reranker."""
    from cir_demo.engine import RetrievalEngine, benchmark_fingerprint
    from cir_demo.index.prebuilt_run import run_key
    from cir_demo.retrievers.base import spec_hash

    engine = RetrievalEngine(bench, names, device="cpu")
    try:
        hashes = {n: spec_hash(engine.run_spec(n)) for n in names}
        rr = engine.reranker(reranker).spec_hash() if reranker else None
    finally:
        engine.close()
    return run_key(benchmark_fingerprint(bench), hashes, rr, top_n)


def differences(shipped: Path, written: Path) -> list[str]:
    """The files of installed run folder `shipped` that differ from run folder `written` (run_info.json's
    record of the run itself, times and command line, aside, and run_manifest.json's checksum of it);
    [] = byte-identical."""
    from cir_demo.index.prebuilt_run import INSTALLED_MARK, shipped_file

    names = set(json.loads((shipped / INSTALLED_MARK).read_text(encoding="utf-8"))["files"])
    wrote = {
        rel
        for rel in (p.relative_to(written).as_posix() for p in written.rglob("*") if p.is_file())
        if shipped_file(rel)
    }
    out = [f"{n}: shipped, not written by --eval" for n in sorted(names - wrote)]
    out += [f"{n}: written by --eval, not shipped" for n in sorted(wrote - names)]
    for name in sorted(names & wrote):
        a, b = (shipped / name).read_bytes(), (written / name).read_bytes()
        if Path(name).name == "run_info.json":  # the top one's and a split folder's
            a, b = (_results_part(json.loads(x)) for x in (a, b))
        elif name == "run_manifest.json":  # it records run_info.json's checksum, which holds the run's times
            a, b = (
                {k: v for k, v in json.loads(x)["files"].items() if Path(k).name != "run_info.json"} for x in (a, b)
            )
        if a != b:
            out.append(f"{name}: differs from what --eval writes now")
    return out


def _results_part(info: dict) -> dict:
    """run_info.json without its record of the run itself: times, command line, and the data folder
    the benchmark was read from (each build and check runs in a new empty one)."""
    from cir_demo.index.prebuilt_run import RUN_RECORD_KEYS

    out = {k: v for k, v in info.items() if k not in RUN_RECORD_KEYS}
    if isinstance(out.get("benchmark_info"), dict):
        out["benchmark_info"] = {k: v for k, v in out["benchmark_info"].items() if k != "root"}
    return out


def check_shipped_run(
    bench,
    names: list[str],
    reranker: str | None,
    rerun: bool,
    recompute: bool = True,
    sample: int | None = None,
    seed: int | None = None,
) -> list[str]:
    """Why the benchmark's shipped outputs are not current ([] = they are): their records, their key
    (stale for this code, weights or libraries), then (`recompute`) every number recomputed
    (`shipped_check.check_numbers`: `sample` intents per split drawn with `seed`, None: its default
    sample and a random seed; `sample` 0: every intent), whatever the key says, its problems
    prefixed `shipped_check.CONTENT`; `rerun`: the whole `--eval` again, every file compared byte for byte."""
    from cir_demo.harness import shipped_check
    from cir_demo.index.manifest import MANIFEST_FILE
    from cir_demo.index.prebuilt_run import key_problems, read_shipped_manifest, shipped_dir, shipped_problems
    from cir_demo.integrity import stored_problems

    directory, served = shipped_dir(bench), served_key(bench, names, reranker)
    problems = shipped_problems(directory, served)
    if not (recompute or rerun) or not (directory / MANIFEST_FILE).is_file():
        return problems
    try:
        manifest = read_shipped_manifest(directory)
    except ValueError:
        return problems
    if stored_problems(directory, manifest):
        return stored_problems(directory, manifest)
    stale = key_problems(manifest["key"], served)  # said apart from the numbers, which are checked anyway
    flags = manifest["command"][len(EVAL_COMMAND) :]
    with tempfile.TemporaryDirectory(prefix="cir-demo-shipped-check-") as tmp:
        installed = Path(tmp) / "shipped"
        problems = shipped_check.unpack_shipped(directory, manifest, installed)
        if problems:
            return problems
        if not rerun:
            size = shipped_check.SAMPLE_INTENTS if sample is None else (sample or None)
            return stale + shipped_check.check_numbers(installed, names, reranker, size, seed)
        with empty_data_folder():
            run_eval(flags, Path(tmp) / "run")
        return stale + differences(installed, Path(tmp) / "run")


def _per_query_rows(data: str, path: str) -> dict[tuple[str, str], dict[str, str]]:
    rows = {}
    for row in csv.DictReader(io.StringIO(data)):
        if "run" not in row or "query_id" not in row:
            raise ValueError(f"{path}: no run or query_id column")
        rows[row["run"], row["query_id"]] = row
    return rows


def _same_value(a: str | None, b: str | None) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return False
    return math.isclose(x, y, rel_tol=ROW_TOLERANCE, abs_tol=ROW_TOLERANCE)

"""Test data for the `--runs` tests: two runs another tool might have written for a benchmark."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def _h(*parts: str) -> str:
    return hashlib.md5("|".join(parts).encode()).hexdigest()


def write_two_runs(bench, folder: Path) -> tuple[Path, Path]:
    """Two unseen runs over the benchmark's queries, as another tool would write them: A (a CIRCO-shaped
    list) puts the target first on every second query, B (a ranx run dict with scores) fifth on every third
    and the query's reference first on every query (as a retriever that returns its query image: CIRR deletes
    it); the rest is a fixed pseudo-random order of the corpus."""
    a, b = {}, {}
    for i, q in enumerate(bench.queries):
        order = sorted(bench.corpus_ids, key=lambda c: _h(q.query_id, c))[:60]
        target = q.target_id or q.positives[0]
        rest = [x for x in order if x != target and x not in q.reference_ids]
        ranked_a = ([target] + rest) if i % 2 == 0 else rest
        ranked_b = [*q.reference_ids, *(rest[:4] + [target] + rest[4:] if i % 3 == 0 else rest)]
        key = bench.results_key(q.query_id)
        a[key] = ranked_a
        b[key] = {img: float(len(ranked_b) - r) for r, img in enumerate(ranked_b)}
    pa, pb = folder / "A.json", folder / "B.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    return pa, pb


def cirr_world_with_runs(root: Path, mp):
    """The tiny world exported to CIRR under `root` (no images; the data folders under `root` too, set with
    the MonkeyPatch `mp`) and `write_two_runs` on it: (benchmark, A path, B path)."""
    from cir_demo.benchmarks.registry import load_benchmark
    from cir_demo.cli import main as cli

    for var, sub in (("CIR_DEMO_CACHE", "cache"), ("CIR_DEMO_INDEXES", "indexes"), ("CIR_DEMO_RUNS", "runs")):
        mp.setenv(var, str(root / sub))
    assert cli(["world", "export", "--format", "cirr", "--size", "tiny", "--out", str(root / "cirr")]) == 0
    bench = load_benchmark("cirr", root=str(root / "cirr"))
    return (bench, *write_two_runs(bench, root))


def eval_both_runs(root: Path, pa: Path, pb: Path, out: Path) -> Path:
    """`python app.py --eval` of the two results files on the CIRR export under `root` into `out`."""
    import app

    argv = ["--eval", "--benchmark", "cirr", "--root", str(root / "cirr"), "--results-json", str(pa), str(pb)]
    assert app.main([*argv, "--out", str(out), "--n-boot", "200", "--no-plots"]) == 0
    return out

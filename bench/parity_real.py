"""`--eval` on the real CIRR or FashionIQ val files against CLIP4Cir's protocols, for an unseen run.

    git clone -b cirr_dataset https://github.com/Cuberick-Orion/CIRR.git cirr   # captions/, image_splits/
    python bench/parity_real.py --benchmark cirr --root cirr [--seed 0]
    git clone https://github.com/XiaoxiaoGuo/fashion-iq.git                     # captions/, image_splits/
    python bench/parity_real.py --benchmark fashioniq --root fashion-iq

The run is random scores with many ties (no model has seen the data): over the whole split for CIRR,
over the union of the three galleries for FashionIQ (so the per-category cut is exercised). The
references are the protocols as tests/test_benchmarks_{cirr,fashioniq}.py re-implement them
(CLIP4Cir's array operations on full score matrices, in chunks of queries). The results file is a
run dict (scores kept, so our reader applies the tie rule) holding, per query, the top of its full
ranking (CIRR: top 60 plus its set's members and reference; FashionIQ: the union's top 100 plus its
gallery's top 60): the relative order of everything kept is the full ranking's, so every metric is
the full ranking's. Prints each metric both ways and the largest difference; exit status 1 above 1e-9.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_REPO = _Path(__file__).resolve().parent.parent
_sys.path[:0] = [str(_REPO), str(_REPO / "tests")]  # the references live with the tests

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from cir_demo.benchmarks.registry import load_benchmark  # noqa: E402
from cir_demo.cli import main as cli_main  # noqa: E402
from test_benchmarks_cirr import clip4cir_cirr  # noqa: E402
from test_benchmarks_fashioniq import clip4cir_fiq_hits, fiq_metrics  # noqa: E402

CHUNK = 500  # queries per score matrix: all of them at once would need gigabytes


def cirr_run_and_reference(bench, rng) -> tuple[dict, dict]:
    column = {name: j for j, name in enumerate(bench.corpus_ids)}
    run, hits = {}, {}
    for start in range(0, len(bench.queries), CHUNK):
        qs = bench.queries[start : start + CHUNK]
        scores = rng.integers(0, 1000, size=(len(qs), len(bench.corpus_ids))).astype(float) / 1000
        part, sorted_names, _ = clip4cir_cirr(
            bench.corpus_ids,
            scores,
            [q.reference_ids[0] for q in qs],
            [q.target_id for q in qs],
            [list(q.judgments.subset) for q in qs],
        )
        for name, mean in part.items():
            hits[name] = hits.get(name, 0) + round(mean * len(qs))
        for i, q in enumerate(qs):
            keep = set(sorted_names[i, :60]) | set(q.judgments.subset) | {q.reference_ids[0]}
            run[q.query_id] = {n: float(scores[i, column[n]]) for n in keep}
    return run, {name: h / len(bench.queries) for name, h in hits.items()}


def fashioniq_run_and_reference(bench, rng) -> tuple[dict, dict]:
    run, hits = {}, {}
    name_rank = np.argsort(np.argsort([n.encode() for n in bench.corpus_ids]))
    for start in range(0, len(bench.queries), CHUNK):
        sub = bench.subset(q.query_id for q in bench.queries[start : start + CHUNK])
        scores = rng.integers(0, 1000, size=(len(sub.queries), len(bench.corpus_ids))).astype(float) / 1000
        for c, (n, h10, h50) in clip4cir_fiq_hits(sub, scores).items():
            old = hits.get(c, (0, 0, 0))
            hits[c] = (old[0] + n, old[1] + h10, old[2] + h50)
        for i, q in enumerate(sub.queries):
            order = [bench.corpus_ids[j] for j in np.lexsort((-name_rank, -scores[i]))]  # the run dict's order
            keep = set(order[:100]) | set([n for n in order if n in q.judgments.gallery][:60])
            run[q.query_id] = {n: float(scores[i, j]) for j, n in enumerate(bench.corpus_ids) if n in keep}
    return run, fiq_metrics(hits)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=("cirr", "fashioniq"), required=True)
    parser.add_argument("--root", type=Path, required=True, help="the checkout holding captions/ and image_splits/")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    bench = load_benchmark(args.benchmark, root=args.root)
    make = cirr_run_and_reference if args.benchmark == "cirr" else fashioniq_run_and_reference
    run, ref = make(bench, np.random.default_rng(args.seed))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "unseen.json").write_text(json.dumps(run))
        code = cli_main(
            [
                "eval",
                "--benchmark",
                args.benchmark,
                "--root",
                str(args.root),
                "--results-json",
                str(Path(tmp) / "unseen.json"),
                "--out",
                str(Path(tmp) / "out"),
                "--n-boot",
                "0",
                "--no-plots",
            ]
        )
        if code:
            return code
        got = json.loads((Path(tmp) / "out" / "metrics.json").read_text())["runs"][0]["metrics"]
    worst = 0.0
    for name, value in ref.items():
        worst = max(worst, abs(got[name] - value))
        print(f"{name:18s} ours {got[name]:.12f}  CLIP4Cir protocol {value:.12f}")
    print(f"{len(bench.queries)} queries, {len(bench.corpus_ids)} images; largest difference {worst:.3g}")
    return 0 if worst <= 1e-9 else 1


if __name__ == "__main__":
    raise SystemExit(main())

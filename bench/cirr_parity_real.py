"""`--eval` on the CIRR repository's real val files against CLIP4Cir's protocol, for an unseen run.

    git clone -b cirr_dataset https://github.com/Cuberick-Orion/CIRR.git cirr   # captions/, image_splits/
    python bench/cirr_parity_real.py --root cirr [--seed 0]

The run is random scores with many ties over the whole split (no model has seen it). The reference is
the protocol as tests/test_benchmarks_cirr.py re-implements it (CLIP4Cir's array operations on the full
score matrix). The results file holds, per query, the top 60 of the full ranking plus the other members
of its set in full-ranking order, as a run dict (scores kept, so our reader applies the tie rule): the
relative order of everything kept is the full ranking's, so every metric is the full ranking's. Prints
each metric, ours and the reference's, and the largest difference; exit status 1 if any exceeds 1e-9.
"""
from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_REPO = _Path(__file__).resolve().parent.parent
_sys.path[:0] = [str(_REPO), str(_REPO / "tests")]  # the reference lives with the tests

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from cir_demo.benchmarks.cirr import load_cirr  # noqa: E402
from cir_demo.cli import main as cli_main  # noqa: E402
from test_benchmarks_cirr import clip4cir_cirr  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the CIRR cirr_dataset branch checkout")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    bench = load_cirr(args.root)
    rng = np.random.default_rng(args.seed)
    scores = rng.integers(0, 1000, size=(len(bench.queries), len(bench.corpus_ids))).astype(float) / 1000
    column = {name: j for j, name in enumerate(bench.corpus_ids)}
    run, sums = {}, {}
    for start in range(0, len(bench.queries), 500):  # the name matrices of all 4,181 queries would need gigabytes
        qs = bench.queries[start:start + 500]
        part, sorted_names, _ = clip4cir_cirr(bench.corpus_ids, scores[start:start + 500],
                                              [q.reference_ids[0] for q in qs], [q.target_id for q in qs],
                                              [list(q.judgments.subset) for q in qs])
        for name, mean in part.items():
            sums[name] = sums.get(name, 0) + round(mean * len(qs))  # hits in this chunk
        for i, q in enumerate(qs):
            keep = set(sorted_names[i, :60]) | set(q.judgments.subset) | {q.reference_ids[0]}
            run[q.query_id] = {n: float(scores[start + i, column[n]]) for n in keep}
    ref = {name: hits / len(bench.queries) for name, hits in sums.items()}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "unseen.json").write_text(json.dumps(run))
        code = cli_main(["eval", "--benchmark", "cirr", "--root", str(args.root), "--results-json",
                         str(Path(tmp) / "unseen.json"), "--out", str(Path(tmp) / "out"), "--n-boot", "0", "--no-plots"])
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

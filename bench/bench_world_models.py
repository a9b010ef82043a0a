"""Latency of the world models on the CPU (torch.set_num_threads(2)).

    python bench/bench_world_models.py [--queries 100] [--top-n 20] [--threads 2]

- world verifier (the world judge): per-query latency of `reranker.score(request, top-20 ids, top-20
  images)` on world test queries, the candidates being world-CLIP fusion's top 20 (PIL images rendered
  beforehand: rendering is the app's cost, not the reranker's), twice: from pixels (every image through
  the judge's CNN), and as the app and --eval run it (the corpus's features precomputed once, from the
  shared embedding cache; a new query's references still go through the CNN). Target: median <= 100 ms.
- world-CIR and world-CLIP fusion: per-query latency of `encode_queries` (one query).

Reports median and p90 over queries (first query excluded as warm-up).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse
import statistics
import time


def _pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--top-n", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--world-size", default="default")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from cir_demo.rerank import RerankRequest, load_reranker
    from cir_demo.retrievers.base import ComposedQuery
    from cir_demo.retrievers.registry import load_retriever
    from cir_demo.training import evaluate as ev
    from cir_demo.world.loader import render_image

    test = ev.load_test_data(args.world_size, 0, progress=True)
    reranker = load_reranker("world-verifier")
    cir = load_retriever("world-cir", device="cpu")
    fusion = load_retriever("world-clip-fusion", device="cpu")
    queries = test.bench.queries
    rng = np.random.default_rng(0)
    pick = sorted(rng.choice(len(queries), min(args.queries, len(queries)), replace=False).tolist())
    # first stage: world-CLIP fusion over the test corpus (corpus embeddings cached by the trainers)
    from cir_demo.training.data import cached_array

    def corpus_emb():
        return fusion.encode_images([render_image(i, world=test.world) for i in test.bench.corpus_ids])

    sha = fusion.spec["weights"]["sha256"][:16]
    code = (type(fusion).__module__,)  # the retriever's encode, with the code it reaches
    corpus = cached_array(test.world.manifest["checksum"], f"test-corpus-emb-{sha}", corpus_emb, code, ("torch",))
    ref_imgs = {qi: tuple(render_image(r, world=test.world) for r in queries[qi].reference_ids) for qi in pick}
    qv = fusion.encode_queries([ComposedQuery(ref_imgs[qi], queries[qi].instruction) for qi in pick])
    idx, _ = ev.top_k(qv, corpus, args.top_n)

    served = load_reranker("world-verifier")  # the app's path: corpus features precomputed
    served.use_image_embeddings(
        test.bench.corpus_ids, served.encode_images([render_image(i, world=test.world) for i in test.bench.corpus_ids])
    )
    ver_ms, served_ms, cir_ms, fus_ms = [], [], [], []
    for n, (qi, row) in enumerate(zip(pick, idx)):
        q = queries[qi]
        refs_q = ref_imgs[qi]
        cand_ids = [test.bench.corpus_ids[j] for j in row]
        cand_imgs = [render_image(c, world=test.world) for c in cand_ids]
        t0 = time.perf_counter()
        reranker.score(RerankRequest(refs_q, q.reference_ids, q.instruction), cand_ids, cand_imgs)
        t1 = time.perf_counter()
        served.score(RerankRequest(refs_q, q.reference_ids, q.instruction), cand_ids, [None] * len(cand_ids))
        served_ms.append(1000 * (time.perf_counter() - t1))
        t1 = time.perf_counter()
        cir.encode_queries([ComposedQuery(refs_q, q.instruction)])
        t2 = time.perf_counter()
        fusion.encode_queries([ComposedQuery(refs_q, q.instruction)])
        t3 = time.perf_counter()
        if n:  # first query warms up
            ver_ms.append(1000 * (t1 - t0))
            cir_ms.append(1000 * (t2 - t1))
            fus_ms.append(1000 * (t3 - t2))
    print(f"threads={torch.get_num_threads()} queries={len(ver_ms)} top_n={args.top_n}")
    served_ms = served_ms[1:]
    for name, v in (
        ("world verifier score(top-%d) from pixels" % args.top_n, ver_ms),
        ("world verifier score(top-%d), corpus features precomputed" % args.top_n, served_ms),
        ("world-cir encode_queries(1)", cir_ms),
        ("world-clip-fusion encode_queries(1)", fus_ms),
    ):
        print(f"{name:58s} median {statistics.median(v):7.1f} ms   p90 {_pct(v, 0.9):7.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

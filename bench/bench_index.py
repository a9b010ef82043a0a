"""Index benchmark at PinPoint scale on synthetic vectors, all numbers from one run.

    python bench/bench_index.py                       # 109,600 x 768 corpus, 7,635 queries, k = 50
    python bench/bench_index.py --sections flat,bruteforce --bf-queries 500
    python bench/bench_index.py --data lowrank --sections flat,ivf,hnsw --repeats 1 --out bench_index.json
    python bench/bench_index.py --sections sizes --sizes 100000,1000000 --d 768 --nq 1000 --k 10   # the chosen kinds

Sections (all by default):
- flat:       exact IndexFlatIP search of all queries (median of --repeats), build time,
              single-query latency (median over --latency-queries one-query calls).
- bruteforce: the exact NumPy reference (`brute_force_search`, float64 products) and a
              plain float32 NumPy GEMM + argpartition, against flat on the same
              --bf-queries queries, interleaved; ratios = NumPy time / flat time.
- ivf, hnsw:  build time, recall@k against flat, batch search time and single-query
              latency, for a few nprobe / efSearch values.
- encode:     images/s of `encode_corpus` with a small real torch model on CPU
              (random-init torchvision resnet18 at 224 px, or --retriever NAME from the registry).
- sizes:      for each corpus size of --sizes (own data, --data, default clustered): the index
              `choose_index` picks (kind, factory string, parameters), its build time and memory,
              recall@k against exact flat search and queries per second beside flat's (one batch of
              --nq queries, the same threads), at its default nprobe and a sweep around it.

Synthetic vectors are unit-normalised Gaussians ("gaussian": no structure, the
worst case for approximate indexes), "lowrank": Gaussians in a --rank
dimensional latent space mapped into d dimensions plus --noise (embeddings of
real images concentrate near a low-dimensional subspace like this), or "clustered":
the same with the latent points drawn around --clusters centres (spread --spread
times the centres' own), so images come in overlapping groups of near duplicates. Threads: faiss, torch and BLAS are
limited to --threads (default 2). The load average is printed next to the
timings because the machine may be shared.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse
import os
import statistics
import sys
import time

SECTIONS = ("flat", "bruteforce", "ivf", "hnsw", "encode", "sizes")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=109_600, help="corpus vectors (PinPoint: 109,600)")
    p.add_argument("--d", type=int, default=768, help="dimension")
    p.add_argument("--nq", type=int, default=7_635, help="queries (PinPoint: 7,635)")
    p.add_argument("--k", type=int, default=50)
    p.add_argument(
        "--data",
        choices=["gaussian", "lowrank", "clustered"],
        default=None,
        help="gaussian: unstructured; lowrank: near a --rank dimensional subspace plus --noise; "
        "clustered: lowrank around --clusters centres (default: clustered for sizes, else gaussian)",
    )
    p.add_argument("--clusters", type=int, default=0, help="centres for --data clustered (default: n / 100)")
    p.add_argument(
        "--spread", type=float, default=1.0, help="cluster spread relative to the centres' for --data clustered"
    )
    p.add_argument("--sizes", default="100000,1000000", help="corpus sizes for the sizes section")
    p.add_argument(
        "--nprobe-scales",
        default="0.5,1,2",
        help="sizes section: nprobe values measured, as multiples of each kind's default",
    )
    p.add_argument(
        "--also",
        default="",
        help="sizes section: also measure these kinds at their defaults (e.g. ivf_hnsw,ivfpq), beside the chosen one",
    )
    p.add_argument(
        "--memory-budget-gib",
        type=float,
        default=None,
        help="memory budget handed to choose_index in the sizes section (default: half the machine's)",
    )
    p.add_argument("--rank", type=int, default=32, help="latent dimension for --data lowrank")
    p.add_argument("--noise", type=float, default=0.5, help="per-dimension noise for --data lowrank (signal is 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions (median reported)")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {', '.join(SECTIONS)}")
    p.add_argument("--bf-queries", type=int, default=1000, help="queries for the brute-force comparison")
    p.add_argument("--latency-queries", type=int, default=100, help="one-query calls for latency medians")
    p.add_argument("--nprobe", default="", help="ivf nprobe values (default: nlist/16, nlist/8, nlist/4)")
    p.add_argument("--ef-search", default="64,128,256", help="hnsw efSearch values")
    p.add_argument("--encode-images", type=int, default=128, help="images for the encode section")
    p.add_argument("--retriever", help="encode with this registry retriever instead of resnet18")
    p.add_argument("--out", help="also write the results as JSON here")
    args = p.parse_args(argv)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    args.sizes = [int(v) for v in args.sizes.split(",") if v.strip()]
    args.also = [v.strip() for v in args.also.split(",") if v.strip()]
    args.nprobe_scales = [float(v) for v in args.nprobe_scales.split(",") if v.strip()]
    if args.data is None:
        args.data = "clustered" if args.sections == ["sizes"] else "gaussian"
    bad = sorted(set(args.sections) - set(SECTIONS))
    if bad:
        p.error(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(SECTIONS)}")
    return args


def limit_threads(n: int) -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))


def synthetic(
    n: int,
    d: int,
    seed: int,
    data: str,
    basis=None,
    noise: float = 0.5,
    centres=None,
    spread: float = 1.0,
    block: int = 65_536,
):
    """Unit rows: plain Gaussians, or latent Gaussians through `basis` (rank x d) plus noise; with
    `centres` (clusters x rank) the latent points lie around a random centre each (`spread` times
    the centres' standard deviation). Generated in blocks, so a 1M x 768 corpus needs its 3 GB only."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.empty((n, d), dtype=np.float32)
    for start in range(0, n, block):
        m = min(block, n - start)
        if data == "gaussian":
            part = rng.standard_normal((m, d), dtype=np.float32)
        else:
            z = rng.standard_normal((m, basis.shape[0]), dtype=np.float32)
            if centres is not None:
                z = centres[rng.integers(0, len(centres), m)] + spread * z
            part = z @ basis + noise * rng.standard_normal((m, d), dtype=np.float32)
        part /= np.linalg.norm(part, axis=1, keepdims=True)
        x[start : start + m] = part
    return x


def structure(args, n: int):
    """The latent basis and cluster centres that corpus and queries share (None for gaussian)."""
    import numpy as np

    if args.data == "gaussian":
        return None, None
    rng = np.random.default_rng(args.seed + 7)
    basis = rng.standard_normal((args.rank, args.d), dtype=np.float32) / np.sqrt(args.rank)
    if args.data == "lowrank":
        return basis, None
    clusters = args.clusters or max(1, n // 100)
    return basis, rng.standard_normal((clusters, args.rank), dtype=np.float32)


def corpus_and_queries(args, n: int):
    basis, centres = structure(args, n)
    kw = dict(basis=basis, noise=args.noise, centres=centres, spread=args.spread)
    return synthetic(n, args.d, args.seed, args.data, **kw), synthetic(args.nq, args.d, args.seed + 1, args.data, **kw)


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def single_query_latency(index, xq, k: int, count: int) -> float:
    from cir_demo.index.faiss_index import search

    times = []
    for i in range(min(count, len(xq))):
        t = time.perf_counter()
        search(index, xq[i : i + 1], k)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def numpy_f32_top_k(xq, xb, k: int):
    """A plain NumPy baseline: float32 GEMM in blocks, argpartition, sort of the k."""
    import numpy as np

    out = np.empty((len(xq), k), dtype=np.int64)
    rows = max(1, (1 << 25) // len(xb))
    for s in range(0, len(xq), rows):
        S = xq[s : s + rows] @ xb.T
        part = np.argpartition(-S, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(S, part, axis=1), axis=1, kind="stable")
        out[s : s + rows] = np.take_along_axis(part, order, axis=1)
    return out


def bench_flat(res, xb, xq, args):
    from cir_demo.index.faiss_index import build_index, search

    t_build, index = timed(lambda: build_index(xb, "flat"), 1)
    t_search, (D, I) = timed(lambda: search(index, xq, args.k), args.repeats)
    res["flat"] = {
        "build_s": t_build,
        "search_all_s_median": t_search,
        "queries": len(xq),
        "queries_per_s": len(xq) / t_search,
        "ms_per_query_in_batch": 1000 * t_search / len(xq),
        "single_query_latency_ms_median": 1000 * single_query_latency(index, xq, args.k, args.latency_queries),
    }
    return index, I


def bench_bruteforce(res, xb, xq, index, I_flat, args):
    import numpy as np

    from cir_demo.index.faiss_index import brute_force_search, recall_at_k, search

    q = xq[: args.bf_queries]
    flat_t, ref_t, f32_t = [], [], []
    for _ in range(args.repeats):  # interleaved, so load changes hit all three alike
        t = time.perf_counter()
        search(index, q, args.k)
        flat_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        _, I_ref = brute_force_search(q, xb, args.k)
        ref_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        I_f32 = numpy_f32_top_k(q, xb, args.k)
        f32_t.append(time.perf_counter() - t)
    flat_m, ref_m, f32_m = (statistics.median(t) for t in (flat_t, ref_t, f32_t))
    res["bruteforce"] = {
        "queries": len(q),
        "flat_s_median": flat_m,
        "numpy_exact_reference_s_median": ref_m,
        "numpy_f32_s_median": f32_m,
        "ratio_reference_over_flat": ref_m / flat_m,
        "ratio_f32_over_flat": f32_m / flat_m,
        "flat_equals_reference_recall": recall_at_k(I_flat[: len(q)], I_ref, args.k),
        "flat_ids_identical_to_reference": bool(np.array_equal(I_flat[: len(q)], I_ref)),
        "f32_recall_vs_reference": recall_at_k(I_f32, I_ref, args.k),
    }


def bench_ann(res, kind, xb, xq, I_flat, args, sweep_name, values):
    from cir_demo.index.faiss_index import build_index, recall_at_k, resolve_params, search, set_search_params

    params = resolve_params(kind, len(xb))
    t_build, index = timed(lambda: build_index(xb, kind), 1)
    if not values:
        values = [max(1, params["nlist"] // div) for div in (16, 8, 4)]
    rows = []
    for v in values:
        set_search_params(index, **{sweep_name: v})
        t_search, (_, I) = timed(lambda: search(index, xq, args.k), args.repeats)
        rows.append(
            {
                sweep_name: v,
                "recall_at_k_vs_flat": recall_at_k(I, I_flat, args.k),
                "search_all_s_median": t_search,
                "speedup_vs_flat": res["flat"]["search_all_s_median"] / t_search if "flat" in res else None,
                "single_query_latency_ms_median": 1000 * single_query_latency(index, xq, args.k, args.latency_queries),
            }
        )
    res[kind] = {"params": params, "build_s": t_build, "sweep": rows}


class _ListImages:
    def __init__(self, images):
        self._images = images

    def open(self, image_id):
        return self._images[int(image_id)]


def _resnet18_retriever():
    import numpy as np
    import torch
    import torchvision

    from cir_demo.retrievers.base import Retriever

    class ResNet18Retriever(Retriever):
        """Random-init torchvision resnet18 (seeded) with the classifier removed: 512-d unit vectors."""

        def __init__(self):
            torch.manual_seed(0)
            self.model = torchvision.models.resnet18(weights=None)
            self.model.fc = torch.nn.Identity()
            self.model.eval()
            self.name, self.dim, self.device = "resnet18-random", 512, "cpu"
            self.spec = {"family": "bench", "model": "resnet18", "weights": None}
            self.mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
            self.std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)

        def encode_images(self, images, batch_size=None):
            x = torch.from_numpy(np.stack([np.asarray(im.resize((224, 224)), dtype=np.float32) for im in images]))
            x = (x.permute(0, 3, 1, 2) / 255.0 - self.mean) / self.std
            with torch.inference_mode():
                return torch.nn.functional.normalize(self.model(x), dim=1).numpy()

        def encode_queries(self, queries, batch_size=None):
            raise NotImplementedError("the encode benchmark only encodes images")

    return ResNet18Retriever()


def bench_encode(res, args):
    import numpy as np
    import torch
    from PIL import Image

    from cir_demo.index.corpus_encode import encode_corpus

    torch.set_num_threads(args.threads)
    if args.retriever:
        from cir_demo.retrievers.registry import load_retriever

        retriever = load_retriever(args.retriever, device="cpu")
    else:
        retriever = _resnet18_retriever()
    rng = np.random.default_rng(args.seed)
    images = [
        Image.fromarray(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8), "RGB") for _ in range(args.encode_images)
    ]
    store, ids = _ListImages(images), [str(i) for i in range(len(images))]
    encode_corpus(store, ids[:8], retriever, batch_size=8, progress=False)  # warm-up
    t, _ = timed(lambda: encode_corpus(store, ids, retriever, batch_size=32, progress=False), args.repeats)
    res["encode"] = {
        "retriever": retriever.name,
        "images": len(images),
        "batch_size": 32,
        "threads": args.threads,
        "s_median": t,
        "images_per_s": len(images) / t,
    }


def _flat_view(flat, n: int, d: int):
    """The vectors a flat index holds, as a NumPy view (no second 3 GB copy at 1M x 768)."""
    import faiss

    return faiss.rev_swig_ptr(flat.get_xb(), n * d).reshape(n, d)


def _rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _timed_search(index, xq, k: int, repeats: int):
    from cir_demo.index.faiss_index import search

    return timed(lambda: search(index, xq, k), repeats)


def bench_kind(index_of, kind: str, params: dict, xq, I_flat, t_flat: float, args) -> dict:
    """Build one kind, then recall@k and speed against flat at its nprobe and at half and twice it."""
    import faiss

    from cir_demo.index.faiss_index import set_search_params

    t = time.perf_counter()
    index = index_of(kind, params)
    out = {
        "kind": kind,
        "params": params,
        "build_s": time.perf_counter() - t,
        "index_bytes": int(faiss.serialize_index(index).size),
        "peak_rss_gib": _rss_gib(),
        "sweep": [],
    }
    nprobe = params.get("nprobe")
    for scale in args.nprobe_scales if nprobe else (1,):
        setting = {}
        if nprobe:  # the quantiser's efSearch follows nprobe as the kind's default does
            setting = {"nprobe": max(1, int(nprobe * scale))}
            if "quantizer_efSearch" in params:
                setting["quantizer_efSearch"] = max(32, 2 * setting["nprobe"])
            set_search_params(index, **setting)
        t_s, (_, I) = _timed_search(index, xq, args.k, args.repeats)
        from cir_demo.index.faiss_index import recall_at_k

        out["sweep"].append(
            {
                **setting,
                "default": scale == 1,
                "recall_at_k": recall_at_k(I, I_flat, args.k),
                "qps": len(xq) / t_s,
                "speedup_vs_flat": t_flat / t_s,
            }
        )
        print(
            f"  {kind} {setting or 'default'}: recall@{args.k} {out['sweep'][-1]['recall_at_k']:.3f}, "
            f"x{t_flat / t_s:.1f} vs flat",
            file=sys.stderr,
            flush=True,
        )
    return out


def bench_size(args, n: int) -> dict:
    """The chosen index for `n` vectors (and the --also kinds) against exact flat search on the same queries."""
    import faiss

    from cir_demo.index.choose import choose_index, default_memory_budget
    from cir_demo.index.faiss_index import build_index
    from cir_demo.index.kinds import factory_string, resolve_params

    budget = int(args.memory_budget_gib * 2**30) if args.memory_budget_gib else default_memory_budget()
    choice = choose_index(n, args.d, budget)
    xb, xq = corpus_and_queries(args, n)
    flat = faiss.IndexFlatIP(args.d)
    flat.add(xb)
    del xb
    xb = _flat_view(flat, n, args.d)
    t_flat, (_, I_flat) = _timed_search(flat, xq, args.k, args.repeats)
    out = {
        "n": n,
        "d": args.d,
        "chosen": choice.kind,
        "reason": choice.reason,
        "memory_budget": budget,
        "flat_s_median": t_flat,
        "flat_qps": len(xq) / t_flat,
        "load": list(os.getloadavg()),
        "kinds": [],
    }
    print(f"n={n}: flat {len(xq) / t_flat:.0f} q/s; chosen {choice.factory}", file=sys.stderr, flush=True)
    todo = [(choice.kind, choice.params)] + [(k, resolve_params(k, n, args.d)) for k in args.also if k != choice.kind]
    for kind, params in todo:
        row = bench_kind(lambda k, p: build_index(xb, k, **p), kind, params, xq, I_flat, t_flat, args)
        out["kinds"].append({**row, "factory": factory_string(kind, params), "chosen": kind == choice.kind})
    return out


def bench_sizes(res, args) -> None:
    res["sizes"] = [bench_size(args, n) for n in args.sizes]


def print_sizes(res) -> None:
    k = res["config"]["k"]
    for r in res.get("sizes", []):
        print(f"{r['n']:,} x {r['d']}: chosen {r['chosen']}: {r['reason']}")
        print(
            f"  flat {r['flat_qps']:.0f} q/s (all {res['config']['nq']} queries in {r['flat_s_median']:.2f} s, "
            f"load {', '.join(f'{x:.1f}' for x in r['load'])})"
        )
        for a in r["kinds"]:
            print(
                f"  {a['factory']}{' (chosen)' if a['chosen'] else ''}: build {a['build_s']:.1f} s, index "
                f"{a['index_bytes'] / 2**30:.2f} GiB, peak RSS so far {a['peak_rss_gib']:.1f} GiB, params {a['params']}"
            )
            for row in a["sweep"]:
                setting = ", ".join(f"{x}={y}" for x, y in row.items() if x in ("nprobe", "quantizer_efSearch")) or "-"
                print(
                    f"    {setting}{' (default)' if row['default'] else ''}: recall@{k} {row['recall_at_k']:.3f}, "
                    f"{row['qps']:.0f} q/s, x{row['speedup_vs_flat']:.1f} vs flat"
                )


def print_report(res) -> None:
    cfg = res["config"]
    print(
        f"\n== index benchmark: n={cfg['n']} d={cfg['d']} nq={cfg['nq']} k={cfg['k']} data={cfg['data']} "
        f"threads={cfg['threads']} faiss={cfg['faiss']} (load avg {cfg['load_before']} -> {res['load_after']})"
    )
    if "flat" in res:
        f = res["flat"]
        print(
            f"flat: search of all {f['queries']} queries {f['search_all_s_median']:.2f} s (median of "
            f"{cfg['repeats']}; {f['queries_per_s']:.0f} q/s, {f['ms_per_query_in_batch']:.2f} ms/query), "
            f"single-query latency {f['single_query_latency_ms_median']:.2f} ms, build {f['build_s']:.2f} s"
        )
    if "bruteforce" in res:
        b = res["bruteforce"]
        print(
            f"brute force on {b['queries']} queries: flat {b['flat_s_median']:.2f} s | NumPy exact reference "
            f"{b['numpy_exact_reference_s_median']:.2f} s (x{b['ratio_reference_over_flat']:.1f}) | NumPy float32 "
            f"{b['numpy_f32_s_median']:.2f} s (x{b['ratio_f32_over_flat']:.1f}); flat vs reference recall@k "
            f"{b['flat_equals_reference_recall']:.4f}, identical ids: {b['flat_ids_identical_to_reference']}"
        )
    for kind in ("ivf", "hnsw"):
        if kind in res:
            a = res[kind]
            print(f"{kind}: params {a['params']}, build {a['build_s']:.1f} s")
            for row in a["sweep"]:
                name = next(iter(row))
                speed = f", x{row['speedup_vs_flat']:.1f} vs flat" if row["speedup_vs_flat"] else ""
                print(
                    f"  {name}={row[name]}: recall@k {row['recall_at_k_vs_flat']:.3f}, all queries "
                    f"{row['search_all_s_median']:.2f} s{speed}, single query {row['single_query_latency_ms_median']:.2f} ms"
                )
    print_sizes(res)
    if "encode" in res:
        e = res["encode"]
        print(
            f"encode: {e['retriever']} on CPU ({e['threads']} threads), {e['images']} images in "
            f"{e['s_median']:.2f} s = {e['images_per_s']:.1f} images/s (batch {e['batch_size']})"
        )


def main(argv=None) -> int:
    args = parse_args(argv)
    limit_threads(args.threads)
    import faiss
    import numpy as np

    faiss.omp_set_num_threads(args.threads)
    res = {
        "config": {
            **{k: v for k, v in vars(args).items() if k != "out"},
            "faiss": faiss.__version__,
            "numpy": np.__version__,
            "load_before": [round(x, 2) for x in os.getloadavg()],
        }
    }
    index = I_flat = xb = xq = None
    if set(args.sections) & {"flat", "bruteforce", "ivf", "hnsw"}:
        xb, xq = corpus_and_queries(args, args.n)
        index, I_flat = bench_flat(res, xb, xq, args)
        print(f"flat done: {res['flat']['search_all_s_median']:.2f} s", file=sys.stderr)
    if "bruteforce" in args.sections:
        bench_bruteforce(res, xb, xq, index, I_flat, args)
        print("brute force done", file=sys.stderr)
    if "ivf" in args.sections:
        nprobes = [int(v) for v in args.nprobe.split(",") if v.strip()]
        bench_ann(res, "ivf", xb, xq, I_flat, args, "nprobe", nprobes)
        print("ivf done", file=sys.stderr)
    if "hnsw" in args.sections:
        bench_ann(res, "hnsw", xb, xq, I_flat, args, "efSearch", [int(v) for v in args.ef_search.split(",")])
        print("hnsw done", file=sys.stderr)
    if "encode" in args.sections:
        bench_encode(res, args)
    if "sizes" in args.sections:
        bench_sizes(res, args)
    res["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print_report(res)
    if args.out:
        from cir_demo.utils.io import write_json_atomic

        write_json_atomic(args.out, res)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

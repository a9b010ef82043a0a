"""Corpus indexes in Milvus beside faiss, on the clustered vectors of bench_index.py, all numbers from one run.

    python bench/bench_milvus.py                                   # 100k and 1M x 512, Lite + server + faiss
    python bench/bench_milvus.py --sizes 100000 --targets faiss,lite --types FLAT,HNSW
    PYTHONPATH=/path/to/milvus-package python bench/bench_milvus.py --targets server   # starts its server
    python bench/bench_milvus.py --server-uri http://host:19530 --targets server      # a running one

For each corpus size: the exact faiss flat search of --nq queries (the reference, and its queries per
second), then for each target (faiss, lite = embedded Milvus Lite in a temporary .db folder, server
= a Milvus server) and each index type of --types (default: the type `--index-uri` builds for that
size, `milvus_store.candidate_types`): the build time (inserts in the project's 1,000-row batches,
index and load), recall@k against exact search, and queries per second (the project's search path:
chunks within Milvus's nq and message limits, only the primary key returned). faiss builds the same
index types (FLAT, HNSW with the same M / efConstruction / ef, IVF_SQ8 with the same nlist / nprobe).

The server: --server-uri, else the `milvus` PyPI package's standalone server (Milvus 2.3.5) started
on loopback in a temporary folder when `import milvus` works, else the target is skipped with why.
Threads are limited to --threads (faiss, BLAS); the load average is printed beside the timings.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere
_sys.path.insert(0, str(_Path(__file__).resolve().parent))

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

TARGETS = ("faiss", "lite", "server")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000", help="corpus sizes (comma-separated)")
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--nq", type=int, default=1000, help="queries")
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated subset of {', '.join(TARGETS)}")
    p.add_argument("--types", default="", help="Milvus index types to measure (default: the one chosen per size)")
    p.add_argument("--server-uri", help="a running Milvus server (default: start the milvus package's)")
    p.add_argument("--data", default="clustered", choices=["gaussian", "lowrank", "clustered"])
    p.add_argument("--clusters", type=int, default=0, help="centres (default n / 100)")
    p.add_argument("--spread", type=float, default=1.0)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--noise", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="also write the results as JSON here")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.targets = [t for t in args.targets.split(",") if t.strip()]
    args.types = [t.strip().upper() for t in args.types.split(",") if t.strip()]
    bad = sorted(set(args.targets) - set(TARGETS))
    if bad:
        p.error(f"unknown target(s) {', '.join(bad)}; choose from {', '.join(TARGETS)}")
    return args


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


@contextlib.contextmanager
def milvus_server(args):
    """(uri, why not) of the server target: --server-uri, or the milvus package's server started here."""
    if args.server_uri:
        yield args.server_uri, ""
        return
    try:
        from milvus import MilvusServer
    except ImportError:
        yield None, "the `milvus` package is not installed (pip install milvus: its standalone server)"
        return
    folder = tempfile.mkdtemp(prefix="bench-milvus-server-")
    server = MilvusServer()
    server.set_base_dir(folder)
    try:
        server.start()
    except Exception as exc:  # a binary that cannot run here
        yield None, f"the milvus package's server did not start ({type(exc).__name__}: {exc})"
        shutil.rmtree(folder, ignore_errors=True)
        return
    try:
        yield f"http://127.0.0.1:{server.listen_port}", ""
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def recall(I, I_exact, k: int) -> float:
    from cir_demo.index.faiss_index import recall_at_k

    return float(recall_at_k(I, I_exact, k))


def bench_faiss(index_type: str, build: dict, search: dict, xb, xq, I_exact, k: int) -> dict:
    """faiss's index of the same type and parameters as Milvus builds."""
    import faiss

    d = xb.shape[1]
    t = time.perf_counter()
    if index_type == "FLAT":
        index = faiss.IndexFlatIP(d)
    elif index_type == "HNSW":
        index = faiss.IndexHNSWFlat(d, build["M"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = build["efConstruction"]
    elif index_type == "IVF_SQ8":
        index = faiss.index_factory(d, f"IVF{build['nlist']},SQ8", faiss.METRIC_INNER_PRODUCT)
        index.train(xb[:: max(1, len(xb) // (40 * build["nlist"]))])
    else:
        return {"skipped": f"no faiss counterpart of {index_type} here"}
    index.add(xb)
    build_s = time.perf_counter() - t
    if index_type == "HNSW":
        index.hnsw.efSearch = search["ef"]
    if index_type == "IVF_SQ8":
        index.nprobe = search["nprobe"]
    t = time.perf_counter()
    _, I = index.search(xq, k)
    search_s = time.perf_counter() - t
    return {"build_s": build_s, "recall": recall(I, I_exact, k), "qps": len(xq) / search_s, "load": load()}


def lite_drain(path: str, name: str) -> None:
    """Wait for Milvus Lite's background compaction and index builds of collection `name`: it reports
    every row indexed at once and searches a segment by brute force until its index is built, so
    without this its "HNSW" would be measured as exact search. Reaches into Milvus Lite's in-process
    server (`_wait_for_bg`, meant for its tests): a benchmark's need, not the project's."""
    from milvus_lite import server_manager_instance

    entry = server_manager_instance._servers.get(os.path.abspath(path))
    if entry is not None:
        entry[1].get_collection(name)._wait_for_bg()


def bench_milvus(uri: str, index_type: str, xb, xq, I_exact, k: int) -> dict:
    """Build a collection through the project's own store code, then search all queries once."""
    import numpy as np

    from cir_demo.index import milvus_store as store

    target = store.parse_uri(uri)
    client = store.connect(target, timeout=60)
    logging.getLogger("milvus_lite").setLevel(logging.ERROR)  # a Lite failure's traceback, for the record
    name = f"bench_{index_type.lower()}_{len(xb)}"
    if client.has_collection(name):
        client.drop_collection(name)
    ids = [f"v{i}" for i in range(len(xb))]
    t = time.perf_counter()
    store.create_collection(client, target, name, xb.shape[1], {})
    try:
        index_type, build, search = store.create_vector_index(client, target, name, [index_type], len(xb), {})
        store.insert_rows(client, target, name, xb, ids, 0, progress=True)
        t_insert = time.perf_counter() - t
        client.flush(name)
        store.wait_indexed(client, target, name, len(xb))
        if target.lite:
            lite_drain(target.uri, name)
        client.load_collection(name)
        assert store.row_count(client, target, name) == len(xb)
        build_s = time.perf_counter() - t
        t = time.perf_counter()
        _, I = store.search(client, target, name, xq, k, search, xb.shape[1])
        search_s = time.perf_counter() - t
    finally:  # only the collection this run created
        try:
            client.drop_collection(name)
        except Exception as exc:  # Milvus Lite: index files its background builder still writes
            print(f"  dropping {name} failed ({str(exc)[:200]})", file=sys.stderr)
    I = np.asarray(I)
    return {
        "index_type": index_type,
        "build": build,
        "search": search,
        "insert_s": t_insert,
        "build_s": build_s,
        "recall": recall(I, I_exact, k),
        "qps": len(xq) / search_s,
        "load": load(),
    }


def bench_size(args, n: int, server_uri: str | None, why_no_server: str) -> dict:
    import faiss

    from bench_index import corpus_and_queries
    from cir_demo.index import milvus_store as store

    args.n = n
    xb, xq = corpus_and_queries(args, n)
    flat = faiss.IndexFlatIP(args.d)
    flat.add(xb)
    t = time.perf_counter()
    _, I_exact = flat.search(xq, args.k)
    exact_qps = len(xq) / (time.perf_counter() - t)
    del flat
    types = args.types or store.candidate_types(n, args.d, True, None)[0]
    out = {"n": n, "d": args.d, "nq": len(xq), "k": args.k, "exact_qps": exact_qps, "load": load(), "rows": []}
    print(f"n={n:,} x {args.d}: exact faiss flat {exact_qps:.0f} q/s (load {load()})", file=sys.stderr, flush=True)
    for index_type in types:
        build, search = store.resolve_index(index_type, n)
        for target in args.targets:
            row = {"target": target, "index_type": index_type}
            if target == "faiss":
                row.update(bench_faiss(index_type, build, search, xb, xq, I_exact, args.k))
            elif target == "server" and server_uri is None:
                row["skipped"] = why_no_server
            else:
                uri = server_uri if target == "server" else os.path.join(tempfile.mkdtemp(prefix="bench-lite-"), "b.db")
                try:
                    row.update(bench_milvus(uri, index_type, xb, xq, I_exact, args.k))
                except Exception as exc:  # a type the target does not build, a server that died
                    row["skipped"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                finally:
                    if target == "lite":
                        from milvus_lite import server_manager_instance

                        server_manager_instance.release_server(uri)
                        shutil.rmtree(os.path.dirname(uri), ignore_errors=True)
            out["rows"].append(row)
            print(f"  {json.dumps(row)}", file=sys.stderr, flush=True)
    return out


def print_table(results: list[dict]) -> None:
    print("| corpus | target | index | build s | recall@k | queries/s | load (1/5/15 min) |")
    print("|---|---|---|---|---|---|---|")
    for size in results:
        for r in size["rows"]:
            head = f"| {size['n']:,} x {size['d']} | {r['target']} | {r['index_type']} |"
            if "skipped" in r:
                print(f"{head} skipped: {r['skipped'][:120]} | | | |")
                continue
            print(f"{head} {r['build_s']:.1f} | {r['recall']:.3f} | {r['qps']:.0f} | {r['load']} |")


def main(argv=None) -> int:
    args = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(args.threads))
    import faiss

    logging.basicConfig(level=logging.ERROR)
    faiss.omp_set_num_threads(args.threads)
    results = []
    with milvus_server(args) if "server" in args.targets else contextlib.nullcontext((None, "")) as (uri, why):
        for n in args.sizes:
            results.append(bench_size(args, n, uri, why))
    print_table(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

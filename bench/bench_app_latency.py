"""Interactive latency of the explorer, measured at the service layer (no browser, no HTTP).

    python bench/bench_app_latency.py                        # world default, the app's default columns
    python bench/bench_app_latency.py --queries 40 --json latency.json
    python bench/bench_app_latency.py --retrievers a,b,c,d --reranker NAME --top-n 20

What one interaction is: what the app does when a visitor opens a query or clicks another
paraphrase: `ExplorerService.compare` for the four columns (ranking, per-column AP@10 /
precision@10 / NegRecall@10, tiles with judgments and thumbnails), then the tile HTML.
The script opens `--queries` random queries (seed 0) and swaps each to `--swaps` other
paraphrases, once without reranking and once with the reranker on the top `--top-n`
(separate random queries, so reranker scores are not warmed by the first phase).
It prints p50/p95 per phase and per step (first view of a query / paraphrase swap) and
where thumbnails and reranker scores came from (memory, disk cache, computed), because
those caches decide the tail: the app fills the thumbnail file in a background process and
`--eval` fills the reranker's score cache. `--cold-caches` measures with both empty.

Targets: four world retrievers without reranking p95 <= 150 ms; with the world
verifier on the top 20 p95 <= 400 ms. Torch uses `--threads` (default 1, as the app) CPU threads.

`--beside-precompute` measures beside the app's first-start background run: it starts that run
as the app does (the same command line and `spawn_low_priority`: nice 15, one BLAS thread) into a
temporary runs folder, with an empty reranker score cache as on a first start (the world and its
embeddings are shared read-only), waits until it has worked `--precompute-warmup` CPU seconds,
and then alternates visits between the run working and the run paused (SIGSTOP), so both
conditions share the machine's noise; it prints p50/p95 of each, their ratio, and the CPU share
the run got while it worked. A run that ends before the last visit is reported, not restarted.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

TARGETS_MS = {"plain": 150.0, "rerank": 400.0}


def percentiles(values: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(values, dtype=float) * 1000.0
    return {
        "n": int(a.size),
        "p50_ms": float(np.percentile(a, 50)),
        "p95_ms": float(np.percentile(a, 95)),
        "max_ms": float(a.max()),
    }


def interactions(service, n_queries: int, swaps: int, seed: int) -> list[list[str]]:
    """Visits: [query id, then `swaps` other paraphrases of its intent], random queries."""
    import numpy as np

    rng = np.random.default_rng(seed)
    groups = list(service.benchmark.groups().values())
    picks = rng.choice(len(groups), size=min(n_queries, len(groups)), replace=False)
    visits = []
    for g in picks:
        members = [q.query_id for q in groups[int(g)]]
        order = list(rng.permutation(len(members)))
        visits.append([members[i] for i in order[: 1 + swaps]])
    return visits


def run_phase(service, visits, names, k: int, rerank: bool, top_n: int, background=None) -> dict:
    from cir_demo.ui import components  # plain string rendering; no gradio import

    first, swap, totals, html_only = [], [], [], []
    by_condition: dict[str, list[float]] = {}
    for i, visit in enumerate(visits):
        condition = background.set_for_visit(i) if background else None
        for step, query_id in enumerate(visit):
            t0 = time.perf_counter()
            cmp = service.compare(query_id, names, k=k, rerank=rerank, top_n=top_n)
            t1 = time.perf_counter()
            components.results_html(cmp)
            t2 = time.perf_counter()
            errors = [c.error for c in cmp.columns if c.error]
            if errors:
                raise SystemExit(f"error: {query_id}: {errors[0]}")
            (first if step == 0 else swap).append(t2 - t0)
            totals.append(t2 - t0)
            html_only.append(t2 - t1)
            if condition:
                by_condition.setdefault(condition, []).append(t2 - t0)
        if background:
            background.end_visit()
    out = {
        "all": percentiles(totals),
        "first_view": percentiles(first),
        "paraphrase_swap": percentiles(swap) if swap else None,
        "html_render": percentiles(html_only),
    }
    if background:
        out["background_run"] = {c: percentiles(v) for c, v in by_condition.items()}
        out["background_run"]["run_cpu_share_while_working"] = background.cpu_share()
    return out


class PausableRun:
    """A process measured beside the visits: even visits with it working, odd ones with it paused
    (SIGSTOP), and the CPU share it got while it worked."""

    def __init__(self, proc):
        import signal

        self._signal = signal
        self.proc = proc
        self._paused = False
        self._work_wall = self._work_cpu = 0.0
        self._mark = None

    def cpu_s(self) -> float:
        """User + system CPU seconds of the run so far (Linux /proc)."""
        from bench_load import cpu_seconds  # this folder is on sys.path when a bench runs as a script

        return cpu_seconds(self.proc.pid) or 0.0

    def set_for_visit(self, i: int) -> str:
        """Even visits beside the working run, odd ones with it paused."""
        if self.proc.poll() is not None:
            return "run ended"
        want_paused = bool(i % 2)
        if want_paused != self._paused:
            os.kill(self.proc.pid, self._signal.SIGSTOP if want_paused else self._signal.SIGCONT)
            self._paused = want_paused
        if want_paused:
            time.sleep(0.05)  # let the core settle; a paused run holds no CPU
            return "run paused"
        self._mark = (time.perf_counter(), self.cpu_s())
        return "run working"

    def end_visit(self) -> None:
        if self._mark and not self._paused:
            t, c = self._mark
            self._work_wall += time.perf_counter() - t
            self._work_cpu += self.cpu_s() - c
        self._mark = None

    def cpu_share(self) -> float | None:
        """CPU seconds the run got per wall second of the visits beside it (1.0 = one full core)."""
        return round(self._work_cpu / self._work_wall, 3) if self._work_wall else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, self._signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except Exception:
                self.proc.kill()


class BackgroundRun(PausableRun):
    """The app's first-start background run, started beside the measurement (see the docstring)."""

    def __init__(self, service, benchmark_argv: list[str], warmup_cpu_s: float):
        import shutil

        from cir_demo.explorer.precompute import PrecomputeJob, spawn_low_priority
        from cir_demo.paths import REPO_ROOT, cache_dir

        self._shutil = shutil
        self.tmp = Path(tempfile.mkdtemp(prefix="cir_demo_bench_run_"))
        cache = self.tmp / "cache"
        cache.mkdir()
        for entry in cache_dir().iterdir():  # a first start's score cache is empty; everything else is shared
            if entry.name != "rerank":
                (cache / entry.name).symlink_to(entry.resolve())
        env = dict(os.environ, CIR_DEMO_CACHE=str(cache), CIR_DEMO_RUNS=str(self.tmp / "runs"))
        argv = PrecomputeJob(benchmark_argv).command(service, self.tmp / "runs" / "bench-run")
        self.log_path = self.tmp / "run.log"
        self._log = open(self.log_path, "w")
        super().__init__(spawn_low_priority(argv, REPO_ROOT, self._log, env=env))
        t0 = time.perf_counter()
        while self.cpu_s() < warmup_cpu_s:
            if self.proc.poll() is not None:
                raise SystemExit(
                    f"error: the background run ended during warm-up (exit {self.proc.returncode}); see {self.log_path}"
                )
            time.sleep(0.5)
        print(
            f"background run (pid {self.proc.pid}) working: {self.cpu_s():.1f} CPU s in "
            f"{time.perf_counter() - t0:.1f} s of warm-up",
            flush=True,
        )

    def close(self) -> None:
        self.stop()
        self._log.close()
        self._shutil.rmtree(self.tmp, ignore_errors=True)


def counts_delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--benchmark", default="world")
    p.add_argument("--world-size", default="default", choices=["tiny", "default"])
    p.add_argument("--retrievers", help="comma-separated (default: the app's defaults, first four)")
    p.add_argument("--reranker", help="reranker backend (default: the app's default); 'none' skips the rerank phase")
    p.add_argument("--top-n", type=int, default=20)
    p.add_argument("--k", type=int, default=10, help="tiles per column")
    p.add_argument("--queries", type=int, default=40, help="queries opened per phase")
    p.add_argument("--swaps", type=int, default=2, help="paraphrase swaps after opening each query")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the app's default, 1)")
    p.add_argument(
        "--cold-caches",
        action="store_true",
        help="empty thumbnail and reranker-score caches (a temporary cache dir; the world is regenerated there)",
    )
    p.add_argument(
        "--fill-caches",
        action="store_true",
        help="first fill the thumbnail and pixel caches, as the app's background warmer does "
        "(timed; a no-op when they are full)",
    )
    p.add_argument(
        "--reuse-scores",
        action="store_true",
        help="let the rerank phase read reranker scores already on disk (e.g. from --eval); by default it "
        "starts from an empty score cache, so every score is computed during the interaction",
    )
    p.add_argument(
        "--beside-precompute",
        action="store_true",
        help="alternate visits beside the app's first-start background run and with it paused (Linux)",
    )
    p.add_argument(
        "--precompute-warmup",
        type=float,
        default=10.0,
        help="CPU seconds the background run works before the first visit (default 10)",
    )
    p.add_argument("--json", help="write the numbers here")
    args = p.parse_args(argv)

    if args.cold_caches:
        os.environ["CIR_DEMO_CACHE"] = tempfile.mkdtemp(prefix="cir_demo_bench_cache_")
    import torch

    torch.set_num_threads(args.threads)
    from cir_demo.explorer import MAX_COLUMNS, ServiceConfig, build_service

    kwargs = {"size": args.world_size} if args.benchmark == "world" else {}
    config = ServiceConfig(
        benchmark=args.benchmark,
        benchmark_kwargs=kwargs,
        retrievers=tuple(args.retrievers.split(",")) if args.retrievers else None,
        reranker=args.reranker,
        warm_thumbnails=False,
        threads=args.threads,
    )
    t0 = time.perf_counter()
    service = build_service(config, lambda stage: print(f"[load] {stage}", file=sys.stderr, flush=True))
    load_s = time.perf_counter() - t0
    names = service.retriever_names[:MAX_COLUMNS]
    if not names:
        print("error: no retriever could be loaded:\n  " + "\n  ".join(service.warnings), file=sys.stderr)
        return 1
    print(f"service loaded in {load_s:.1f} s: {service.summary()}")
    for w in service.warnings:
        print(f"warning: {w}")

    results: dict = {
        "benchmark": service.summary(),
        "retrievers": names,
        "k": args.k,
        "threads": args.threads,
        "load_s": round(load_s, 2),
        "cold_caches": args.cold_caches,
        "phases": {},
    }
    if args.fill_caches:
        from cir_demo.explorer import PixelCachedStore, warm_images

        t0 = time.perf_counter()
        pixels = (
            [{"db_path": str(service.benchmark.images.db_path), "kind": "png"}]
            if isinstance(service.benchmark.images, PixelCachedStore)
            else []
        )
        store = service.benchmark.images
        service.benchmark.images = getattr(store, "inner", store)  # render, do not read the cache being filled
        refs = list(dict.fromkeys(r for q in service.benchmark.queries for r in q.reference_ids))
        opened = warm_images(
            service.benchmark,
            refs,
            [
                {
                    "db_path": str(service.references.db_path),
                    "kind": "jpeg",
                    "size": service.references.size,
                    "quality": service.references.quality,
                }
            ]
            + pixels,
        )
        opened += warm_images(
            service.benchmark,
            service.benchmark.corpus_ids,
            [
                {
                    "db_path": str(service.tiles.db_path),
                    "kind": "jpeg",
                    "size": service.tiles.size,
                    "quality": service.tiles.quality,
                }
            ]
            + pixels,
        )
        service.benchmark.images = store
        results["fill_caches_s"] = round(time.perf_counter() - t0, 1)
        print(f"filled the image caches in {results['fill_caches_s']} s ({opened} images opened)")
    warm = interactions(service, 2, 0, args.seed + 99)  # load lazily built pieces (first encode) before timing
    run_phase(service, warm, names, args.k, False, args.top_n)
    background = None
    if args.beside_precompute:
        argv = ["--benchmark", args.benchmark] + (
            ["--world-size", args.world_size] if args.benchmark == "world" else []
        )
        background = BackgroundRun(service, argv, args.precompute_warmup)

    plan = [("plain", False, args.seed)]
    if service.reranker_name:
        plan.append(("rerank", True, args.seed + 1))
    else:
        print(f"no rerank phase: {service.reranker_note}")
    for phase, rerank, seed in plan:
        visits = interactions(service, args.queries, args.swaps, seed)
        thumbs0 = dict(service.tiles.counts)
        pixel_counts = getattr(service.benchmark.images, "counts", None)
        pixels0 = dict(pixel_counts) if pixel_counts is not None else None
        if rerank and not args.reuse_scores:
            service.engine.use_score_cache(Path(tempfile.mkdtemp(prefix="cir_demo_bench_scores_")) / "scores.sqlite")
        cache = service.engine.score_cache if rerank else None
        hits0, misses0 = (cache.hits, cache.misses) if cache else (0, 0)
        if rerank:  # the reranker model loads on first use: not part of an interaction
            run_phase(service, warm, names, args.k, True, args.top_n)
            hits0, misses0 = cache.hits, cache.misses
        res = run_phase(service, visits, names, args.k, rerank, args.top_n, background)
        res["thumbnails"] = counts_delta(thumbs0, service.tiles.counts)
        if pixels0 is not None:
            res["images"] = counts_delta(pixels0, pixel_counts)
        if cache:
            res["reranker_scores"] = {"from_cache": cache.hits - hits0, "computed": cache.misses - misses0}
        res["target_p95_ms"] = TARGETS_MS[phase]
        results["phases"][phase] = res
        label = (
            f"{len(names)} columns, no reranking"
            if not rerank
            else f"{len(names)} columns, {service.reranker_name} on the top {args.top_n}"
        )
        a = res["all"]
        print(
            f"\n{label}: n={a['n']}  p50 {a['p50_ms']:.1f} ms  p95 {a['p95_ms']:.1f} ms  max {a['max_ms']:.1f} ms  "
            f"(target p95 <= {TARGETS_MS[phase]:.0f} ms: {'met' if a['p95_ms'] <= TARGETS_MS[phase] else 'MISSED'})"
        )
        for step in ("first_view", "paraphrase_swap", "html_render"):
            if res.get(step):
                s = res[step]
                print(
                    f"  {step.replace('_', ' '):16s} n={s['n']:4d}  p50 {s['p50_ms']:7.1f} ms  p95 {s['p95_ms']:7.1f} ms"
                )
        t = res["thumbnails"]
        print(f"  thumbnails: {t['memory']} from memory, {t['disk']} from the disk cache, {t['rendered']} rendered")
        if "images" in res:
            print(
                f"  full images opened past the in-memory LRU: {res['images']['cached']} from the pixel cache, "
                f"{res['images']['opened']} rendered or read from the benchmark"
            )
        if cache:
            r = res["reranker_scores"]
            print(f"  reranker scores: {r['from_cache']} from the score cache, {r['computed']} computed")
        if background:
            b = res["background_run"]
            for cond in ("run working", "run paused", "run ended"):
                if cond in b:
                    print(
                        f"  {cond:16s} n={b[cond]['n']:4d}  p50 {b[cond]['p50_ms']:7.1f} ms  p95 {b[cond]['p95_ms']:7.1f} ms"
                    )
            if "run working" in b and "run paused" in b:
                w, q = b["run working"], b["run paused"]
                print(
                    f"  working / paused: p50 x{w['p50_ms'] / q['p50_ms']:.2f}, p95 x{w['p95_ms'] / q['p95_ms']:.2f}; "
                    f"the run got {b['run_cpu_share_while_working']} of a core while it worked"
                )
    if background:
        results["background_run_pid"] = background.proc.pid
        results["background_run_cpu_s"] = round(background.cpu_s(), 1)
        results["background_run_ended"] = background.proc.poll() is not None
        background.close()
    results["load_average"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    service.engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

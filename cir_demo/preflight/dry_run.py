"""`--dry-run`: what a run would download, encode and rerank, and how long it would take
on this device, from a throughput measured on a small batch. Creates nothing: models are
loaded only when their weights are already here, images are opened read-only, and no
index, cache or run folder is written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cir_demo.benchmarks.cli_args import BenchmarkChoice
from cir_demo.preflight.checks import Line
from cir_demo.preflight.request import RunRequest

SAMPLE = 8  # images (and queries) in the measured batch


@dataclass
class Plan:
    lines: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unknown: list[str] = field(default_factory=list)  # parts whose time could not be measured

    def add(self, text: str) -> None:
        self.lines.append(text)


def _fmt_s(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _rate(fn, n: int) -> float:
    """Items per second of `fn()` (one call on `n` items), after one warm-up call."""
    fn()
    t = time.perf_counter()
    fn()
    return n / max(time.perf_counter() - t, 1e-6)


def _present(bench, ids, n: int) -> list[str]:
    store = bench.images
    if store is None:
        return []
    if not hasattr(store, "local_path"):
        return list(ids[:n])
    out = []
    for i in ids:
        if store.local_path(i) is not None:
            out.append(i)
            if len(out) == n:
                break
    return out


def plan_retriever(plan: Plan, bench, name: str, line: Line, request: RunRequest, batch_size: int) -> None:
    """Encode counts for one retriever, and their time when its weights are here."""
    from cir_demo.engine import RetrievalEngine
    from cir_demo.index.build import corpus_ids_of, default_index_dir, rebuild_reasons
    from cir_demo.retrievers.base import is_ranking_only

    n_corpus, n_queries = len(bench.corpus_ids), len(bench.queries)
    if line.status not in ("ready", "warning"):
        plan.add(
            f"retriever {name}: encode {n_corpus} corpus images and {n_queries} queries "
            f"(time unknown: {line.status}, {line.detail})"
        )
        plan.unknown.append(name)
        return
    engine = RetrievalEngine(
        bench,
        [name],
        device=request.device,
        progress=False,
        trust_remote_code=request.trust_remote_code,
    )
    retriever = engine.retriever(name)
    if is_ranking_only(retriever):
        plan.add(f"retriever {name}: precomputed rankings, nothing to encode")
        return
    ids = corpus_ids_of(bench)
    fresh = not rebuild_reasons(default_index_dir(bench, retriever), bench, retriever, ids, None, {})
    to_encode = 0 if fresh else len(ids)
    sample_ids = _present(bench, ids, SAMPLE)
    queries = [
        q
        for q in bench.queries[: SAMPLE * 4]
        if all(bench.images is None or _present(bench, [r], 1) for r in q.reference_ids)
    ][:SAMPLE]
    if not sample_ids or not queries:
        plan.add(
            f"retriever {name}: encode {to_encode} corpus images and {n_queries} queries "
            "(time unknown: no images here to measure on)"
        )
        plan.unknown.append(name)
        return
    images = [engine.open_image(i) for i in sample_ids]
    composed = [engine.composed(q) for q in queries]
    img_rate = _rate(lambda: retriever.encode_images(images, batch_size=min(batch_size, len(images))), len(images))
    q_rate = _rate(lambda: retriever.encode_query_variants(composed, batch_size=len(composed)), len(composed))
    secs = to_encode / img_rate + n_queries / q_rate
    plan.seconds += secs
    plan.add(
        f"retriever {name}: encode {to_encode} corpus images"
        + (" (its index is fresh: reused)" if fresh else "")
        + f" at {img_rate:.1f} img/s and {n_queries} queries at {q_rate:.1f} queries/s "
        f"(measured on {len(images)} images / {len(composed)} queries here): about {_fmt_s(secs)}"
    )


def plan_reranker(plan: Plan, bench, backend: str, line: Line, n_runs: int, top_n: int, request: RunRequest) -> None:
    from cir_demo.engine import RetrievalEngine
    from cir_demo.rerank import RerankRequest
    from cir_demo.rerank.rerank import score_candidates

    pairs = n_runs * len(bench.queries) * top_n
    if line.status not in ("ready", "warning"):
        plan.add(f"reranker {backend}: score {pairs} (query, candidate) pairs (time unknown: {line.status})")
        plan.unknown.append(backend)
        return
    ids = _present(bench, list(bench.corpus_ids), SAMPLE)
    queries = [
        q
        for q in bench.queries[: SAMPLE * 4]
        if bench.images is None or len(_present(bench, list(q.reference_ids), 2)) == len(q.reference_ids)
    ]
    if not ids or not queries:
        plan.add(f"reranker {backend}: score {pairs} pairs (time unknown: no images here to measure on)")
        plan.unknown.append(backend)
        return
    engine = RetrievalEngine(bench, [], device=request.device, progress=False)
    reranker = _plain_reranker(backend, request.device)
    q = queries[0]
    req = RerankRequest(tuple(engine.open_image(r) for r in q.reference_ids), q.reference_ids, q.instruction)
    rate = _rate(lambda: score_candidates(req, ids, engine.open_image, reranker), len(ids))
    secs = pairs / rate
    plan.seconds += secs
    plan.add(
        f"reranker {backend}: score {pairs} pairs ({n_runs} runs x {len(bench.queries)} queries x top {top_n}) "
        f"at {rate:.1f} pairs/s (measured on {len(ids)} here): about {_fmt_s(secs)}"
    )


def _plain_reranker(backend: str, device: str | None):
    """The reranker without the engine's shared-embedding hook (which would encode the corpus)."""
    from cir_demo.rerank import load_reranker

    return load_reranker(backend, **({"device": device} if device else {}))


def not_generated_note(choice: BenchmarkChoice) -> str | None:
    """Loading a benchmark whose data is generated on first load (the world) generates it when missing,
    which a dry run must not do: say so instead."""
    from cir_demo.preflight.checks import pending_generation_of

    pending = pending_generation_of(choice)
    if pending is None:
        return None
    return (
        f"dry run: {pending.what} is not generated yet; the run would generate it first ({pending.seconds}). "
        f"Generate it with `{pending.command}` to see the counts and a measured time estimate; "
        "nothing was created"
    )


def dry_run(
    request: RunRequest,
    bench,
    names,
    reranker: str | None,
    top_n: int,
    model_lines: list[Line],
    batch_size: int = 64,
) -> str:
    """The plan as text. `model_lines` are the preflight lines of the device, retrievers and reranker."""
    from cir_demo.images.coverage import image_coverage
    from cir_demo.preflight.hub import human_bytes, repo_info
    from cir_demo.preflight.weights import reranker_sources, retriever_sources

    plan = Plan()
    device = next((ln for ln in model_lines if ln.item == "device"), None)
    plan.add(f"dry run on {device.detail if device else 'this machine'}; nothing is created")
    # downloads
    sources = [s for n in names for s in retriever_sources(n)] + (reranker_sources(reranker) if reranker else [])
    seen = set()
    for s in sources:
        if s.cached or s.kind == "api" or (s.repo, s.label) in seen:
            continue
        seen.add((s.repo, s.label))
        if s.repo:
            info = repo_info(s.repo, s.patterns)
            size = human_bytes(info.size_bytes) if info.size_bytes is not None else info.problem
            plan.add(f"download: {s.label} from {s.repo} ({size}) for {s.owner}")
        else:
            plan.add(f"download: {s.label} for {s.owner} ({s.fix})")
    cov = image_coverage(bench)
    if cov is not None and cov.missing:
        how = "fetched with --fetch-images" if cov.fetchable else "not fetchable: put them in --image-dir"
        plan.add(f"download: {cov.n_missing} benchmark images ({how}); {cov.describe()}")
    blocking = [ln for ln in model_lines if ln.blocking]
    for ln in blocking:
        plan.add(f"cannot run yet: {ln.message()}")
    # encode and rerank
    rank = {"ready": 0, "warning": 1, "download": 2, "missing": 3, "blocked": 3}
    by_item: dict[str, Line] = {}
    for ln in model_lines:  # the worst line of each model decides whether it can be measured
        if ln.item not in by_item or rank.get(ln.status, 0) > rank.get(by_item[ln.item].status, 0):
            by_item[ln.item] = ln
    for name in names:
        line = by_item.get(f"retriever {name}") or Line(name, "ready", "")
        plan_retriever(plan, bench, name, line, request, batch_size)
    if reranker:
        line = by_item.get(f"reranker {reranker}") or Line(reranker, "ready", "")
        plan_reranker(plan, bench, reranker, line, len(names), top_n, request)
    total = f"estimated time: about {_fmt_s(plan.seconds)}"
    if plan.unknown:
        total += f" plus the parts that could not be measured ({', '.join(plan.unknown)})"
    plan.add(total)
    return "\n".join(plan.lines)

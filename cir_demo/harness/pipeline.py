"""`python app.py --eval` without `--results-json`: run retrievers (and optionally a
reranker) over a benchmark, write official-format results files, score them.

This is the only module that wires benchmark, retrievers, indexes, reranker and
metrics together for a headless run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import functools
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import pandas as pd

from cir_demo.benchmarks.families import metric_family
from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.harness.settings import EvalSettings
from cir_demo.store.score import RunEvaluation, evaluate_run
from cir_demo.preflight.request import default_reranker, retriever_names


def _paired_change(base: RunEvaluation, rr: RunEvaluation, col: str, n_boot: int, seed: int):
    """(first stage, reranked, per-query change, "gain [95% CI]") of per-query column `col` on the shared queries."""
    from cir_demo.metrics.bootstrap import paired_bootstrap

    a = base.per_query.set_index("query_id")[col]
    b = rr.per_query.set_index("query_id")[col].reindex(a.index)
    delta = (b - a).dropna()
    gain = "n/a"
    if len(delta) and n_boot > 0:
        groups = base.per_query.set_index("query_id")["group_id"].reindex(delta.index).to_numpy()
        res = paired_bootstrap(
            a.reindex(delta.index).to_numpy(float),
            b.reindex(delta.index).to_numpy(float),
            groups,
            n_boot=n_boot,
            seed=seed,
        )
        gain = f"{res['diff']:+.4f} [{res['lo']:+.4f}, {res['hi']:+.4f}]"
    return a, b, delta, gain


def rerank_section(
    benchmark,
    pairs: Sequence[tuple[RunEvaluation, RunEvaluation]],
    top_n: int,
    spec: dict,
    n_boot: int = 1000,
    seed: int = 0,
) -> str:
    """Markdown, for any metric family: its primary metric before and after reranking, per retriever."""
    fam = metric_family(benchmark.metric_family)
    col, agg = fam.primary, fam.headline.get(fam.primary, fam.primary)
    lines = [
        f"## Reranking (top {top_n})",
        "",
        f"Reranker: `{spec.get('backend', spec.get('name', '?'))}`; its full spec is in `run_info.json`. "
        f"Helped/hurt count queries whose {col} rose/fell. {agg} gain: reranked minus first stage with its "
        "95% CI from a paired bootstrap over paraphrase groups.",
        "",
        f"| retriever | {agg} | {agg} reranked | {agg} gain [95% CI] | helped | hurt |",
        "|---|---|---|---|---|---|",
    ]
    for base, rr in pairs:
        _, _, delta, gain = _paired_change(base, rr, col, n_boot, seed)
        lines.append(
            f"| {base.name} | {base.metrics.get(agg, float('nan')):.4f} | {rr.metrics.get(agg, float('nan')):.4f} | "
            f"{gain} | {(delta > 0).sum()} | {(delta < 0).sum()} |"
        )
    return "\n".join(lines)


def pinpoint_rerank_section(
    benchmark,
    pairs: Sequence[tuple[RunEvaluation, RunEvaluation]],
    top_n: int,
    spec: dict,
    n_boot: int = 1000,
    seed: int = 0,
) -> str:
    """Markdown: what the reranker changed, per retriever, in the PinPoint paper's terms (precision, safety,
    linguistic sensitivity)."""
    lines = [
        f"## Reranking (top {top_n})",
        "",
        f"Reranker: `{spec.get('backend', spec.get('name', '?'))}`; its full spec (with the exact prompt or "
        "input description) is in `run_info.json`. Helped/hurt count queries whose AP@10 rose/fell. "
        "mAP@10 gain: reranked minus first stage with its 95% CI from a paired bootstrap over paraphrase groups. "
        "Linguistic sensitivity: the mean over intents of the range (max - min) of AP@10 across the paraphrases "
        "(lower is steadier); its change is reranked minus first stage.",
        "",
        "| retriever | mAP@10 | mAP@10 reranked | mAP@10 gain [95% CI] | NegRecall@10 (lower is better) | "
        "NegRecall@10 reranked | ling. sens. | ling. sens. reranked | ling. sens. change | helped | hurt |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    worst: list[str] = []
    changes = {"mAP@10 rose": 0, "NegRecall@10 fell": 0, "linguistic sensitivity rose": 0}
    for base, rr in pairs:
        a, b, delta, gain = _paired_change(base, rr, "AP@10", n_boot, seed)
        m0, m1 = base.metrics, rr.metrics
        ls0 = m0.get("ling_sens_paraphrase_range", float("nan"))
        ls1 = m1.get("ling_sens_paraphrase_range", float("nan"))
        lines.append(
            f"| {base.name} | {m0['mAP@10']:.4f} | {m1['mAP@10']:.4f} | {gain} | {m0['NegRecall@10']:.4f} | "
            f"{m1['NegRecall@10']:.4f} | {ls0:.4f} | {ls1:.4f} | {ls1 - ls0:+.4f} | {(delta > 0).sum()} | "
            f"{(delta < 0).sum()} |"
        )
        changes["mAP@10 rose"] += m1["mAP@10"] > m0["mAP@10"]
        changes["NegRecall@10 fell"] += m1["NegRecall@10"] < m0["NegRecall@10"]
        changes["linguistic sensitivity rose"] += m1.get("ling_sens_paraphrase_range", float("nan")) > m0.get(
            "ling_sens_paraphrase_range", float("nan")
        )
        if len(delta):
            hurt = delta.sort_values().head(3)
            worst += [f"- {base.name}: query `{q}` AP@10 {a[q]:.3f} → {b[q]:.3f}" for q, _ in hurt.items() if _ < 0]
    lines += [
        "",
        "With reranking, "
        + ", ".join(f"{what} for {n} of {len(pairs)} retrievers" for what, n in changes.items())
        + ". (The PinPoint paper found that reranking lowers NegRecall@10 but worsens linguistic sensitivity.)",
    ]
    if worst:
        lines += ["", "Queries the reranker hurt most:", ""] + worst
    return "\n".join(lines)


def query_text_section(specs: dict[str, dict]) -> list[str]:
    """Markdown stating each retriever's query template, when the benchmark has templates (none: [])."""
    rows = [(n, s["query_template"]) for n, s in specs.items() if "query_template" in s]
    if not rows:
        return []
    return [
        "## Query text\n\nHow each retriever's text was made from a query (configs/query_templates.json, or the "
        "retriever config's `query_templates`):\n\n| retriever | template | source |\n|---|---|---|\n"
        + "\n".join(f"| {n} | `{t['template']}` | {t['source']} |" for n, t in rows)
    ]


class Stages:
    """Wall seconds per stage of a run, in the order the stages first ran: run_info.json's `timings_s`
    and the last line of the run's log, so that a slow run says where its time went; also the
    machine's 1-minute load average and other work (`utils.beside.other_work`) when the run began,
    before the run itself raised them."""

    def __init__(self):
        import os

        from cir_demo.utils.beside import other_work

        self.t0 = time.perf_counter()
        self.start_load = os.getloadavg()[0]
        self.start_other_work = other_work()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - t, 3)

    def add(self, name: str, seconds: float) -> None:
        """`seconds` of stage `name` spent elsewhere (the worker process's)."""
        self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 3)

    def total(self) -> float:
        return time.perf_counter() - self.t0

    def line(self) -> str:
        start = f"load average {self.start_load:.1f}, other work {self.start_other_work:.1f} cores at the start"
        return f"time per stage (s; {start}): " + ", ".join(f"{k} {v:.1f}" for k, v in self.seconds.items())


def dry_run_benchmark(settings: EvalSettings, bench, names: list[str], reranker_name: str | None, top_n: int) -> int:
    from cir_demo.preflight.dry_run import dry_run
    from cir_demo.preflight.run import model_lines

    lines = model_lines(names, reranker_name, settings.trust_remote_code, settings.device)
    print(dry_run(settings.run_request, bench, names, reranker_name, top_n, lines))
    return 1 if any(ln.blocking for ln in lines) else 0


def run_benchmark(settings: EvalSettings) -> int:
    from cir_demo.harness.splits import first_split, load_split, side_splits
    from cir_demo.harness.staging import default_out_dir, staged_run_dir

    stages = Stages()
    if settings.dry_run:
        from cir_demo.preflight.dry_run import not_generated_note

        note = not_generated_note(settings.benchmark)
        if note:
            print(note)
            return 0
    with stages("benchmark"):  # the default world: generated on a first run
        bench = settings.benchmark.load()
        side = {split: load_split(settings.benchmark, split) for split in side_splits(settings.benchmark)}
    names = retriever_names(settings.retrievers, bench.name)
    reranker_name = default_reranker(bench.name, settings.rerank)
    top_n = settings.rerank_top_n
    if settings.dry_run:  # every split's queries are counted; the corpus is encoded once
        every = [q for b in (bench, *side.values()) for q in b.queries]
        return dry_run_benchmark(
            settings, dataclasses.replace(bench, queries=every) if side else bench, names, reranker_name, top_n
        )
    from cir_demo.preflight.run import check_run

    with stages("checks"):  # weights, opt-ins, images: before anything is created
        request = settings.run_request
        bench = check_run(request, bench, names, reranker_name)
        side = {split: check_run(request, b, names, reranker_name) for split, b in side.items()}
    final = Path(settings.out) if settings.out else default_out_dir(bench.name)
    print(f"run directory: {final} (written when complete)", flush=True)
    with staged_run_dir(final, settings.overwrite, reserved=not settings.out, wait=settings.wait) as out:
        from cir_demo.harness.splits import SplitRun

        splits = [SplitRun(first_split(settings.benchmark, bench), bench, out)] + [
            SplitRun(k, b, out / k) for k, b in side.items()
        ]
        from cir_demo.utils.gc_pause import collector_paused

        # millions of rankings, items and rows that live to the end; no collection after: a full pass over
        # them frees nothing they hold, and the collector's own passes find any cycle later (a process
        # that runs several evaluations, the app's or the tests', paid a full pass of its heap each)
        from cir_demo.utils.beside import other_work_at_start

        # the other work read before the run: its own children and threads raise the load as it goes
        with collector_paused(collect_after=False), other_work_at_start(stages.start_other_work):
            n_files, report = _run_into(settings, splits, names, reranker_name, top_n, stages)
    # said only once the run is in place: the final move can still refuse or fail
    print(f"wrote {n_files} files to {final} in {stages.total():.1f} s (report: {final / report})")
    print(stages.line(), flush=True)
    return 0


def machine_busy(load: float) -> bool:
    """A 1-minute load average above the CPUs + 1: other work already fills the machine."""
    from cir_demo.index.corpus_encode import usable_cpus

    return load > usable_cpus() + 1


def small_models_on_cpu(names: Sequence[str], reranker_name: str | None, device: str | None) -> bool:
    """Whether the run's models are the offline world's own small ones, on the CPU, with torch's threads
    not set by the user (OMP_NUM_THREADS)."""
    import os

    small = all(n.startswith("world-") for n in names) and reranker_name in (None, "world-verifier")
    return small and (device or "cpu") == "cpu" and "OMP_NUM_THREADS" not in os.environ


def one_small_model_thread(
    names: Sequence[str], reranker_name: str | None, device: str | None, load: float | None = None
) -> bool:
    """Whether the offline world's own small models run one batch at a time on one torch thread: on
    the CPU of a machine already busy with other work (`machine_busy`), unless OMP_NUM_THREADS says
    otherwise. There a second thread only spins for its core. `load`: the load average before the run
    began (`Stages.start_load`), so that the run's own render workers and threads, which raise the load
    average while it runs, never count as other work; None: read it now."""
    import os

    busy = machine_busy(os.getloadavg()[0] if load is None else load)
    return busy and small_models_on_cpu(names, reranker_name, device)


def quiet_lanes(names: Sequence[str], reranker_name: str | None, device: str | None, load: float | None = None) -> int:
    """How many reranker batches `small_model_threads` scores at once: one per core (up to `MAX_LANES`)
    for the offline world's small models on a quiet CPU, else 1."""
    from cir_demo.index.corpus_encode import usable_cpus

    if not small_models_on_cpu(names, reranker_name, device) or one_small_model_thread(
        names, reranker_name, device, load
    ):
        return 1
    return min(MAX_LANES, usable_cpus())


@contextlib.contextmanager
def small_model_threads(names: Sequence[str], reranker_name: str | None, device: str | None, load: float | None = None):
    """The run's model threads: yields how many reranker batches to score at once (`rerank_run`'s lanes;
    more than one also computes the first stages ahead, `_first_stages`, and writes and scores the runs in
    a worker process, `RunOutputs`). The offline world's small
    models run torch on one thread per batch: on a machine busy with other work
    (`one_small_model_thread`) one batch at a time; on a quiet CPU one batch per core (up to
    `MAX_LANES`) beside the first stages, which keeps both cores busier than two torch threads inside
    each batch's small operations. Their outputs are the same bits on one torch thread or two
    (tests/test_eval_threads.py), so the choice changes no output. OMP_NUM_THREADS, when set, is the
    user's choice: left alone, one lane."""
    from cir_demo.utils.threads import torch_threads

    if not small_models_on_cpu(names, reranker_name, device):
        yield 1
        return
    with torch_threads(1):
        yield quiet_lanes(names, reranker_name, device, load)


MAX_LANES = 4  # beyond a few, the lanes wait on the one thread that looks up and orders their results


def _run_into(settings: EvalSettings, splits, names, reranker_name, top_n, stages: Stages) -> tuple[int, Path]:
    """Run every retriever (and the reranker) on every split: one engine, so one index and one set of
    corpus features serve them all (the splits share one corpus). Then each split's files and report;
    returns how many files the run holds and its report's place in it."""
    from cir_demo.harness.run_outputs import RunOutputs
    from cir_demo.utils.beside import can_fork_here, spare_core

    for s in splits:
        print(
            f"benchmark {s.bench.name}"
            + (f" ({s.label} split)" if len(splits) > 1 else "")
            + f": {len(s.bench.queries)} queries, {len(s.bench.corpus_ids)} corpus images; "
            f"retrievers: {', '.join(names)}; reranker: {reranker_name or 'none'}",
            flush=True,
        )
    worker = None  # forked before the engine starts any thread
    if quiet_lanes(names, reranker_name, settings.device, stages.start_load) > 1 and can_fork_here() and spare_core():
        worker = RunOutputs([(s.bench, s.out) for s in splits], n_boot=settings.n_boot, seed=settings.bootstrap_seed)
    try:
        return _run_with(settings, splits, names, reranker_name, top_n, stages, worker)
    finally:
        if worker is not None:
            worker.close()


def _run_with(settings: EvalSettings, splits, names, reranker_name, top_n, stages: Stages, worker) -> tuple[int, Path]:
    """`_run_into` with its worker process (`RunOutputs`, or None: every run written and scored in line)."""
    from cir_demo.engine import RetrievalEngine

    bench, out = splits[0].bench, splits[0].out
    engine = RetrievalEngine(
        bench,
        names,
        device=settings.device,
        progress=True,
        trust_remote_code=settings.trust_remote_code,
        index_uri=settings.index_uri,
    )
    # every split's reference images, opened on the other core while this one loads the corpus features
    references = engine.open_images_beside([r for s in splits for q in s.bench.queries for r in q.reference_ids])
    specs: dict[str, dict] = {}
    depths: dict[str, int] = {}  # how deep each retriever ranks: part of its runs' keys
    reranker_spec = None
    if reranker_name:  # a first run renders the corpus once for the retrievers and the reranker
        if one_small_model_thread(names, reranker_name, settings.device, stages.start_load):
            print(f"reranking on one torch thread: load average {stages.start_load:.1f} when the run began", flush=True)
        with stages("corpus features"):
            engine.prefetch_corpus_embeddings(names, reranker_name)
            engine.reranker(reranker_name)  # loaded with the corpus features it reads
        # each retriever's reranking asks for every query's scores, mostly scored for an earlier one already
        engine.score_cache.hold(engine.reranker(reranker_name).spec_hash())
    for name in names:
        with stages(f"{name}/index"):
            engine.index(name)  # build or load, with its own progress bar
        references()  # waits for them the first time only
        specs[name] = engine.run_spec(name)  # with its query template, stated in the report
        depths[name] = engine.eval_depth(name)
    if reranker_name:
        reranker_spec = dict(engine.reranker(reranker_name).spec)
    jobs = [(name, split, "" if split is splits[0] else f" ({split.label})") for name in names for split in splits]
    with (
        small_model_threads(names, reranker_name, settings.device, load=stages.start_load) as lanes,
        contextlib.closing(_first_stages(engine, jobs, stages, ahead=lanes > 1)) as first_stages,
    ):
        for (name, split, tag), (run, scores) in first_stages:
            outputs = None if worker is None else functools.partial(worker.submit, splits.index(split))
            _run_split(
                settings,
                engine,
                split,
                name,
                specs[name],
                reranker_name,
                reranker_spec,
                top_n,
                stages,
                run,
                scores,
                lanes,
                tag,
                outputs,
            )
            _raise_failed_outputs(splits)  # a results file that cannot be written stops the run now
        settle_outputs(splits, stages)
    engine.close()

    with stages("report"):
        computed = worker.finish() if worker is not None else [(None, None)] * len(splits)
        for split, (paired, breakdowns) in reversed(list(zip(splits, computed))):  # the first split's report
            paths = _write_report(  # holds the table of them all
                settings,
                split,
                splits if split is splits[0] and len(splits) > 1 else [],
                top_n,
                reranker_spec,
                specs,
                paired,
                breakdowns,
            )
            _write_run_info(
                split, specs, depths, reranker_spec, top_n, stages if split is splits[0] else None, settings.index_uri
            )
    table = pd.read_csv(paths["metrics.csv"])
    cols = [c for c in ("model", *metric_family(bench.metric_family).summary_columns()) if c in table]
    print(table[cols].to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    if len(splits) > 1:
        from cir_demo.harness.splits import both_splits_section

        print(both_splits_section(splits))
    n_files = sum(1 for p in out.rglob("*") if p.is_file()) + 1  # and the run's manifest, written next
    return n_files, paths["report.md"].relative_to(out)


def _raise_failed_outputs(splits) -> None:
    for split in splits:
        for item in split.evaluations:
            if isinstance(item, Future) and item.done() and item.exception() is not None:
                item.result()


def _first_stages(engine, jobs, stages: Stages, ahead: bool):
    """((retriever, split, tag), (run, scores)) of each job in order. `ahead`: computed in order on a
    thread of their own, ahead of the caller, who meanwhile writes, scores and reranks the runs before:
    each retriever still ranks the same queries in the same batches, in the same order, on the same
    torch threads (one), so every run is the same; the models' work then fills both cores."""
    if not ahead:
        for job in jobs:
            yield job, _first_stage(engine, stages, *job)
        return
    pool = ThreadPoolExecutor(1, thread_name_prefix="first-stages", initializer=_one_search_thread)
    try:
        futures = [pool.submit(_first_stage, engine, stages, *job) for job in jobs]  # one worker: in order
        for job, future in zip(jobs, futures):
            yield job, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _one_search_thread() -> None:
    """faiss's OpenMP threads (its BLAS's too) to one in the calling thread only (OpenMP's thread count
    is a per-thread setting): beside the reranker's lanes a second search thread only waits for a core.
    A search's results are the same bits on any count."""
    try:
        import faiss
    except ImportError:  # no faiss index to search (Milvus)
        return
    faiss.omp_set_num_threads(1)


def _first_stage(engine, stages: Stages, name: str, split, tag: str):
    """Retriever `name`'s (run, scores) on one split's queries."""
    from tqdm import tqdm

    from cir_demo.store.store import produce_run

    queries = split.bench.queries
    with (
        stages(f"{name}/retrieve{tag}"),
        tqdm(total=len(queries), desc=f"retrieve {name}{tag}", unit="query") as bar,
    ):
        return produce_run(engine, name, queries, progress=lambda done, total: bar.update(done - bar.n))


def _run_split(
    settings: EvalSettings,
    engine,
    split,
    name: str,
    spec: dict,
    reranker_name,
    reranker_spec,
    top_n: int,
    stages: Stages,
    run: dict,
    scores: dict,
    lanes: int = 1,
    tag: str = "",
    outputs=None,
) -> None:
    """Retriever `name`'s run on one split's queries (and the reranker's): results files, then evaluations.
    `outputs`: submits a run to the worker process that writes and scores it while this thread reranks
    the next (`RunOutputs.submit` of the split); the split then holds their futures (`settle_outputs`)."""
    from cir_demo.store.store import produce_rerank, reranked_scores

    bench, out = split.bench, split.out
    base = _run_outputs(outputs, settings, stages, bench, out, name, run, scores, spec)
    split.evaluations.append(base)
    if not reranker_name:
        return
    with stages(f"{name}/rerank{tag}"):
        rr = produce_rerank(
            engine, reranker_name, run, scores, top_n, queries=bench.queries, progress=True, lanes=lanes
        )
    rr_name = f"{name}{RERANK_SUFFIX}"
    rr_spec = {"retriever": spec, "reranker": reranker_spec, "top_n": top_n}
    reranked = _run_outputs(outputs, settings, stages, bench, out, rr_name, rr.run, reranked_scores(rr), rr_spec)
    split.evaluations.append(reranked)
    split.pairs.append((base, reranked))


def _run_outputs(outputs, settings: EvalSettings, stages: Stages, bench, out: Path, name: str, run, scores, spec):
    """Run `name`'s results file, then its evaluation: now, or (`outputs` given) in the worker process, as
    a future."""
    if outputs is not None:
        return outputs(name, run, scores, spec)
    from cir_demo.results import write_results

    write_results(out / "results" / f"{name}.json", bench, run, scores, spec=spec)
    with stages("evaluate"):
        return evaluate_run(bench, run, name, n_boot=settings.n_boot, seed=settings.bootstrap_seed)


def settle_outputs(splits, stages: Stages) -> None:
    """Each split's evaluations and pairs in place of the futures `_run_split` left (in their order); the
    worker's evaluation seconds into the "evaluate" stage."""
    settled: dict[int, object] = {}

    def value(item):
        if not isinstance(item, Future):
            return item
        if id(item) not in settled:
            ev, seconds = item.result()
            stages.add("evaluate", seconds)
            settled[id(item)] = ev
        return settled[id(item)]

    for split in splits:
        split.evaluations[:] = [value(ev) for ev in split.evaluations]
        split.pairs[:] = [(value(a), value(b)) for a, b in split.pairs]


def _write_run_info(
    split, specs: dict, depths: dict, reranker_spec, top_n: int, stages: Stages | None, index_uri: str | None = None
) -> None:
    """run_info.json of one split's folder; the run's times and command line (`stages` given) at the top only.
    `run_keys`: each run's key in the store (`store.recorded_keys`), which the app reads it under."""
    from cir_demo.engine import benchmark_fingerprint
    from cir_demo.store.store import recorded_keys
    from cir_demo.utils.io import write_json_atomic

    bench = split.bench
    info = {
        "benchmark": bench.name,
        "benchmark_fingerprint": benchmark_fingerprint(bench),
        "benchmark_info": {k: v for k, v in (bench.info or {}).items() if isinstance(v, (str, int, float, bool))},
        "retrievers": specs,
        "reranker": reranker_spec,
        "rerank_top_n": top_n if reranker_spec else None,
        "run_keys": recorded_keys(bench, specs, depths, reranker_spec, top_n, index_uri),
    }
    if stages is not None:
        info.update({"timings_s": stages.seconds, "wall_s": round(stages.total(), 2), "argv": sys.argv})
    write_json_atomic(split.out / "run_info.json", info)


def _write_report(
    settings: EvalSettings, split, all_splits, top_n, reranker_spec, specs, paired=None, breakdowns=None
) -> dict:
    """report.md, metrics, breakdowns, paired comparisons and plots of one split's folder; {name: path}.
    `all_splits` (more than one): its report also gets the table of every split side by side. `paired`,
    `breakdowns`: the worker's (`RunOutputs.finish`), when it computed them."""
    from cir_demo.harness.report import write_outputs
    from cir_demo.harness.splits import both_splits_section

    bench, pairs = split.bench, split.pairs
    sections = [both_splits_section(all_splits)] if all_splits else []
    sections += (
        [
            metric_family(bench.metric_family).rerank_section_maker()(
                bench, pairs, top_n, reranker_spec or {}, n_boot=settings.n_boot, seed=settings.bootstrap_seed
            )
        ]
        if pairs
        else []
    )
    sections += query_text_section(specs)
    return write_outputs(
        bench,
        split.evaluations,
        split.out,
        n_boot=settings.n_boot,
        seed=settings.bootstrap_seed,
        extra_sections=sections,
        plots=settings.plots,
        baseline=settings.baseline,
        paired=paired,
        breakdowns_by_run=breakdowns,
    )

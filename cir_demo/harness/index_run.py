"""`python -m cir_demo index build|status|list|prebuilt` runs here (its flags are parsed in index/cli.py):
above the index package because a build first makes the pre-run checks of preflight/ (flags,
weights, opt-ins, images) or prints its dry run, and only then encodes a corpus.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, field

from cir_demo.benchmarks.cli_args import BenchmarkChoice
from cir_demo.preflight.request import RunRequest


def _load_benchmark(choice: BenchmarkChoice, name: str | None = None):
    """The benchmark `choice` names (`name` in its place when given)."""
    return (dataclasses.replace(choice, name=name) if name else choice).load()


@dataclass(frozen=True)
class IndexBuild:
    """`index build`'s flags, typed: unpacked once by `build_settings`."""

    request: RunRequest  # the benchmark, the device, the remote-code opt-in, the image fetch
    retriever: str
    out_dir: str | None = None
    kind: str | None = None
    batch_size: int = 64
    progress: bool = True
    force: bool = False
    dry_run: bool = False
    sharded: bool = False
    shard_dir: str | None = None
    keep_shards: bool = False
    params: dict = field(default_factory=dict)  # the --kind parameters given (index.cli.index_params)
    memory_budget: int | None = None  # bytes
    index_uri: str | None = None  # a Milvus URI (--index-uri); None: a faiss index under --out-dir
    index_params: str | None = None  # --index-params (JSON), for a Milvus index


def build_settings(args: argparse.Namespace) -> IndexBuild:
    """`index build`'s flags, unpacked once; a ValueError (one line) for a parameter of another --kind
    or a budget that is not positive."""
    from cir_demo.images.cli import fetch_settings
    from cir_demo.index.cli import index_flags, index_params, memory_budget

    request = RunRequest(
        BenchmarkChoice.from_args(args),
        retrievers=args.retriever,
        device=args.device,
        trust_remote_code=bool(args.trust_remote_code),
        fetch_images=bool(args.fetch_images),
        fetch=fetch_settings(args),
    )
    index = index_flags(args)
    return IndexBuild(
        request,
        args.retriever,
        out_dir=args.out_dir,
        kind=args.kind,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        force=bool(args.force),
        dry_run=bool(args.dry_run),
        sharded=bool(args.sharded),
        shard_dir=args.shard_dir,
        keep_shards=bool(args.keep_shards),
        params=index_params(index),
        memory_budget=memory_budget(index),
        index_uri=index.index_uri,
        index_params=index.index_params,
    )


def _dry_run(build: IndexBuild, device: str | None) -> int:
    """What the build would download and encode, and how long it would take here; creates nothing."""
    from cir_demo.preflight.dry_run import dry_run, not_generated_note
    from cir_demo.preflight.run import model_lines

    request = build.request
    note = not_generated_note(request.benchmark)
    if note:
        print(note)
        return 0
    bench = _load_benchmark(request.benchmark)
    lines = model_lines([build.retriever], None, request.trust_remote_code, device)
    print(dry_run(request, bench, [build.retriever], None, 0, lines, batch_size=build.batch_size))
    return 1 if any(ln.blocking for ln in lines) else 0


def _build(build: IndexBuild) -> int:
    from cir_demo.preflight.run import check_run
    from cir_demo.retrievers.registry import load_retriever

    device = build.request.device
    ctx = None
    if build.sharded:
        from cir_demo.index.shard import distributed_context

        ctx = distributed_context()
        device = device or ctx.device
    if build.dry_run:
        return _dry_run(build, device)
    # weights, opt-ins and images before any long work
    bench = check_run(build.request, _load_benchmark(build.request.benchmark), [build.retriever])
    retriever = load_retriever(build.retriever, device=device, trust_remote_code=build.request.trust_remote_code)
    if build.index_uri:
        return _build_milvus(build, bench, retriever, ctx)
    common = dict(
        out_dir=build.out_dir,
        kind=build.kind,
        batch_size=build.batch_size,
        progress=build.progress,
        force=build.force,
        memory_budget=build.memory_budget,
        **build.params,
    )
    if build.sharded:
        from cir_demo.index.shard import build_sharded

        try:
            loaded = build_sharded(
                bench, retriever, context=ctx, shard_dir=build.shard_dir, keep_shards=build.keep_shards, **common
            )
        finally:
            ctx.close()
        if not ctx.is_main:
            return 0
    else:
        from cir_demo.index.build import build_corpus_index

        loaded = build_corpus_index(bench, retriever, **common)
    m = loaded.manifest
    print(
        f"{loaded.directory}: {m.kind} index of {m.count} images x {m.dim} dims, "
        f"built {m.built_at} in {m.build_seconds:.1f} s on {m.device}"
        + (f" across {m.num_shards} processes" if m.num_shards > 1 else "")
        + (f"; faiss {m.factory}, {m.choice}" if m.choice else "")
    )
    return 0


def _build_milvus(build: IndexBuild, bench, retriever, ctx) -> int:
    """`index build --index-uri`: the collection written (or found fresh) in Milvus, the corpus encoded
    here or, with --sharded, by every launched process."""
    common = dict(
        index_params=build.index_params,
        batch_size=build.batch_size,
        progress=build.progress,
        force=build.force,
        memory_budget=build.memory_budget,
    )
    if ctx is not None:
        from cir_demo.index.shard import build_sharded_milvus

        try:
            loaded = build_sharded_milvus(
                bench, retriever, build.index_uri, ctx, build.shard_dir, build.keep_shards, **common
            )
        finally:
            ctx.close()
        if not ctx.is_main:
            return 0
    else:
        from cir_demo.index.milvus_build import build_milvus_index

        loaded = build_milvus_index(bench, retriever, build.index_uri, **common)
    m = loaded.manifest
    state = (
        f"built in {m.build_seconds:.1f} s on {m.device}"
        + (f" across {m.num_shards} processes" if m.num_shards > 1 else "")
        if loaded.built
        else f"fresh (built {m.built_at}; not rebuilt)"
    )
    print(
        f"{loaded.location}: {m.params['index_type']} index of {m.count} images x {m.dim} dims, {state}; "
        f"search {m.params['search_params']}, {m.choice}"
    )
    return 0


def _status(request: RunRequest, verify: bool) -> int:
    from cir_demo.index.status import index_status, status_lines

    choice = request.benchmark
    rows = index_status(
        choice.name,
        request.retrievers,
        lambda name: _load_benchmark(choice, name),
        request.device,
        request.trust_remote_code,
        verify,
    )
    print("\n".join(status_lines(rows, choice.name)))
    return 1 if any(state in ("stale", "damaged") for _, state, _ in rows) else 0


def _list() -> int:
    from cir_demo.index.status import listing_lines

    print("\n".join(listing_lines()))
    return 0


@dataclass(frozen=True)
class PrebuiltSettings:
    """`index prebuilt`'s flags, typed: unpacked once by `prebuilt_settings`, which refuses a flag that
    goes with another one not given (`--rerun` without `--check`)."""

    benchmark: BenchmarkChoice  # --benchmark (default "world"), its loader flags and --limit
    retrievers: str | None = None  # comma-separated; None: the benchmark's defaults, as --eval runs them
    rerank: str | None = None  # the reranker backend ("none": off); None: the benchmark's default
    only: str | None = None  # "world", "embeddings" or "eval"; None: all three, in that order
    check: bool = False
    every: bool = False  # --all: with --check, the rows of every intent recomputed, not of a draw
    draw_seed: int | None = None
    sample: int | None = None  # intents drawn per split; None: the check's default
    rerun: bool = False
    in_data_folder: bool = False
    batch_size: int = 64
    progress: bool = True


def prebuilt_settings(args: argparse.Namespace) -> PrebuiltSettings:
    """`index prebuilt`'s flags, unpacked once; a ValueError (one line, naming the flags) for a flag
    given without the one it goes with."""
    settings = PrebuiltSettings(
        BenchmarkChoice.from_args(args, args.benchmark or "world"),
        retrievers=args.retrievers,
        rerank=args.rerank,
        only=args.only,
        check=bool(args.check),
        every=bool(args.all),
        draw_seed=args.draw_seed,
        sample=args.sample,
        rerun=bool(args.rerun),
        in_data_folder=bool(args.in_data_folder),
        batch_size=args.batch_size,
        progress=not args.no_progress,
    )
    if settings.rerun and not settings.check:
        raise ValueError("--rerun goes with --check (it checks the shipped --eval outputs by running --eval again)")
    if (settings.every or settings.draw_seed is not None or settings.sample is not None) and not settings.check:
        raise ValueError("--all, --draw-seed and --sample go with --check (they choose the intents it recomputes)")
    if settings.sample is not None and settings.sample < 1:
        raise ValueError(f"--sample {settings.sample}: draw at least 1 intent per split (--all: every one)")
    if settings.benchmark.limit and settings.only != "eval":
        raise ValueError("--limit goes with --only eval (corpus embeddings are always of the whole corpus)")
    return settings


def _prebuilt(settings: PrebuiltSettings) -> int:
    """Rebuild (or with --check, only check) what indexes/prebuilt/ commits: the corpus embeddings and
    the complete --eval outputs."""
    import contextlib

    from cir_demo.harness.prebuilt_run_build import empty_data_folder
    from cir_demo.preflight.request import default_reranker, retriever_names

    only = settings.only
    # built in an empty data folder: no cached score, feature or embedding can stand in for a computed one
    with empty_data_folder() if not (settings.check or settings.in_data_folder) else contextlib.nullcontext():
        bad = _prebuilt_world(settings) if only in (None, "world") else 0
        if only == "world":
            return 1 if bad else 0
        bench = _load_benchmark(settings.benchmark)
        names = retriever_names(settings.retrievers, bench.name)
        reranker = default_reranker(bench.name, settings.rerank)
        bad += _prebuilt_embeddings(settings, bench, names, reranker) if only != "eval" else 0
        if only != "embeddings":
            bad += _prebuilt_eval(settings, bench, names, reranker)
    return 1 if bad else 0


def _prebuilt_world(settings: PrebuiltSettings) -> int:
    """Write (unless --check) and check the world's shipped test part; written first: the embeddings and
    the --eval outputs are of the world it holds."""
    from datetime import datetime, timezone

    from cir_demo.index.prebuilt import code_version
    from cir_demo.world.pack import pack_world
    from cir_demo.world.shipped import shipped_problems, shipped_world_dir

    name, kwargs = settings.benchmark.name, settings.benchmark.kwargs
    if name != "world" or kwargs.get("root"):
        raise ValueError(
            "--only world: only the offline world generated from its size and seed (no --root) ships "
            f"its test part, not {name!r}" + (" at --root" if kwargs.get("root") else "")
        )
    size, seed = kwargs.get("size", "default"), kwargs.get("seed", 0)
    out = shipped_world_dir(size, seed)
    if not settings.check:
        pack_world(
            size,
            seed,
            out,
            {"code": code_version(), "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds")},
            progress=settings.progress,
        )
        print(f"wrote {out}")
    reasons = shipped_problems(out, size, seed)
    print(f"{'stale' if reasons else 'fresh':6s} world test part: {out}" + "".join(f"\n       - {x}" for x in reasons))
    return int(bool(reasons))


def _prebuilt_embeddings(settings: PrebuiltSettings, bench, names: list[str], reranker: str | None) -> int:
    """The corpus rows of the retrievers' image towers and of the reranker's image features (the world
    judge's, as int8 codes), which --eval would otherwise encode on a fresh clone."""
    from cir_demo.index.build import corpus_ids_of
    from cir_demo.index.prebuilt import image_encoder, prebuilt_dir, prebuilt_problems
    from cir_demo.index.prebuilt_build import build_prebuilt, slice_problems
    from cir_demo.rerank import load_reranker
    from cir_demo.retrievers.registry import load_retriever

    retrievers = [load_retriever(n, device="cpu") for n in names]
    if reranker:
        judge = load_reranker(reranker)
        if getattr(judge, "image_spec", None) and hasattr(judge, "encode_images"):  # as the engine shares them
            retrievers.append(judge)
    if not settings.check:
        for d in build_prebuilt(bench, retrievers, batch_size=settings.batch_size, progress=settings.progress):
            print(f"wrote {d}")
    ids, bad, sliced = corpus_ids_of(bench), 0, {}
    for r in retrievers:
        tower = image_encoder(r)
        if tower is None:
            print(f"{r.name}: no image_spec, nothing prebuilt")
            continue
        reasons = prebuilt_problems(prebuilt_dir(bench, tower), bench, tower, ids)
        if settings.check and not reasons:  # one re-encoded slice per image tower (the recipes share one)
            if tower.spec_hash() not in sliced:
                folder = prebuilt_dir(bench, tower)
                sliced[tower.spec_hash()] = slice_problems(bench, r, ids, folder, settings.batch_size)
            reasons = sliced[tower.spec_hash()]
        bad += bool(reasons)
        print(
            f"{'stale' if reasons else 'fresh':6s} {r.name}: {prebuilt_dir(bench, tower)}"
            + "".join(f"\n       - {x}" for x in reasons)
        )
    return bad


def _prebuilt_eval(settings: PrebuiltSettings, bench, names: list[str], reranker: str | None) -> int:
    from cir_demo.harness.prebuilt_run_build import build_shipped_run, check_shipped_run
    from cir_demo.index.prebuilt_run import shipped_dir

    if not settings.check:
        print(f"wrote {build_shipped_run(settings.benchmark, bench, names, reranker, settings.in_data_folder)}")
    from cir_demo.harness.shipped_check import CONTENT

    reasons = check_shipped_run(
        bench,
        names,
        reranker,
        rerun=settings.check and settings.rerun,
        recompute=settings.check,
        sample=0 if settings.every else settings.sample,
        seed=settings.draw_seed,
    )
    what = (
        ("byte-identical to --eval" if settings.rerun else "--eval outputs, every number recomputed")
        if settings.check and not reasons
        else "--eval outputs"
    )
    # a number that differs from its recomputation is said apart from outputs of other code (stale)
    state = "wrong" if any(r.startswith(CONTENT) for r in reasons) else ("stale" if reasons else "fresh")
    print(f"{state:6s} {what}: {shipped_dir(bench)}" + "".join(f"\n       - {x}" for x in reasons))
    return int(bool(reasons))


def run(args: argparse.Namespace) -> int:
    action = args.index_command
    if action is None:
        print("usage: python -m cir_demo index {build,status,list,prebuilt} ... (see --help)", file=sys.stderr)
        return 2
    from cir_demo.errors import report_errors
    from cir_demo.index.manifest import StaleIndexError
    from cir_demo.index.shard import ShardedBuildError
    from cir_demo.integrity import DamagedFileError
    from cir_demo.index.cli import index_flags
    from cir_demo.preflight.commands import index_problems, report
    from cir_demo.preflight.flags import GivenFlags

    # before any work: a wrong flag costs nothing and creates nothing
    problems = index_problems(GivenFlags.of({**vars(args), "command": "index"}), index_flags(args))
    if problems:
        return report(problems)
    actions = {
        "build": lambda: _build(build_settings(args)),
        "status": lambda: _status(
            RunRequest(
                BenchmarkChoice.from_args(args),
                retrievers=args.retriever,
                device=args.device,
                trust_remote_code=bool(args.trust_remote_code),
            ),
            bool(args.verify),
        ),
        "list": _list,
        "prebuilt": lambda: _prebuilt(prebuilt_settings(args)),
    }
    return report_errors(
        actions[action],
        debug=bool(args.debug),
        expected=(
            ValueError,
            KeyError,
            TypeError,
            ImportError,
            PermissionError,
            FileNotFoundError,
            StaleIndexError,
            ShardedBuildError,
            DamagedFileError,
        ),
    )

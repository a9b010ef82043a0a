"""`python -m cir_demo index build|status|list`: corpus indexes on disk.

    python -m cir_demo index build --benchmark world --retriever R [--kind flat|ivf|hnsw] [--force]
    accelerate launch --num_processes 4 -m cir_demo index build --sharded --benchmark B --retriever R
    python -m cir_demo index status [--benchmark B] [--retriever R]
    python -m cir_demo index list
    python -m cir_demo index prebuilt [--check]     # the committed indexes/prebuilt/ of the default world
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path



def _add_benchmark_args(p: argparse.ArgumentParser, required: bool) -> None:
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments

    add_benchmark_arguments(p, default=None, required=required, limit=False,
                            benchmark_help=None if required else "world, pinpoint, edir, circo or jsonl (default: every benchmark)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="index_command", metavar="ACTION")

    b = sub.add_parser("build", help="encode a benchmark's corpus and write its index (skipped when fresh)")
    _add_benchmark_args(b, required=True)
    b.add_argument("--retriever", required=True, help="retriever name (see `python -m cir_demo.retrievers` / docs)")
    b.add_argument("--kind", choices=["flat", "ivf", "hnsw"], default=None,
                   help="flat = exact inner product; ivf / hnsw = approximate, for ~1M images "
                        "(default: the kind of the index on disk, flat for a new one)")
    b.add_argument("--nlist", type=int, help="ivf: number of lists (default ~4 sqrt(n))")
    b.add_argument("--nprobe", type=int, help="ivf: lists visited per query (default nlist/8)")
    b.add_argument("--train-size", type=int, help="ivf: vectors used to train the lists (default 64 * nlist)")
    b.add_argument("--M", dest="M", type=int, help="hnsw: links per node (default 32)")
    b.add_argument("--ef-construction", type=int, help="hnsw: build-time beam (default 80)")
    b.add_argument("--ef-search", type=int, help="hnsw: search-time beam (default 128)")
    b.add_argument("--force", action="store_true", help="rebuild even when the index is fresh")
    b.add_argument("--batch-size", type=int, default=64, help="images per encoder call (default 64)")
    b.add_argument("--device", default=None, help="encoder device (default: cuda when available, else cpu)")
    b.add_argument("--trust-remote-code", action="store_true", help="allow retrievers that run model-repo code")
    b.add_argument("--out-dir", help="index folder (default indexes/<benchmark>/<retriever>)")
    b.add_argument("--no-progress", action="store_true", help="no progress bars")
    b.add_argument("--dry-run", action="store_true",
                   help="print what the build would download and encode, with a time estimate measured on a small "
                        "batch on this device; creates nothing")
    b.add_argument("--fetch-images", action="store_true",
                   help="download the benchmark's missing images first (as `python -m cir_demo images fetch`)")
    b.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    from cir_demo.images.cli import add_fetch_arguments

    add_fetch_arguments(b)
    s = b.add_argument_group("sharded encoding (run under `accelerate launch`)")
    s.add_argument("--sharded", action="store_true",
                   help="each launched process encodes one contiguous part of the corpus; rank 0 merges")
    s.add_argument("--shard-dir", help="where shards are written (must be shared across machines)")
    s.add_argument("--keep-shards", action="store_true", help="keep the shard files after merging")

    st = sub.add_parser("status", help="say which indexes are fresh and why the others are stale")
    _add_benchmark_args(st, required=False)
    st.add_argument("--retriever", help="only this retriever")
    st.add_argument("--device", default="cpu", help="device to load retrievers on for the check (default cpu)")
    st.add_argument("--trust-remote-code", action="store_true")
    st.add_argument("--verify", action="store_true",
                    help="also compare every file's sha256 with its manifest (default: sizes only, fast)")

    sub.add_parser("list", help="list the indexes on disk")

    pb = sub.add_parser("prebuilt", help="rebuild the prebuilt corpus embeddings committed in indexes/prebuilt/ "
                                         "(one per distinct image encoder of the benchmark's default retrievers)")
    _add_benchmark_args(pb, required=False)
    pb.add_argument("--retrievers", help="comma-separated retriever names (default: the benchmark's default "
                                         "retrievers, as `--eval` runs them)")
    pb.add_argument("--check", action="store_true",
                    help="only say whether the prebuilt files match the benchmark and the weights (exit 1 if not)")
    pb.add_argument("--batch-size", type=int, default=64, help="images per encoder call (default 64, as index builds)")
    pb.add_argument("--no-progress", action="store_true", help="no progress bar")


def _load_benchmark(args: argparse.Namespace, name: str | None = None):
    from cir_demo.benchmarks.cli_args import load_benchmark_from_args

    return load_benchmark_from_args(args, name)


def _index_params(args: argparse.Namespace) -> dict:
    names = {"ivf": {"nlist": "nlist", "nprobe": "nprobe", "train_size": "train_size"},
             "hnsw": {"M": "M", "efConstruction": "ef_construction", "efSearch": "ef_search"}}
    chosen = names.get(args.kind, {})
    wrong = [f"--{attr.replace('_', '-')}" for kind, table in names.items() if kind != args.kind
             for attr in table.values() if getattr(args, attr, None) is not None]
    if wrong:
        raise ValueError(f"{', '.join(wrong)} do(es) not apply to --kind {args.kind or '(not given)'}"
                         + ("; name the kind with --kind" if args.kind is None else ""))
    return {param: getattr(args, attr) for param, attr in chosen.items() if getattr(args, attr, None) is not None}


def _build(args: argparse.Namespace) -> int:
    from cir_demo.retrievers.registry import load_retriever

    params = _index_params(args)
    device = args.device
    ctx = None
    if args.sharded:
        from cir_demo.index.shard import distributed_context

        ctx = distributed_context()
        device = device or ctx.device
    if args.dry_run:
        from cir_demo.preflight.dry_run import world_not_generated_note

        note = world_not_generated_note(args)
        if note:
            print(note)
            return 0
    bench = _load_benchmark(args)
    if args.dry_run:
        from cir_demo.preflight.dry_run import dry_run
        from cir_demo.preflight.run import model_lines

        lines = model_lines([args.retriever], None, args.trust_remote_code, device)
        print(dry_run(args, bench, [args.retriever], None, 0, lines, batch_size=args.batch_size))
        return 1 if any(ln.blocking for ln in lines) else 0
    from cir_demo.preflight.run import check_run

    bench = check_run(args, bench, [args.retriever])  # weights, opt-ins and images before any long work
    retriever = load_retriever(args.retriever, device=device, trust_remote_code=args.trust_remote_code)
    common = dict(out_dir=args.out_dir, kind=args.kind, batch_size=args.batch_size,
                  progress=not args.no_progress, force=args.force, **params)
    if args.sharded:
        from cir_demo.index.shard import build_sharded

        try:
            loaded = build_sharded(bench, retriever, context=ctx, shard_dir=args.shard_dir,
                                   keep_shards=args.keep_shards, **common)
        finally:
            ctx.close()
        if not ctx.is_main:
            return 0
    else:
        from cir_demo.index.build import build_corpus_index

        loaded = build_corpus_index(bench, retriever, **common)
    m = loaded.manifest
    print(f"{loaded.directory}: {m.kind} index of {m.count} images x {m.dim} dims, "
          f"built {m.built_at} in {m.build_seconds:.1f} s on {m.device}"
          + (f" across {m.num_shards} processes" if m.num_shards > 1 else ""))
    return 0


def _status(args: argparse.Namespace) -> int:
    from cir_demo.index.manifest import StaleIndexError, check_index, list_indexes, load_index, read_manifest
    from cir_demo.integrity import DamagedFileError

    dirs = list_indexes()
    rows = []
    for d in dirs:
        try:
            m = read_manifest(d)
        except (OSError, ValueError, TypeError) as exc:
            rows.append((d, "damaged", [f"damaged: {d / 'manifest.json'}: unreadable ({exc})"]))
            continue
        if (args.benchmark and m.benchmark != args.benchmark) or (args.retriever and m.retriever != args.retriever):
            continue
        notes = []
        bench = retriever = None
        try:
            bench = _load_benchmark(args, m.benchmark)
        except Exception as exc:  # report and keep going: status must cover every index
            notes.append(f"cannot check the corpus: {type(exc).__name__}: {exc}")
        damaged_weights: list[str] = []
        try:
            from cir_demo.retrievers.registry import load_retriever

            retriever = load_retriever(m.retriever, device=args.device, trust_remote_code=args.trust_remote_code)
        except DamagedFileError as exc:
            damaged_weights = exc.problems
        except Exception as exc:
            notes.append(f"cannot check the retriever: {type(exc).__name__}: {exc}")
        from cir_demo.index.build import corpus_fingerprint

        reasons = damaged_weights + check_index(d, retriever, None if bench is None else list(bench.corpus_ids),
                                                None if bench is None else corpus_fingerprint(bench), verify=args.verify)
        if not reasons and (args.verify or not m.files):  # read it whole: what no record covers
            try:
                load_index(d, allow_stale=True)
            except StaleIndexError as exc:
                reasons = exc.reasons
        damaged = any(r.startswith(("damaged", "missing")) for r in reasons)
        state = "damaged" if damaged else "stale" if reasons else ("unchecked" if notes else "fresh")
        rows.append((d, state, reasons + notes))
    if not rows:
        print("no indexes found" + (f" for benchmark {args.benchmark!r}" if args.benchmark else ""))
        return 0
    for d, state, reasons in rows:
        print(f"{state:9s} {d}")
        for r in reasons:
            print(f"          - {r}")
    return 1 if any(state in ("stale", "damaged") for _, state, _ in rows) else 0


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def _list(args: argparse.Namespace) -> int:
    from cir_demo.index.manifest import list_indexes, read_manifest
    from cir_demo.paths import indexes_dir

    dirs = list_indexes()
    if not dirs:
        print(f"no indexes under {indexes_dir()}")
        return 0
    header = f"{'benchmark':16s} {'retriever':28s} {'kind':5s} {'images':>8s} {'dim':>5s} {'MB':>8s}  built"
    print(header)
    for d in dirs:
        try:
            m = read_manifest(d)
        except (OSError, ValueError, TypeError) as exc:
            print(f"{d}: unreadable manifest: {exc}")
            continue
        print(f"{m.benchmark:16s} {m.retriever:28s} {m.kind:5s} {m.count:8d} {m.dim:5d} "
              f"{_dir_size(d) / 2**20:8.1f}  {m.built_at}")
    return 0


def _prebuilt(args: argparse.Namespace) -> int:
    from cir_demo.harness.pipeline import retriever_names
    from cir_demo.index.build import corpus_ids_of
    from cir_demo.index.prebuilt import image_encoder, prebuilt_dir, prebuilt_problems, build_prebuilt
    from cir_demo.retrievers.registry import load_retriever

    args.benchmark = args.benchmark or "world"
    bench = _load_benchmark(args)
    names = retriever_names(args.retrievers, bench.name)
    retrievers = [load_retriever(n, device="cpu") for n in names]
    if not args.check:
        for d in build_prebuilt(bench, retrievers, batch_size=args.batch_size, progress=not args.no_progress):
            print(f"wrote {d}")
    ids, bad = corpus_ids_of(bench), 0
    for r in retrievers:
        tower = image_encoder(r)
        if tower is None:
            print(f"{r.name}: no image_spec, nothing prebuilt")
            continue
        reasons = prebuilt_problems(prebuilt_dir(bench, tower), bench, tower, ids)
        bad += bool(reasons)
        print(f"{'stale' if reasons else 'fresh':6s} {r.name}: {prebuilt_dir(bench, tower)}"
              + "".join(f"\n       - {x}" for x in reasons))
    return 1 if bad else 0


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "index_command", None)
    if action is None:
        print("usage: python -m cir_demo index {build,status,list,prebuilt} ... (see --help)", file=sys.stderr)
        return 2
    from cir_demo.checks import benchmark_flag_problems, data_folder_problems, index_build_problems, report
    from cir_demo.errors import report_errors
    from cir_demo.index.manifest import StaleIndexError
    from cir_demo.index.shard import ShardedBuildError
    from cir_demo.integrity import DamagedFileError

    # before any work: a wrong flag costs nothing and creates nothing
    problems = index_build_problems(args) if action == "build" else data_folder_problems() + (
        benchmark_flag_problems(args) if action in ("status", "prebuilt") else [])
    if problems:
        return report(problems)
    return report_errors(lambda: {"build": _build, "status": _status, "list": _list, "prebuilt": _prebuilt}[action](args),
                         debug=getattr(args, "debug", False),
                         expected=(ValueError, KeyError, TypeError, ImportError, PermissionError, FileNotFoundError,
                                   StaleIndexError, ShardedBuildError, DamagedFileError))

"""What `index status` and `index list` report: each index on disk, fresh or why not, and a table
of them all. The benchmark and retriever an index was built from are loaded to compare."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

# (index folder, "fresh" | "stale" | "damaged" | "unchecked", reasons and notes)
StatusRow = tuple[Path, str, list[str]]


def index_status(
    benchmark: str | None,
    retriever: str | None,
    load_benchmark: Callable,
    device: str,
    trust_remote_code: bool = False,
    verify: bool = False,
) -> list[StatusRow]:
    """One row per index on disk (only `benchmark`'s / `retriever`'s when given); a manifest that
    cannot be read is a damaged row. `load_benchmark(name)` loads the benchmark an index names."""
    from cir_demo.index.manifest import list_indexes, read_manifest

    rows = []
    for d in list_indexes():
        try:
            m = read_manifest(d)
        except (OSError, ValueError, TypeError) as exc:
            rows.append((d, "damaged", [f"damaged: {d / 'manifest.json'}: unreadable ({exc})"]))
            continue
        if (benchmark and m.benchmark != benchmark) or (retriever and m.retriever != retriever):
            continue
        rows.append((d, *_state(d, m, load_benchmark, device, trust_remote_code, verify)))
    return rows


def _state(
    d: Path, m, load_benchmark: Callable, device: str, trust_remote_code: bool, verify: bool
) -> tuple[str, list[str]]:
    from cir_demo.index.build import corpus_fingerprint
    from cir_demo.index.manifest import StaleIndexError, check_index, load_index
    from cir_demo.integrity import DamagedFileError

    notes = []
    bench = retriever = None
    try:
        bench = load_benchmark(m.benchmark)
    except Exception as exc:  # report and keep going: status must cover every index
        notes.append(f"cannot check the corpus: {type(exc).__name__}: {exc}")
    damaged_weights: list[str] = []
    try:
        from cir_demo.retrievers.registry import load_retriever

        retriever = load_retriever(m.retriever, device=device, trust_remote_code=trust_remote_code)
    except DamagedFileError as exc:
        damaged_weights = exc.problems
    except Exception as exc:
        notes.append(f"cannot check the retriever: {type(exc).__name__}: {exc}")
    reasons = damaged_weights + check_index(
        d,
        retriever,
        None if bench is None else list(bench.corpus_ids),
        None if bench is None else corpus_fingerprint(bench),
        verify=verify,
    )
    if not reasons and (verify or not m.files):  # read it whole: what no record covers
        try:
            load_index(d, allow_stale=True)
        except StaleIndexError as exc:
            reasons = exc.reasons
    damaged = any(r.startswith(("damaged", "missing")) for r in reasons)
    state = "damaged" if damaged else "stale" if reasons else ("unchecked" if notes else "fresh")
    return state, reasons + notes


def status_lines(rows: list[StatusRow], benchmark: str | None) -> list[str]:
    if not rows:
        return ["no indexes found" + (f" for benchmark {benchmark!r}" if benchmark else "")]
    out = []
    for d, state, reasons in rows:
        out.append(f"{state:9s} {d}")
        out += [f"          - {r}" for r in reasons]
    return out


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def listing_lines() -> list[str]:
    """`index list`: one line per index on disk (benchmark, retriever, kind, size, when built)."""
    from cir_demo.index.manifest import list_indexes, read_manifest
    from cir_demo.paths import indexes_dir

    dirs = list_indexes()
    if not dirs:
        return [f"no indexes under {indexes_dir()}"]
    out = [f"{'benchmark':16s} {'retriever':28s} {'kind':8s} {'images':>8s} {'dim':>5s} {'MB':>8s}  built"]
    for d in dirs:
        try:
            m = read_manifest(d)
        except (OSError, ValueError, TypeError) as exc:
            out.append(f"{d}: unreadable manifest: {exc}")
            continue
        out.append(
            f"{m.benchmark:16s} {m.retriever:28s} {m.kind:8s} {m.count:8d} {m.dim:5d} "
            f"{_dir_size(d) / 2**20:8.1f}  {m.built_at}"
        )
    return out

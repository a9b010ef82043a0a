"""Encode a benchmark's corpus with a retriever and write its index atomically.

`build_corpus_index` skips the work when the index on disk is fresh (same
retriever spec, weights, corpus, kind and parameters); otherwise it encodes the
corpus in batches (`corpus_encode.py`; tqdm bar; the retriever's device, CUDA when it has one),
reusing embeddings kept for its image tower (`embedding_cache.py`), builds the faiss index, writes index + ids.json + manifest.json into a hidden
directory beside the target and swaps it in. An interrupted build (exception,
Ctrl-C, crash) leaves the previous index as it was.

`ensure_index` is what the app and the harness call: load when fresh, build on
first use or when stale.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np

from cir_demo.index.manifest import (
    IndexManifest,
    LoadedIndex,
    MissingIndexError,
    StaleIndexError,
    _project_folder,
    benchmark_index_name,
    build_lock,
    check_index,
    corpus_checksum,
    corpus_fingerprint,
    index_code,
    index_dir,
    library_versions,
    load_index,
    new_dir_beside,
    read_manifest,
    refuse_foreign,
    replace_dir,
    weights_checksum,
    write_index_files,
)
from cir_demo.index.corpus_encode import corpus_ids_of, require_encoder, say
from cir_demo.index.embedding_cache import cached_encode_corpus


def default_index_dir(benchmark, retriever) -> Path:
    """`indexes/<benchmark index name>/<retriever>/`: where `ensure_index` keeps this pair's index."""
    return index_dir(benchmark_index_name(benchmark), retriever.name)


def make_manifest(
    benchmark,
    retriever,
    ids: Sequence[str],
    kind: str,
    params: dict,
    build_seconds: float,
    num_shards: int = 1,
    choice: str | None = None,
) -> IndexManifest:
    from cir_demo.index.kinds import factory_string

    spec = dict(retriever.spec)
    return IndexManifest(
        benchmark=benchmark.name,
        retriever=retriever.name,
        retriever_spec=spec,
        spec_hash=retriever.spec_hash(),
        weights_sha256=weights_checksum(spec),
        corpus_sha256=corpus_checksum(ids),
        dim=int(retriever.dim),
        count=len(ids),
        kind=kind,
        params=dict(params),
        library_versions=library_versions(),
        built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        build_seconds=round(float(build_seconds), 3),
        corpus_fingerprint=corpus_fingerprint(benchmark),
        device=str(getattr(retriever, "device", None)),
        num_shards=int(num_shards),
        factory=factory_string(kind, params),
        choice=choice,
        provenance={"index_code": index_code()},
    )


def write_built_index(
    xb: np.ndarray, ids: Sequence[str], out_dir: Path, manifest: IndexManifest, started: float | None = None
) -> LoadedIndex:
    """Build the faiss index of `xb`, write it beside `out_dir` and swap it in; returns it loaded."""
    from cir_demo.index.faiss_index import build_index

    index = build_index(xb, manifest.kind, **manifest.params)
    if started is not None:
        manifest.build_seconds = round(time.perf_counter() - started, 3)
    refuse_foreign(out_dir)
    with new_dir_beside(out_dir) as tmp:
        write_index_files(tmp, index, ids, manifest)
        if not _project_folder(out_dir) and out_dir.is_dir():  # a folder the user named: the earlier one kept
            from cir_demo.utils.owned_folder import set_aside

            set_aside(out_dir)
        from cir_demo.utils.owned_folder import kill_point

        kill_point("in")
        replace_dir(tmp, out_dir)
    return LoadedIndex(manifest=manifest, index=index, ids=list(ids), directory=out_dir)


AUTO = "auto"  # the kind `choose_index` picks from the corpus size, the dimension and the memory budget


def requested_params(
    kind: str | None, n: int, d: int, params: dict, memory_budget: int | None = None
) -> tuple[str, dict, str]:
    """(kind, full parameters, how the kind was chosen) of a build request. kind "auto" (or None)
    is `choose_index`'s choice, `params` overriding its parameters; "requested" otherwise."""
    from cir_demo.index.choose import choose_index
    from cir_demo.index.kinds import resolve_params

    if kind in (None, AUTO):
        choice = choose_index(n, d, memory_budget)
        kept = {k: v for k, v in choice.params.items() if k == "refine_bits"}  # what the budget decided
        return choice.kind, resolve_params(choice.kind, n, d, **{**kept, **params}), f"auto: {choice.reason}"
    return kind, resolve_params(kind, n, d, **params), "requested"


def rebuild_reasons(
    out_dir: Path,
    benchmark,
    retriever,
    ids: Sequence[str],
    kind: str | None,
    params: dict,
    memory_budget: int | None = None,
) -> list[str]:
    """Staleness reasons plus a changed kind/parameter request ([] = reuse the index on disk).

    kind=None accepts whatever kind is on disk (the app must not undo a CLI-built HNSW index);
    kind="auto" asks for what `choose_index` picks for this corpus.
    """
    # sha256 of every file, not only sizes: serving a silently damaged index would be worse than
    # the ~0.1 s per 50 MB this costs
    reasons = check_index(out_dir, retriever, ids, corpus_fingerprint(benchmark), verify=True)
    if reasons or (kind is None and not params):
        return reasons
    manifest = read_manifest(out_dir)
    want_kind, want, _ = requested_params(kind or manifest.kind, len(ids), int(retriever.dim), params, memory_budget)
    if manifest.kind != want_kind:
        return [f"kind changed: index is {manifest.kind!r}, requested {want_kind!r}"]
    if manifest.params != want:
        return [f"parameters changed: index has {manifest.params}, requested {want}"]
    return []


def chosen_automatically(manifest: IndexManifest) -> bool:
    """Whether an index's kind was `choose_index`'s (a flat index from before kinds were chosen
    counts: flat was the default then; any other kind was asked for)."""
    if manifest.choice is None:
        return manifest.kind == "flat"
    return manifest.choice.startswith(AUTO)


def plan_rebuild(
    out_dir: Path, kind: str | None, n: int, d: int, params: dict, memory_budget: int | None = None
) -> tuple[str, dict, str]:
    """Kind, full parameters and choice of a rebuild. kind=None keeps a kind asked for on the index
    on disk (and its parameters, where they still fit the corpus); otherwise, and for a new index,
    `choose_index` chooses again."""
    if kind is not None:
        return requested_params(kind, n, d, params, memory_budget)
    try:
        prior = read_manifest(out_dir)
    except (OSError, ValueError, TypeError):
        return requested_params(AUTO, n, d, params, memory_budget)
    from cir_demo.index.kinds import INDEX_KINDS

    if chosen_automatically(prior) or prior.kind not in INDEX_KINDS:
        return requested_params(AUTO, n, d, params, memory_budget)
    try:
        return requested_params(prior.kind, n, d, {**prior.params, **params})
    except ValueError:  # e.g. an nlist too large for a shrunken corpus: that kind's defaults
        return requested_params(prior.kind, n, d, params)


def build_corpus_index(
    benchmark,
    retriever,
    out_dir: str | Path | None = None,
    kind: str | None = AUTO,
    batch_size: int = 64,
    progress: bool = True,
    force: bool = False,
    memory_budget: int | None = None,
    **params,
) -> LoadedIndex:
    """The index of `benchmark`'s corpus under `retriever`, built unless a fresh one exists.

    `out_dir` defaults to `indexes/<benchmark>/<retriever>/`. `kind` is "auto" (`choose_index`:
    flat, exact, for every corpus up to 250,000 images), or a kind of `kinds.py` with its params;
    kind=None keeps the kind already on disk. `memory_budget` (bytes) bounds what "auto" picks
    (default: half the machine's memory). `force` rebuilds even a fresh index.
    """
    require_encoder(retriever)
    ids = corpus_ids_of(benchmark)
    out_dir = Path(out_dir) if out_dir is not None else default_index_dir(benchmark, retriever)
    refuse_foreign(out_dir)  # before any encoding: the build replaces the folder as a whole
    if memory_budget is None:
        from cir_demo.index.choose import default_memory_budget

        memory_budget = default_memory_budget()
    # Validate the request before any encoding (a typo must not cost an hour).
    if kind is not None:
        requested_params(kind, max(len(ids), 1), int(retriever.dim), params, memory_budget)
    with build_lock(out_dir):
        reasons = [] if force else rebuild_reasons(out_dir, benchmark, retriever, ids, kind, params, memory_budget)
        if not force and not reasons:
            try:
                return load_index(out_dir, retriever, ids, corpus_fingerprint=corpus_fingerprint(benchmark))
            except StaleIndexError as exc:  # damage the size check cannot see (e.g. bytes flipped)
                reasons = exc.reasons
        if reasons and not reasons[0].startswith("missing: no index"):
            say(f"index {out_dir}: rebuilding from the corpus ({'; '.join(reasons)[:500]})")
        kind, resolved, choice = plan_rebuild(out_dir, kind, len(ids), int(retriever.dim), params, memory_budget)
        started = time.perf_counter()
        xb = cached_encode_corpus(benchmark, ids, retriever, batch_size=batch_size, progress=progress)
        manifest = make_manifest(benchmark, retriever, ids, kind, resolved, 0.0, choice=choice)
        return write_built_index(xb, ids, out_dir, manifest, started)


def ensure_index(benchmark, retriever, allow_stale: bool = False, index_uri: str | None = None, **kw) -> LoadedIndex:
    """Load the fresh index of (benchmark, retriever), building it on first use or when stale.

    With allow_stale=True a stale index on disk is served as is (its
    `stale_reasons` say what is off) instead of being rebuilt; a missing one is
    still built. kind defaults to None here: any kind on disk is accepted.
    `index_uri`: the index lives in Milvus there instead (`milvus_build`; None: faiss on disk).
    """
    if index_uri:
        from cir_demo.index.milvus_build import build_milvus_index

        keep = ("batch_size", "progress", "force", "memory_budget", "index_params")
        return build_milvus_index(
            benchmark, retriever, index_uri, allow_stale=allow_stale, **{k: v for k, v in kw.items() if k in keep}
        )
    kw.setdefault("kind", None)
    if allow_stale:
        out_dir = Path(kw.get("out_dir") or default_index_dir(benchmark, retriever))
        try:
            return load_index(
                out_dir,
                retriever,
                list(benchmark.corpus_ids),
                allow_stale=True,
                corpus_fingerprint=corpus_fingerprint(benchmark),
            )
        except MissingIndexError:
            pass
        except StaleIndexError as exc:  # damaged files: rebuild
            say(f"index {out_dir}: rebuilding from the corpus ({'; '.join(exc.reasons)[:500]})")
            kw["force"] = True
    return build_corpus_index(benchmark, retriever, **kw)

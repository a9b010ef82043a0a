"""The index kind `milvus`: a benchmark's corpus index in a Milvus collection (`--index-uri`),
served behind the same seam as a faiss index (`LoadedIndex.search`).

One alias per (benchmark, retriever spec) serves one collection; the collection's properties
hold the index manifest (`IndexManifest`, kind "milvus": spec hash, weights sha256, corpus
checksum, row count, index type with its build and search parameters, the code key) and its
state ("building" until every row is in, indexed and loaded, then "complete"). A build writes a
new collection named by what it is built from and then moves the alias, so readers never see a
half-built index and a build killed midway leaves the old one serving; the next build of the same
thing finds its collection and inserts from the first missing row on.

Staleness as for faiss (`manifest.stale_reasons`): a changed corpus or weights rebuild the
collection (the outdated one of the same spec and code is dropped once the alias has moved). A
collection built by other code, for another spec or with another dimension is refused, never
dropped, unless `force`: another version of this project may be serving from it. Nothing but the
alias and the collections named after it is touched.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from cir_demo.index import milvus_store as store
from cir_demo.index.manifest import IndexManifest, LoadedIndex, corpus_checksum, stale_reasons, weights_checksum
from cir_demo.index.milvus_store import MilvusIndexError, MilvusTarget

KIND = "milvus"
MANIFEST_KEY = "cir_demo.manifest"
STATE_KEY = "cir_demo.state"
BUILDING, COMPLETE = "building", "complete"
# stale reasons of a collection another version of the project (or another spec) built: refused unless --force
REFUSED = (
    "retriever changed",
    "retriever spec changed",
    "dim mismatch",
    "index code changed",
    "index kind",
    "index parameters",
    "manifest format",
    "library major version change",
)


def milvus_code() -> dict:
    """The code key of a Milvus collection: the one module that lays out, indexes and searches its rows
    (`milvus_store`, its code without docstrings) and the libraries it writes them with. Not the
    modules it reaches, as faiss's key is: a collection on a shared cluster is refused, not rebuilt,
    when this differs, so an unrelated change must not refuse it."""
    from cir_demo.utils.code_hash import code_text
    from cir_demo.utils.versions import library_versions

    digest = hashlib.sha256(code_text(Path(store.__file__)))
    return {"sha256": digest.hexdigest(), "libraries": library_versions("numpy", "pymilvus")}


def _pymilvus_major() -> str | None:
    from cir_demo.utils.versions import library_versions

    v = library_versions("pymilvus")["pymilvus"]
    return None if v is None else str(v).split(".")[0]


def milvus_param_reasons(manifest: IndexManifest) -> list[str]:
    """ "index parameters invalid" for a milvus manifest whose parameters this version cannot serve."""
    p = manifest.params
    if not isinstance(p.get("search_params"), dict) or p.get("index_type") not in store.INDEX_TYPES:
        return [f"index parameters invalid: {json.dumps(p)[:200]}"]
    return []


def milvus_stale_reasons(manifest: IndexManifest, retriever, ids: Sequence[str] | None, fingerprint) -> list[str]:
    """`stale_reasons` of a collection's manifest, with its code key and the pymilvus major version."""
    reasons = stale_reasons(manifest, retriever, ids, fingerprint)
    built = (manifest.provenance.get("index_code") or {}).get("sha256")
    running = milvus_code()["sha256"]
    if built != running:
        reasons.append(f"index code changed: built by {str(built)[:12]}, running {running[:12]}")
    old, now = str(manifest.library_versions.get("pymilvus") or "").split(".")[0] or None, _pymilvus_major()
    if old and now and old != now:
        reasons.append(f"library major version change: pymilvus {manifest.library_versions['pymilvus']} -> {now}.x")
    return reasons


# --------------------------------------------------------------------------- loaded
@dataclass
class MilvusLoadedIndex(LoadedIndex):
    """A collection served through its alias: searched on the server, ids mapped from positions."""

    target: MilvusTarget | None = None
    client: Any = None
    collection: str = ""
    alias: str = ""
    built: bool = False  # this call built (or finished) it; False: a fresh collection was reused

    @property
    def location(self) -> str:
        return f"Milvus at {self.target.shown}, collection {self.collection} (alias {self.alias})"

    def search_arrays(self, xq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return store.search(
            self.client, self.target, self.collection, xq, k, self.manifest.params["search_params"], self.manifest.dim
        )


def read_collection_manifest(client, target: MilvusTarget, name: str) -> tuple[IndexManifest | None, str]:
    """(manifest, state) a collection's properties hold; (None, "") for one this project did not build."""
    info = store.calling(target, f"describing collection {name}", client.describe_collection, name)
    props = info.get("properties") or {}
    if MANIFEST_KEY not in props:
        return None, ""
    try:
        manifest = IndexManifest.from_dict(json.loads(props[MANIFEST_KEY]), source=f"collection {name}")
    except (ValueError, TypeError):
        return None, ""
    return (manifest, str(props.get(STATE_KEY, ""))) if manifest.kind == KIND else (None, "")


def serving_collection(client, target: MilvusTarget, alias: str, force: bool) -> str | None:
    """The collection `alias` points to; None when there is none. A collection that bears the alias's
    own name is not this project's: refused, or with `force` dropped (the alias needs the name)."""
    aliases = store.calling(target, "listing aliases", client.list_aliases)
    if alias in (aliases.get("aliases") or []):
        return store.calling(target, f"reading alias {alias}", client.describe_alias, alias)["collection_name"]
    if store.calling(target, f"looking up {alias}", client.has_collection, alias):
        if not force:
            raise MilvusIndexError(
                f"Milvus at {target.shown}: collection {alias} was not built by cir_demo; refusing to replace it "
                "(--force drops it)"
            )
        store.calling(target, f"dropping {alias}", client.drop_collection, alias)
    return None


def load_collection(
    client, target, alias: str, name: str, manifest: IndexManifest, ids: Sequence[str] | None, reasons=(), built=False
) -> MilvusLoadedIndex:
    """A collection as a loaded index: its rows counted against the manifest, its ids the corpus's when
    their checksum is the manifest's, else read from the collection (and checked)."""
    store.calling(target, f"loading collection {name}", client.load_collection, name)
    count = store.row_count(client, target, name)
    if count != manifest.count:
        raise MilvusIndexError(
            f"Milvus at {target.shown}: collection {name} holds {count} rows, its manifest says {manifest.count}; "
            "rebuild it with index build --force"
        )
    if ids is None or corpus_checksum(ids) != manifest.corpus_sha256:
        ids = store.read_ids(client, target, name, count)
        if corpus_checksum(ids) != manifest.corpus_sha256:
            raise MilvusIndexError(
                f"Milvus at {target.shown}: the ids in collection {name} do not match its manifest's corpus "
                "checksum; rebuild it with index build --force"
            )
    return MilvusLoadedIndex(
        manifest=manifest,
        index=None,
        ids=list(ids),
        stale_reasons=list(reasons),
        target=target,
        client=client,
        collection=name,
        alias=alias,
        built=built,
    )


# --------------------------------------------------------------------------- build
def _requested_changes(manifest: IndexManifest, request: dict) -> list[str]:
    """What an explicit --index-params asks that the serving collection does not have."""
    p = manifest.params
    out = []
    if "index_type" in request and request["index_type"] != p.get("index_type"):
        out.append(f"index type changed: collection is {p.get('index_type')}, requested {request['index_type']}")
    for key in ("params", "search_params"):
        differ = {k: v for k, v in (request.get(key) or {}).items() if p.get(key, {}).get(k) != v}
        if differ:
            out.append(f"{key} changed: requested {differ}")
    return out


def _build_key(retriever, ids: Sequence[str], fingerprint, types: Sequence[str], request: dict) -> str:
    blob = json.dumps(
        [retriever.spec_hash(), weights_checksum(dict(retriever.spec)), corpus_checksum(ids), fingerprint]
        + [milvus_code()["sha256"], list(types), request],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _manifest(benchmark, retriever, ids, types, why: str, request: dict, name: str, key: str) -> IndexManifest:
    from cir_demo.index.build import make_manifest
    from cir_demo.utils.versions import library_versions

    m = make_manifest(benchmark, retriever, ids, "flat", {}, 0.0)
    m.kind, m.factory = KIND, None
    m.params = {"index_type": types[0], "metric_type": store.METRIC, "params": {}, "search_params": {}}
    m.choice = why if "index_type" not in request else "requested"
    m.library_versions = library_versions("pymilvus", "numpy", "torch", "cir_demo")
    m.provenance = {"index_code": milvus_code(), "collection": name, "build_key": key}
    return m


def _put_manifest(client, target, name: str, manifest: IndexManifest, state: str) -> None:
    props = {MANIFEST_KEY: json.dumps(manifest.to_dict(), sort_keys=True), STATE_KEY: state}
    store.calling(target, f"writing the manifest of {name}", client.alter_collection_properties, name, props)


def _resume_from(client, target, name: str, key: str, dim: int, force: bool) -> tuple[IndexManifest | None, int]:
    """(manifest, first row to insert) of an earlier, killed build of collection `name`; (None, 0) when
    there is none (or it was dropped to start over: it is ours, and holds no usable prefix)."""
    if not store.calling(target, f"looking up {name}", client.has_collection, name):
        return None, 0
    manifest, state = read_collection_manifest(client, target, name)
    ours = manifest is not None and manifest.provenance.get("build_key") == key
    if not ours and not force:
        raise MilvusIndexError(
            f"Milvus at {target.shown}: collection {name} was built by other code or for another spec; "
            "refusing to replace it (--force drops it)"
        )
    have = store.vector_dim(client, target, name)
    if ours and have != dim and not force:
        raise MilvusIndexError(
            f"Milvus at {target.shown}: dimension mismatch: collection {name} holds {have}-d vectors, the "
            f"retriever gives {dim}-d; refusing to replace it (--force drops it)"
        )
    resumable = ours and have == dim and not (force and state == COMPLETE)  # --force: a whole one is built again
    if resumable and "index_type" in manifest.params and manifest.params.get("search_params") is not None:
        store.calling(target, f"loading {name}", client.load_collection, name)  # released by a restart
        done = store.row_count(client, target, name)
        if done == 0 or store.row_count(client, target, name, below=done) == done:  # rows 0..done-1, no gap
            return manifest, done
    store.calling(target, f"dropping {name}", client.drop_collection, name)
    return None, 0


def write_collection(
    client, target, name: str, xb: np.ndarray, ids, manifest: IndexManifest, types, request, force, progress, started
) -> IndexManifest:
    """Create (or resume) collection `name`, insert every row, index and load it, and mark it complete."""
    key = manifest.provenance["build_key"]
    prior, start = _resume_from(client, target, name, key, xb.shape[1], force)
    if prior is None:
        store.create_collection(
            client, target, name, xb.shape[1], {MANIFEST_KEY: json.dumps(manifest.to_dict()), STATE_KEY: BUILDING}
        )
        index_type, build, search = store.create_vector_index(client, target, name, types, len(ids), request)
        manifest.params.update(index_type=index_type, params=build, search_params=search)
        manifest.factory = f"milvus {index_type} {json.dumps(build, sort_keys=True)}"
        _put_manifest(client, target, name, manifest, BUILDING)
    else:
        from cir_demo.index.corpus_encode import say

        manifest.params, manifest.factory = prior.params, prior.factory
        if start < len(ids):
            say(f"Milvus at {target.shown}: resuming the build of {name} at row {start:,} of {len(ids):,}")
    store.insert_rows(client, target, name, xb, ids, start, progress)
    store.calling(target, f"flushing {name}", client.flush, name)
    store.wait_indexed(client, target, name, len(ids))
    store.calling(target, f"loading {name}", client.load_collection, name)
    count = store.row_count(client, target, name)
    if count != len(ids):
        raise MilvusIndexError(
            f"Milvus at {target.shown}: collection {name} holds {count} rows after the build, not {len(ids)}"
        )
    manifest.build_seconds = round(time.perf_counter() - started, 3)
    _put_manifest(client, target, name, manifest, COMPLETE)
    return manifest


def move_alias(client, target, alias: str, name: str, exists: bool) -> None:
    what = f"pointing alias {alias} at {name}"
    store.calling(target, what, client.alter_alias if exists else client.create_alias, name, alias)


def build_milvus_index(
    benchmark,
    retriever,
    uri: str,
    index_params: str | dict | None = None,
    batch_size: int = 64,
    progress: bool = True,
    force: bool = False,
    memory_budget: int | None = None,
    allow_stale: bool = False,
    embeddings: np.ndarray | Callable[[], np.ndarray] | None = None,
    num_shards: int = 1,
) -> MilvusLoadedIndex:
    """The Milvus index of `benchmark`'s corpus under `retriever` at `uri`, built unless a fresh one is
    served (see the module doc). `index_params`: `--index-params` (JSON). `embeddings`: the corpus rows
    (or what returns them, called only when a build is needed: a sharded encoding), else they are
    encoded (or read from the embedding cache)."""
    from cir_demo.index.corpus_encode import corpus_ids_of, require_encoder
    from cir_demo.index.manifest import benchmark_index_name, corpus_fingerprint

    require_encoder(retriever)
    ids = corpus_ids_of(benchmark)
    target, request = store.parse_uri(uri), store.index_request(index_params)
    long_ids = [i for i in ids if len(i) > store.MAX_ID_CHARS]
    if long_ids:
        raise ValueError(f"corpus id {long_ids[0][:60]!r}... is longer than {store.MAX_ID_CHARS} characters (Milvus)")
    client = store.connect(target)
    alias = store.alias_name(benchmark_index_name(benchmark), retriever.name, retriever.spec_hash())
    fingerprint = corpus_fingerprint(benchmark)
    serving = serving_collection(client, target, alias, force)
    if serving is not None:
        old, state = read_collection_manifest(client, target, serving)
        reasons = _served_reasons(old, state, serving, retriever, ids, fingerprint)
        changes = [] if old is None else _requested_changes(old, request)
        if not force and not changes and (not reasons or allow_stale) and state == COMPLETE:
            try:
                return load_collection(client, target, alias, serving, old, ids, reasons)
            except MilvusIndexError as exc:  # rows lost or ids changed: built again
                reasons.append(f"damaged: {exc}")
        _refuse_foreign(target, alias, serving, old, reasons, force)
        from cir_demo.index.corpus_encode import say

        say(f"Milvus at {target.shown}: rebuilding {alias} ({'; '.join(reasons + changes)[:500]})")
    d = int(retriever.dim)
    if "index_type" in request:
        types, why = [request["index_type"]], "requested"
    else:
        if memory_budget is None and target.lite:
            from cir_demo.index.choose import default_memory_budget

            memory_budget = default_memory_budget()
        types, why = store.candidate_types(len(ids), d, target.lite, memory_budget)
        why = f"auto: {why}"
    key = _build_key(retriever, ids, fingerprint, types, request)
    name = store.build_name(alias, key)
    if name == serving:  # --force over a fresh collection: the other of two names
        name = f"{name}_r"
    started = time.perf_counter()
    if embeddings is None:
        from cir_demo.index.build import cached_encode_corpus

        embeddings = cached_encode_corpus(benchmark, ids, retriever, batch_size=batch_size, progress=progress)
    elif callable(embeddings):
        embeddings = embeddings()
    manifest = _manifest(benchmark, retriever, ids, types, why, request, name, key)
    manifest.num_shards = int(num_shards)
    manifest = write_collection(
        client, target, name, embeddings, ids, manifest, types, request, force, progress, started
    )
    move_alias(client, target, alias, name, exists=serving is not None)
    if serving is not None and serving != name:  # ours and outdated, or replaced with --force
        _drop_replaced(client, target, serving)
    return load_collection(client, target, alias, name, manifest, ids, built=True)


def _drop_replaced(client, target, name: str) -> None:
    """Drop the collection the alias no longer serves; when that fails (Milvus Lite refuses while its
    background index builder still writes the collection's files), say so and go on: the new
    collection is served already."""
    from cir_demo.index.corpus_encode import say

    try:
        store.calling(target, f"dropping the replaced collection {name}", client.drop_collection, name)
    except MilvusIndexError as exc:
        say(f"warning: {exc}; it is no longer served: drop it later")


def _served_reasons(old, state: str, serving: str, retriever, ids, fingerprint) -> list[str]:
    """Why the collection an alias points to cannot serve `retriever` over `ids` ([] = fresh)."""
    if old is None:
        return ["not built by cir_demo"]
    reasons = milvus_stale_reasons(old, retriever, ids, fingerprint)
    if state != COMPLETE:
        reasons.append(f"incomplete: collection {serving} is marked {state or 'without a state'}")
    return reasons


def _refuse_foreign(target, alias: str, serving: str, old, reasons: list[str], force: bool) -> None:
    """MilvusIndexError (unless `force`) for a served collection another project, other code or another
    spec built: another version of this project may be serving from it."""
    if force:
        return
    if old is None:
        raise MilvusIndexError(
            f"Milvus at {target.shown}: collection {serving} (alias {alias}) was not built by cir_demo; "
            "refusing to replace it (--force replaces it)"
        )
    refused = [r for r in reasons if r.startswith(REFUSED)]
    if refused:
        raise MilvusIndexError(
            f"Milvus at {target.shown}: collection {serving} (alias {alias}) was built by other code or for "
            f"another spec ({'; '.join(refused)[:300]}); refusing to replace it (index build --index-uri ... "
            "--force rebuilds it)"
        )

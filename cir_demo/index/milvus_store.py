"""Corpus vectors in Milvus: where they are (a URI), how a collection holds them, and how it is
written, indexed and searched. What a collection was built from, and when it is rebuilt, is
`milvus_build`'s; this module is what lays out the bits (its code is the collection's code key).

A URI ending in `.db` is an embedded Milvus Lite (a folder of that name; its gRPC server runs in
this process, one per folder); `http(s)://host:port` is a Milvus server or cluster, authenticated
with the token in the environment variable `MILVUS_TOKEN` (`user:password` or an API key), which
no message ever shows, nor credentials written into the URI.

A collection holds one row per corpus image: `pos` (int64 primary key, the image's position in
the corpus order, so positions map to ids as a faiss index's rows do), `image_id` and `vector`
(float32, inner product). Searches ask for no output field besides the primary key.

pymilvus is imported here only, and only when a URI is given: the faiss path never loads it.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from cir_demo.errors import UserError

PK, IMAGE_ID, VECTOR = "pos", "image_id", "vector"
MAX_ID_CHARS = 1024
METRIC = "IP"
# Rows per insert: under a starved CPU Milvus Lite's in-process server died on a 5,000-row insert
# and survived 1,000-row batches (issue 49); a server takes them as easily.
INSERT_ROWS = 1000
# Queries per search call: Milvus caps nq at 16,384 and a gRPC message at 64 MiB by default; a
# chunk's vectors are kept to 8 MiB and at most 1,000 queries.
SEARCH_BYTES = 8 * 2**20
MAX_NQ = 1000
MAX_TOPK = 16384  # Milvus's limit on k
TOKEN_ENV = "MILVUS_TOKEN"
# Index types Milvus Lite builds (milvus_lite.index.factory); a server builds these and more.
LITE_TYPES = ("FLAT", "HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8")
# What each index type takes at build and at search time, with the defaults used when a build
# does not say (`--index-params`). The search parameters are stored in the collection's manifest.
BUILD_DEFAULTS: dict[str, dict[str, Any]] = {
    "FLAT": {},
    "HNSW": {"M": 32, "efConstruction": 200},
    "HNSW_SQ": {"M": 32, "efConstruction": 200, "sq_type": "SQ8"},
    "IVF_FLAT": {"nlist": None},
    "IVF_SQ8": {"nlist": None},
    "DISKANN": {},
    "GPU_CAGRA": {"intermediate_graph_degree": 64, "graph_degree": 32},
    "AUTOINDEX": {},
}
SEARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "FLAT": {},
    "HNSW": {"ef": 128},
    "HNSW_SQ": {"ef": 128},
    "IVF_FLAT": {"nprobe": None},
    "IVF_SQ8": {"nprobe": None},
    "DISKANN": {"search_list": 128},
    "GPU_CAGRA": {"itopk_size": 128},
    "AUTOINDEX": {},
}
INDEX_TYPES = tuple(BUILD_DEFAULTS)


class MilvusIndexError(UserError):
    """A Milvus index that cannot be reached, read or written as asked (one line, naming the URI)."""


# --------------------------------------------------------------------------- where
@dataclass(frozen=True)
class MilvusTarget:
    """Where a Milvus index lives: `uri` as given (never printed), `shown` without credentials."""

    uri: str
    lite: bool
    shown: str


def parse_uri(uri: str) -> MilvusTarget:
    """A `.db` path (Milvus Lite) or an `http(s)://host:port` URI; ValueError naming the flag otherwise."""
    if not isinstance(uri, str) or not uri.strip():
        raise ValueError("--index-uri: expected a path ending in .db (Milvus Lite) or http(s)://host:port, got nothing")
    uri = uri.strip()
    m = re.fullmatch(r"(https?)://(?:[^@/]*@)?([^/:@?#]+|\[[0-9a-fA-F:]+\])(?::(\d+))?/?(?:[?#].*)?", uri)
    if m:
        shown = f"{m.group(1)}://{m.group(2)}" + (f":{m.group(3)}" if m.group(3) else "")
        return MilvusTarget(uri=uri, lite=False, shown=shown)
    if "://" in uri:
        raise ValueError(
            f"--index-uri {shown_uri(uri)}: not a Milvus URI; give http(s)://host:port for a server "
            "or a path ending in .db for Milvus Lite"
        )
    if not uri.endswith(".db"):
        raise ValueError(
            f"--index-uri {uri}: a Milvus Lite index is a path ending in .db (e.g. indexes/milvus.db); "
            "a server is http(s)://host:port"
        )
    return MilvusTarget(uri=os.path.abspath(os.path.expanduser(uri)), lite=True, shown=uri)


def shown_uri(uri: str) -> str:
    """`uri` without user:password@ and without a query string (where a token could be)."""
    return re.sub(r"^([a-z]+://)[^@/]*@", r"\1", str(uri).split("?")[0].split("#")[0])


def _quiet_pymilvus() -> None:
    """pymilvus logs every failed call with its traceback at ERROR; each failure here becomes one line.
    grpc._server: Milvus Lite's in-process server logs a traceback for every call it does not implement
    (pymilvus asks it for timestamps), which an app's log would otherwise show."""
    for name in ("pymilvus", "milvus_lite", "grpc._server"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _milvus_exception():
    from pymilvus.exceptions import MilvusException

    return MilvusException


def failure_text(exc: BaseException, target: MilvusTarget) -> str:
    """The first line of a Milvus error, with the token and the URI's credentials removed."""
    text = str(getattr(exc, "message", "") or exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    token = os.environ.get(TOKEN_ENV)
    if token:
        line = line.replace(token, "***")
    return line.replace(target.uri, target.shown)[:300]


def _refused(message: str) -> bool:
    low = message.lower()
    return any(w in low for w in ("auth", "credential", "password", "token", "unauthenticated", "permission denied"))


def _refusal(exc: BaseException, target: MilvusTarget) -> str | None:
    """The server's words when `exc` (or the gRPC error pymilvus wraps in it) refuses the credentials."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen and len(seen) < 8:
        seen.append(e)
        code = getattr(e, "code", None)
        try:
            status = str(code()) if callable(code) else str(code or "")
        except Exception:  # a code() that needs a live call
            status = ""
        details = getattr(e, "details", None)
        text = str(details() if callable(details) else failure_text(e, target))
        if "UNAUTHENTICATED" in status or "PERMISSION_DENIED" in status or _refused(text):
            return failure_text(Exception(text), target)
        e = e.__cause__ or e.__context__
    return None


def connect(target: MilvusTarget, timeout: float = 10.0):
    """A MilvusClient of `target`, its connection checked; MilvusIndexError (one line) when the server
    cannot be reached or refuses the credentials, or when pymilvus is not installed."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise MilvusIndexError(
            f"--index-uri {target.shown}: pymilvus is not installed (pip install -r requirements.txt)"
        ) from None
    _quiet_pymilvus()
    if target.lite:
        try:
            import milvus_lite  # noqa: F401
        except ImportError:
            raise MilvusIndexError(
                f"--index-uri {target.shown}: Milvus Lite is not installed (pip install milvus-lite==3.2.2; it "
                "requires faiss-cpu, so beside a CUDA faiss use a Milvus server instead)"
            ) from None
        parent = os.path.dirname(target.uri)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise MilvusIndexError(f"--index-uri {target.shown}: cannot create {parent} ({exc.strerror})") from None
    token = os.environ.get(TOKEN_ENV, "") if not target.lite else ""
    try:
        client = MilvusClient(uri=target.uri, token=token, timeout=timeout)
        client.list_collections()
    except Exception as exc:  # pymilvus raises its own and grpc's errors
        line, refused = failure_text(exc, target), _refusal(exc, target)
        if refused:
            raise MilvusIndexError(
                f"Milvus at {target.shown} refused the credentials ({refused}); set {TOKEN_ENV} to user:password "
                "or an API key"
            ) from None
        if target.lite:
            raise MilvusIndexError(
                f"Milvus Lite at {target.shown} cannot be opened ({line}); a Milvus Lite folder serves one "
                "process at a time: is another one using it? (share an index through a Milvus server)"
            ) from None
        raise MilvusIndexError(
            f"Milvus at {target.shown} cannot be reached ({line}); is the server running and the URI right?"
        ) from None
    return client


def calling(target: MilvusTarget, what: str, fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)`, a Milvus failure turned into one MilvusIndexError line naming the URI and `what`."""
    try:
        return fn(*args, **kwargs)
    except _milvus_exception() as exc:
        line, refused = failure_text(exc, target), _refusal(exc, target)
        if refused:
            raise MilvusIndexError(f"Milvus at {target.shown} refused {what} ({refused}); check {TOKEN_ENV}") from None
        raise MilvusIndexError(f"Milvus at {target.shown}: {what} failed ({line})") from None


# --------------------------------------------------------------------------- names
def _name_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")


def alias_name(benchmark: str, retriever: str, spec_hash: str) -> str:
    """The alias that serves (benchmark, retriever spec): Milvus names take letters, digits and
    underscores, start with a letter and stay within 255 characters; a hash keeps distinct pairs apart."""
    import hashlib

    key = hashlib.sha256(f"{benchmark}\n{retriever}\n{spec_hash}".encode()).hexdigest()[:10]
    readable = f"{_name_part(benchmark)[:80]}__{_name_part(retriever)[:80]}"
    return f"cir_{readable}__{key}"


def build_name(alias: str, build_key: str) -> str:
    """The collection one build writes (its key: what it is built from), served through `alias` once whole."""
    return f"{alias}__b{build_key[:12]}"


# --------------------------------------------------------------------------- index choice
def resolve_index(index_type: str, n: int, build: dict | None = None, search: dict | None = None) -> tuple[dict, dict]:
    """(build parameters, search parameters) of `index_type` for `n` vectors: the defaults (nlist
    ~ 4 sqrt(n), nprobe nlist/16, as the faiss kinds) with `build` and `search` over them."""
    if index_type not in BUILD_DEFAULTS:
        raise ValueError(f"--index-params: unknown Milvus index_type {index_type!r}; one of {', '.join(INDEX_TYPES)}")
    b = {**BUILD_DEFAULTS[index_type], **(build or {})}
    s = {**SEARCH_DEFAULTS[index_type], **(search or {})}
    if "nlist" in b and b["nlist"] is None:
        b["nlist"] = int(max(1, min(2 ** max(0, round(math.log2(max(4 * math.sqrt(n), 1)))), max(n // 40, 1))))
    if "nprobe" in s and s["nprobe"] is None:
        s["nprobe"] = int(max(1, b.get("nlist", 16) // 16))
    return b, s


def bytes_per_vector(index_type: str, d: int, build: dict) -> float:
    """Memory per vector of an index type (graph links counted, centroids left out)."""
    if index_type in ("IVF_SQ8", "HNSW_SQ"):
        return d + 8.0 + (8 * build.get("M", 0) if index_type == "HNSW_SQ" else 0)
    if index_type in ("HNSW", "GPU_CAGRA"):
        return 4.0 * d + 8 * build.get("M", build.get("graph_degree", 32))
    if index_type == "DISKANN":
        return d / 4.0  # PQ codes in memory, the graph and vectors on disk
    return 4.0 * d + 8


def candidate_types(n: int, d: int, lite: bool, memory_budget: int | None) -> tuple[list[str], str]:
    """Index types to try in order for `n` x `d` vectors (a server refuses those it does not build:
    GPU_CAGRA without a GPU, DISKANN without a disk index), and why. Exact FLAT within the faiss
    flat limit, so metrics equal a faiss flat index's."""
    from cir_demo.index.choose import flat_limit

    size = f"{n:,} x {d}"
    if n <= flat_limit(d):
        return ["FLAT"], f"exact: {size} is within the flat limit of {flat_limit(d):,} vectors at {d}-d"
    budget = float("inf") if memory_budget is None else memory_budget
    fits = n * bytes_per_vector("HNSW", d, BUILD_DEFAULTS["HNSW"]) <= budget
    above = f"{size} is above the flat limit of {flat_limit(d):,} vectors at {d}-d"
    if lite:
        return (["HNSW"], above) if fits else (["IVF_SQ8"], f"{above}; HNSW over the memory budget")
    if fits:
        return ["GPU_CAGRA", "HNSW"], f"{above}; GPU_CAGRA where the server has a GPU, else HNSW"
    return ["DISKANN", "IVF_SQ8"], f"{above}; HNSW over the memory budget: DISKANN where offered, else IVF_SQ8"


def index_request(text: str | dict | None) -> dict:
    """`--index-params` JSON: {"index_type": ..., "params": {...}, "search_params": {...}}, each optional;
    ValueError naming the flag and the key."""
    import json

    if text is None or text == "":
        return {}
    if isinstance(text, str):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--index-params: not valid JSON ({exc.msg} at character {exc.pos})") from None
    else:
        data = dict(text)
    if not isinstance(data, dict):
        raise ValueError(f"--index-params: expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"index_type", "params", "search_params"})
    if unknown:
        raise ValueError(
            f"--index-params: unknown key(s) {', '.join(unknown)} (allowed: index_type, params, search_params)"
        )
    if "index_type" in data and (not isinstance(data["index_type"], str) or data["index_type"] not in INDEX_TYPES):
        raise ValueError(
            f"--index-params: index_type must be one of {', '.join(INDEX_TYPES)}, got {data['index_type']!r}"
        )
    for key in ("params", "search_params"):
        if key in data and not isinstance(data[key], dict):
            raise ValueError(f"--index-params: {key} must be a JSON object, got {data[key]!r:.60}")
    return data


# --------------------------------------------------------------------------- collections
def create_collection(client, target: MilvusTarget, name: str, dim: int, properties: dict[str, str]) -> None:
    """An empty collection of the layout above with `properties` (strong consistency: a count or a
    search right after a build sees every row)."""
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field(PK, DataType.INT64, is_primary=True)
    schema.add_field(IMAGE_ID, DataType.VARCHAR, max_length=MAX_ID_CHARS)
    schema.add_field(VECTOR, DataType.FLOAT_VECTOR, dim=int(dim))
    calling(
        target,
        f"creating collection {name}",
        client.create_collection,
        name,
        schema=schema,
        properties=properties,
        consistency_level="Strong",
    )


def create_vector_index(client, target: MilvusTarget, name: str, types: Sequence[str], n: int, request: dict):
    """Declare the vector index on collection `name`: the first of `types` the server accepts (with
    `request`'s parameters over the defaults). Returns (index type, build params, search params)."""
    last = ""
    for index_type in types:
        build, search = resolve_index(index_type, n, request.get("params"), request.get("search_params"))
        params = client.prepare_index_params()
        params.add_index(VECTOR, index_type=index_type, metric_type=METRIC, params=build)
        try:
            # the client's own wait for the build sleeps half a second before its first look; this one
            # looks at once and then at growing intervals (an empty collection's index is built at once)
            client.create_index(name, params, sync=False)
            failed = _index_failure(client, name)
        except _milvus_exception() as exc:
            last = failure_text(exc, target)
            continue
        if failed is not None:
            last = failed
            continue
        return index_type, build, search
    raise MilvusIndexError(
        f"Milvus at {target.shown} builds none of {', '.join(types)} on collection {name} ({last}); "
        'choose one it offers with --index-params \'{"index_type": "HNSW"}\''
    )


def _index_failure(client, name: str) -> str | None:
    """Wait until the server has built the vector index just declared on `name`: None when it is built,
    else the server's reason it failed."""
    for _ in _polls():
        info = client.describe_index(name, VECTOR)
        state = str(info.get("state", "")).lower()
        if "fail" in state:
            return str(info.get("index_state_fail_reason") or info.get("fail_reason") or state)
        if state in ("finished", ""):
            return None
    return None  # never reached: `_polls` does not end


def _polls(first_s: float = 0.02, most_s: float = 1.0):
    """An endless count, sleeping before each look but the first: 20 ms, doubling up to `most_s`."""
    wait = first_s
    for i in itertools.count():
        if i:
            time.sleep(wait)
            wait = min(wait * 2, most_s)
        yield i


def wait_indexed(client, target: MilvusTarget, name: str, n: int, poll_s: float = 1.0) -> None:
    """Return once the server says every one of the `n` rows of `name` is indexed: a server builds
    indexes after a flush, in the background, and until then searches sealed segments through an
    interim index whose recall is not the requested one. Looks at once, then at growing intervals up to
    `poll_s` (a small collection is indexed in a fraction of a second)."""
    for _ in _polls(most_s=poll_s):
        info = calling(target, f"describing the index of {name}", client.describe_index, name, VECTOR)
        if "fail" in str(info.get("state", "")).lower():
            raise MilvusIndexError(f"Milvus at {target.shown}: building the index of {name} failed ({info})")
        if int(info.get("indexed_rows", n)) >= n and int(info.get("pending_index_rows", 0)) == 0:
            return


def vector_dim(client, target: MilvusTarget, name: str) -> int | None:
    """The dimension of collection `name`'s vector field (None when it has none)."""
    info = calling(target, f"describing collection {name}", client.describe_collection, name)
    for f in info.get("fields", []):
        if f.get("name") == VECTOR:
            return int((f.get("params") or {}).get("dim", 0)) or None
    return None


def row_count(client, target: MilvusTarget, name: str, below: int | None = None) -> int:
    """Rows in collection `name` (those with pos < `below` when given), counted with strong consistency."""
    rows = calling(
        target,
        f"counting collection {name}",
        client.query,
        name,
        filter="" if below is None else f"{PK} < {int(below)}",
        output_fields=["count(*)"],
        consistency_level="Strong",
    )
    return int(rows[0]["count(*)"])


def insert_rows(
    client, target: MilvusTarget, name: str, xb: np.ndarray, ids: Sequence[str], start: int, progress: bool
) -> None:
    """Insert rows `start`.. of `xb` in batches of INSERT_ROWS, with a progress bar."""
    from tqdm.auto import tqdm

    n = len(ids)
    with tqdm(total=n, initial=start, unit="vec", desc=f"insert into {name}", disable=not progress) as bar:
        for lo in range(start, n, INSERT_ROWS):
            hi = min(n, lo + INSERT_ROWS)
            rows = [{PK: i, IMAGE_ID: ids[i], VECTOR: xb[i]} for i in range(lo, hi)]
            calling(target, f"inserting rows {lo}..{hi - 1} into {name}", client.insert, name, rows)
            bar.update(hi - lo)


def read_ids(client, target: MilvusTarget, name: str, count: int) -> list[str]:
    """The image ids of collection `name` in position order (rows 0..count-1)."""
    out: list[str | None] = [None] * count
    for lo in range(0, count, INSERT_ROWS):
        rows = calling(
            target,
            f"reading the ids of {name}",
            client.query,
            name,
            filter=f"{PK} >= {lo} and {PK} < {lo + INSERT_ROWS}",
            output_fields=[PK, IMAGE_ID],
            consistency_level="Strong",
        )
        for row in rows:
            if 0 <= int(row[PK]) < count:
                out[int(row[PK])] = row[IMAGE_ID]
    missing = [i for i, x in enumerate(out) if x is None]
    if missing:
        raise MilvusIndexError(
            f"Milvus at {target.shown}: collection {name} lacks the rows of positions {missing[0]}.. "
            f"({len(missing)} of {count}); rebuild it with --force"
        )
    return [str(x) for x in out]


def query_chunks(n: int, d: int) -> Iterator[tuple[int, int]]:
    """(lo, hi) row ranges of `n` queries of dimension `d` within Milvus's nq and message limits."""
    step = max(1, min(MAX_NQ, SEARCH_BYTES // max(4 * d, 1)))
    for lo in range(0, n, step):
        yield lo, min(n, lo + step)


def search(
    client, target: MilvusTarget, name: str, xq: np.ndarray, k: int, search_params: dict, dim: int
) -> tuple[np.ndarray, np.ndarray]:
    """(D, I) of the `k` best inner products per query row, I the corpus positions; rows with fewer
    hits are padded with -1 / -inf, as a faiss index pads them."""
    xq = np.ascontiguousarray(xq, dtype=np.float32)
    if xq.ndim != 2 or xq.shape[1] != dim:
        raise MilvusIndexError(
            f"Milvus at {target.shown}: dimension mismatch: collection {name} holds {dim}-d vectors, "
            f"the queries are {xq.shape[-1] if xq.ndim else 0}-d"
        )
    D = np.full((len(xq), k), -np.inf, dtype=np.float32)
    I = np.full((len(xq), k), -1, dtype=np.int64)
    limit = min(k, MAX_TOPK)
    if limit < 1 or len(xq) == 0:
        return D, I
    for lo, hi in query_chunks(len(xq), dim):
        hits = calling(
            target,
            f"searching {name}",
            client.search,
            name,
            data=xq[lo:hi],
            limit=limit,
            anns_field=VECTOR,
            search_params={"metric_type": METRIC, "params": dict(search_params)},
            output_fields=[PK],
        )
        for row, h in enumerate(hits, start=lo):
            ids, dist = list(h.ids), list(h.distances)
            I[row, : len(ids)] = ids
            D[row, : len(dist)] = dist
    return D, I

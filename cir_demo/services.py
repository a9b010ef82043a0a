"""The explorer's service layer: the only thing the UI (`cir_demo/ui/`) calls.

It answers the questions the app asks of a benchmark, its retrievers, a reranker and
the latest `--eval` run, and returns plain data (dataclasses, pandas frames, data-URI
thumbnails); it never imports gradio. Retrieval goes through `RetrievalEngine`, so a
ranking shown in the app is the ranking the report scored.

    loader = ServiceLoader(ServiceConfig(benchmark="world"))   # loads in a thread
    service = loader.wait()
    service.find_queries("dress", {"intent_category": "Swap"}, sort="negatives")
    cmp = service.compare("w00001", ["world-cir", "world-clip-image"], k=10, rerank=True, top_n=20)
    img, notes = validate_upload("photo.heic")                  # UploadError names the file and problem

Heavy libraries (torch, faiss, open_clip) load inside the engine, on first use.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import logging
import math
import os
import sqlite3
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from cir_demo.benchmarks.schema import SKIN_TONE_BUCKETS, Benchmark, Query

log = logging.getLogger(__name__)

# The app's defaults on the offline world: four columns, the world verifier as reranker.
WORLD_RETRIEVERS = ("world-cir", "world-clip-fusion", "world-clip-image", "world-clip-text")
WORLD_RERANKER = "world-verifier"
RERANK_SUFFIX = "+rerank"  # how `--eval` names a reranked run (cir_demo.harness.pipeline)
MAX_COLUMNS = 4
SEARCH_K = 50  # rankings are retrieved this deep (as `--eval` does), whatever the view shows
METRICS = ("AP@10", "precision@10", "NegRecall@10")
TILE_PX = 128
REFERENCE_PX = 224
MAX_QUERY_ROWS = 300  # rows the query list shows at once

# Filters the Explore tab offers, in order: meta key -> label.
FILTER_FIELDS = {
    "intent_category": "Intent type",
    "edit_subcategory": "Edit subcategory",
    "domain": "Domain",
    "is_single": "Reference images",
    "skin_tone_bucket": "Skin tone (reference)",
}
SINGLE_LABELS = {True: "single image", False: "two images"}
NO_VALUE = "(none)"

SORTS = {
    "order": "Benchmark order",
    "negatives": "Explicit negatives in the top 10 (most first)",
    "spread": "Largest paraphrase spread (AP@10 max − min)",
    "two_image": "Two-image queries (lowest AP@10 first)",
    "rerank_helped": "Reranker helped most (AP@10 gain)",
    "rerank_hurt": "Reranker hurt most (AP@10 loss)",
    "shortcut": "Modality shortcut (image-only or text-only beats composed)",
}

WORLD_UPLOAD_NOTE = (
    "The offline world's models were trained only on the world's rendered scenes (flat, sketch and "
    "photo-style drawings of clothes, home objects and accessories). They do not understand real "
    "photos: with your own images expect results that look arbitrary. Upload world images (for "
    "example reference images saved from the Explore tab) to see them work."
)


class ServiceError(Exception):
    """A request the service cannot answer as asked; the message is written for the user."""


class UploadError(ServiceError):
    """An uploaded file that cannot be used; the message names the file and the problem."""


# =========================================================================== configuration
@dataclass(frozen=True)
class ServiceConfig:
    """What the app serves. `retrievers=None` means the benchmark's defaults; `reranker=None`
    the default (the world verifier on the world, when registered), "none" disables it."""

    benchmark: str = "world"
    benchmark_kwargs: Mapping[str, Any] = field(default_factory=dict)
    retrievers: tuple[str, ...] | None = None
    reranker: str | None = None
    reranker_kwargs: Mapping[str, Any] = field(default_factory=dict)
    limit_groups: int | None = None
    device: str | None = None
    allow_stale: bool = False
    trust_remote_code: bool = False  # retrievers that run model-repo code (BGE-VL, GME): explicit opt-in only
    warm_thumbnails: bool = True  # a background process fills the thumbnail and pixel caches
    pixel_cache: bool = True  # serve exact pixels from the PNG cache instead of re-rendering
    # torch CPU threads while serving (index builds before use torch's default). One is fastest for
    # single queries on a busy CPU: with two, OpenMP threads wait on each other (~15x slower measured).
    threads: int | None = 1
    default_top_n: int = 20


def default_retrievers(benchmark_name: str, known: Iterable[str]) -> list[str]:
    """The app's columns when none are named: the registered world retrievers on the world."""
    known = set(known)
    if benchmark_name != "world":
        return []
    return [n for n in WORLD_RETRIEVERS if n in known]


def resolve_reranker(benchmark_name: str, requested: str | None, backends: Iterable[str]) -> tuple[str | None, str]:
    """(backend name or None, a sentence for the user about the reranker)."""
    backends = set(backends)
    if requested is not None and requested.lower() == "none":
        return None, "Reranker disabled (--reranker none)."
    if requested is not None:
        if requested not in backends:
            from cir_demo.utils.names import UnknownNameError

            raise UnknownNameError("reranker backend", requested, backends)
        return requested, f"Reranker: {requested}."
    if benchmark_name == "world" and WORLD_RERANKER in backends:
        return WORLD_RERANKER, f"Reranker: {WORLD_RERANKER}."
    if benchmark_name == "world":
        return None, (f"The reranker toggle is off: the {WORLD_RERANKER!r} model is not available yet "
                      "(train it, or start the app with --reranker NAME).")
    return None, "No reranker configured (start the app with --reranker NAME to enable the toggle)."


def retriever_modality(config: Mapping[str, Any]) -> str:
    """'image', 'text' or 'composed': what a retriever's query vector looks at."""
    recipe = config.get("recipe")
    if recipe == "image_only":
        return "image"
    if recipe == "text_only":
        return "text"
    name = str(config.get("name", ""))
    if recipe is None and name.endswith("-image"):
        return "image"
    if recipe is None and name.endswith("-text"):
        return "text"
    return "composed"


MODALITY_LABELS = {"image": "image only", "text": "text only", "composed": "composed"}


# =========================================================================== queries: table, filters
def query_table(benchmark: Benchmark) -> pd.DataFrame:
    """One row per query: query_id, group_id, instruction, n_refs, the filter fields, paraphrase index."""
    rows = []
    position: dict[str, int] = {}
    for q in benchmark.queries:
        idx = position.get(q.group_id, 0)
        position[q.group_id] = idx + 1
        row = {"query_id": q.query_id, "group_id": q.group_id, "instruction": q.instruction,
               "n_refs": len(q.reference_ids), "paraphrase": idx}
        for key in FILTER_FIELDS:
            row[key] = filter_value(key, q.meta.get(key))
        rows.append(row)
    return pd.DataFrame(rows, columns=["query_id", "group_id", "instruction", "n_refs", "paraphrase", *FILTER_FIELDS])


def filter_value(key: str, value: Any) -> str:
    """The label a meta value has in the filters (every value becomes a string)."""
    if key == "is_single" and value is not None:
        return SINGLE_LABELS[bool(value)]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NO_VALUE
    return str(value)


def filter_choices(table: pd.DataFrame) -> dict[str, list[str]]:
    """Values present for each filter field (fields with a single value are left out)."""
    out = {}
    for key in FILTER_FIELDS:
        values = [v for v in table[key].unique()]
        if len(values) < 2 and NO_VALUE in values:
            continue
        order = {v: i for i, v in enumerate(SKIN_TONE_BUCKETS)} if key == "skin_tone_bucket" else {}
        out[key] = sorted(values, key=lambda v: (v == NO_VALUE, order.get(v, len(order)), v))
    return out


def filter_queries(table: pd.DataFrame, text: str = "", filters: Mapping[str, str | None] | None = None) -> pd.DataFrame:
    """Rows whose instruction or ids contain every word of `text` (case-insensitive) and
    that match every filter (None or "" = any)."""
    mask = np.ones(len(table), dtype=bool)
    for key, value in (filters or {}).items():
        if value in (None, "", "any"):
            continue
        if key not in table:
            raise ServiceError(f"unknown filter {key!r}; filters: {', '.join(FILTER_FIELDS)}")
        mask &= (table[key] == value).to_numpy()
    words = [w for w in (text or "").lower().split() if w]
    if words:
        hay = (table["instruction"].str.lower() + " " + table["query_id"].str.lower() + " "
               + table["group_id"].str.lower()).to_numpy()
        for w in words:
            mask &= np.array([w in h for h in hay], dtype=bool)
    return table[mask]


# =========================================================================== failure statistics
def negatives_in_top10(neg_recall10: np.ndarray, n_neg: np.ndarray) -> np.ndarray:
    """How many explicit negatives a top 10 held, from NegRecall@10 and the negative-list length."""
    denom = np.minimum(np.asarray(n_neg, dtype=float), 10.0)
    return np.rint(np.nan_to_num(np.asarray(neg_recall10, dtype=float)) * denom).astype(int)


def failure_scores(per_query: pd.DataFrame, modality: Mapping[str, str]) -> pd.DataFrame:
    """Per-query failure measures from per-query metrics of several runs.

    `per_query`: long frame with columns run, query_id, group_id, AP@10, NegRecall@10,
    n_neg (as `--eval` writes per_query.csv); runs named `<retriever>` and optionally
    `<retriever>+rerank`. `modality`: retriever -> image/text/composed (the retrievers
    that count). Returns one row per query (index query_id) with:
    neg_top10 / neg_who (most explicit negatives in any top 10, and whose),
    spread / spread_who (largest AP@10 max - min over the paraphrases of the intent),
    mean_ap (mean AP@10 over retrievers),
    shortcut / shortcut_who / shortcut_vs (best unimodal AP@10 minus best composed AP@10),
    rerank_gain / rerank_gain_who, rerank_loss / rerank_loss_who (AP@10 after - before reranking).
    """
    names = [n for n in modality if n in set(per_query["run"])]
    if not names:
        raise ServiceError(f"no per-query results for the app's retrievers ({', '.join(modality) or 'none'})")
    base = per_query[per_query["run"].isin(names)]
    ap = base.pivot_table(index="query_id", columns="run", values="AP@10", aggfunc="first")[names]
    negr = base.pivot_table(index="query_id", columns="run", values="NegRecall@10", aggfunc="first")[names]
    n_neg = base.groupby("query_id")["n_neg"].first().reindex(ap.index)
    group = base.groupby("query_id")["group_id"].first().reindex(ap.index)
    out = pd.DataFrame(index=ap.index)
    out["group_id"] = group

    neg = pd.DataFrame({n: negatives_in_top10(negr[n].to_numpy(), n_neg.to_numpy()) for n in names}, index=ap.index)
    out["neg_top10"] = neg.max(axis=1)
    out["neg_who"] = neg.idxmax(axis=1)

    spreads = ap.groupby(group).transform(lambda s: s.max() - s.min())
    out["spread"] = spreads.max(axis=1)
    out["spread_who"] = spreads.fillna(-1.0).idxmax(axis=1)
    out["mean_ap"] = ap.mean(axis=1)

    uni = [n for n in names if modality[n] in ("image", "text")]
    comp = [n for n in names if modality[n] == "composed"]
    if uni and comp:
        out["shortcut"] = ap[uni].max(axis=1) - ap[comp].max(axis=1)
        out["shortcut_who"] = ap[uni].fillna(-1.0).idxmax(axis=1)
        out["shortcut_vs"] = ap[comp].fillna(-1.0).idxmax(axis=1)

    reranked = [n for n in names if f"{n}{RERANK_SUFFIX}" in set(per_query["run"])]
    if reranked:
        rr = per_query[per_query["run"].isin([f"{n}{RERANK_SUFFIX}" for n in reranked])]
        rr_ap = rr.pivot_table(index="query_id", columns="run", values="AP@10", aggfunc="first")
        delta = pd.DataFrame({n: rr_ap[f"{n}{RERANK_SUFFIX}"].reindex(ap.index) - ap[n] for n in reranked})
        out["rerank_gain"] = delta.max(axis=1)
        out["rerank_gain_who"] = delta.fillna(-np.inf).idxmax(axis=1)
        out["rerank_loss"] = delta.min(axis=1)
        out["rerank_loss_who"] = delta.fillna(np.inf).idxmin(axis=1)
    return out


def sort_queries(table: pd.DataFrame, scores: pd.DataFrame | None, sort: str) -> tuple[pd.DataFrame, str]:
    """Order (and for failure sorts, keep only the failing) rows of a query table.

    Returns (rows with a `why` column, a sentence about the sort). Ties keep benchmark order.
    """
    if sort not in SORTS:
        from cir_demo.utils.names import UnknownNameError

        raise UnknownNameError("sort", sort, SORTS)
    rows = table.copy()
    rows["why"] = ""
    if sort == "order":
        return rows, ""
    if scores is None:
        raise ServiceError("failure sorts need per-query results of the retrievers (none are loaded)")
    s = scores.reindex(rows["query_id"])
    s.index = rows.index

    def fmt(x: float) -> str:
        return f"{x:+.3f}" if x == x else "n/a"

    if sort == "negatives":
        keep = s["neg_top10"] > 0
        rows["key"] = -s["neg_top10"]
        rows["why"] = [f"{int(n)} explicit negative{'s' if n != 1 else ''} in the top 10 ({w})"
                       for n, w in zip(s["neg_top10"].fillna(0), s["neg_who"])]
        note = "queries with at least one explicit negative in some retriever's top 10"
    elif sort == "spread":
        keep = s["spread"] > 0
        rows["key"] = -s["spread"]
        rows["why"] = [f"AP@10 varies by {v:.3f} across paraphrases ({w})" for v, w in zip(s["spread"], s["spread_who"])]
        note = "queries whose intent's AP@10 changes with the phrasing"
    elif sort == "two_image":
        keep = rows["n_refs"] == 2
        rows["key"] = s["mean_ap"]
        rows["why"] = [f"mean AP@10 {v:.3f}" for v in s["mean_ap"]]
        note = "two-image queries, hardest first"
    elif sort in ("rerank_helped", "rerank_hurt"):
        col = "rerank_gain" if sort == "rerank_helped" else "rerank_loss"
        if col not in s:
            raise ServiceError("no reranked results to sort by: run `python app.py --eval` with a reranker "
                               "(the world verifier by default) or compute them from the Explore tab")
        keep = s[col] > 0 if sort == "rerank_helped" else s[col] < 0
        rows["key"] = -s[col] if sort == "rerank_helped" else s[col]
        rows["why"] = [f"AP@10 {fmt(v)} after reranking ({w})" for v, w in zip(s[col], s[f"{col}_who"])]
        note = f"queries whose AP@10 {'rose' if sort == 'rerank_helped' else 'fell'} with the reranker"
    else:  # shortcut
        if "shortcut" not in s:
            raise ServiceError("the modality-shortcut sort needs an image-only or text-only retriever and a "
                               "composed one among the app's retrievers")
        keep = s["shortcut"] > 0
        rows["key"] = -s["shortcut"]
        rows["why"] = [f"{w} beats {v} by {m:.3f} AP@10" for m, w, v in zip(s["shortcut"], s["shortcut_who"], s["shortcut_vs"])]
        note = "queries where an image-only or text-only retriever beats every composed one"
    rows = rows[keep.fillna(False).to_numpy()]
    rows = rows.sort_values("key", kind="stable").drop(columns="key")
    return rows, note


# =========================================================================== per-query metrics
def query_metrics(ranking: Sequence[str], query: Query) -> dict[str, float]:
    """AP@10, precision@10 and NegRecall@10 of one ranking (the official PinPoint definitions)."""
    return metrics_many([(ranking, query)])[0]


def metrics_many(pairs: Sequence[tuple[Sequence[str], Query]]) -> list[dict[str, float]]:
    """`query_metrics` for many (ranking, query) pairs in one call of the official per-query code
    (a call costs ~10 ms whatever its size, so the app makes one per view, not one per column)."""
    from cir_demo.metrics.pinpoint import per_query

    if not pairs:
        return []
    keyed = [dataclasses.replace(q, query_id=f"{i}\x1f{q.query_id}") for i, (_, q) in enumerate(pairs)]
    df = per_query({k.query_id: list(r) for k, (r, _) in zip(keyed, pairs)}, keyed, ks=(10,)).set_index("query_id")
    out = []
    for k in keyed:
        if k.query_id not in df.index or not bool(df.at[k.query_id, "scored"]):
            out.append({m: float("nan") for m in METRICS})
        else:
            out.append({m: float(df.at[k.query_id, m]) for m in METRICS})
    return out


# =========================================================================== thumbnails
def encode_jpeg_data_uri(image, size: int, quality: int = 85) -> str:
    """A data URI of `image` shrunk to fit `size` x `size` (never enlarged)."""
    img = image if image.mode == "RGB" else image.convert("RGB")
    if max(img.size) > size:
        img = img.copy()
        img.thumbnail((size, size))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class ThumbnailStore:
    """Data-URI thumbnails per image id: memory LRU, then an SQLite file, then rendering.

    The file (one per benchmark content and size) survives restarts, so a view is
    rendered at most once; a background process may fill it ahead of time
    (`warm_thumbnails`). Safe for concurrent use.
    """

    def __init__(self, open_image: Callable[[str], Any], db_path: str | Path | None, size: int,
                 quality: int = 85, max_memory: int = 8192):
        self.open_image = open_image
        self.size = size
        self.quality = quality
        self.db_path = Path(db_path) if db_path is not None else None
        self.max_memory = max_memory
        self._mem: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self._local = threading.local()
        self.counts = {"memory": 0, "disk": 0, "rendered": 0}  # where thumbnails came from (benchmarks read it)
        if self.db_path is not None:
            open_blob_db(self.db_path).close()

    def _db(self) -> sqlite3.Connection | None:
        if self.db_path is None:
            return None
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = open_blob_db(self.db_path)
        return db

    def _remember(self, image_id: str, uri: str) -> None:
        with self._lock:
            self._mem[image_id] = uri
            self._mem.move_to_end(image_id)
            while len(self._mem) > self.max_memory:
                self._mem.popitem(last=False)

    def get_many(self, image_ids: Sequence[str]) -> dict[str, str | None]:
        """{id: data URI, or None when the image cannot be opened}."""
        out: dict[str, str | None] = {}
        with self._lock:
            for i in image_ids:
                if i in self._mem:
                    self._mem.move_to_end(i)
                    out[i] = self._mem[i]
            self.counts["memory"] += len(out)
        todo = [i for i in dict.fromkeys(image_ids) if i not in out]
        db = self._db()
        if todo and db is not None:
            for start in range(0, len(todo), 500):
                chunk = todo[start:start + 500]
                marks = ",".join("?" * len(chunk))
                try:
                    rows = db.execute(f"SELECT image_id, data FROM blobs WHERE image_id IN ({marks})", chunk).fetchall()
                except sqlite3.Error as exc:  # a locked or damaged cache only costs speed
                    log.warning("thumbnail cache %s: %s", self.db_path, exc)
                    rows = []
                for image_id, jpeg in rows:
                    uri = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
                    out[image_id] = uri
                    self._remember(image_id, uri)
                self.counts["disk"] += len(rows)
        fresh = []
        for image_id in todo:
            if image_id in out:
                continue
            try:
                uri = encode_jpeg_data_uri(self.open_image(image_id), self.size, self.quality)
            except Exception as exc:  # one missing image must not sink the view
                log.warning("thumbnail %s: %s", image_id, exc)
                out[image_id] = None
                continue
            out[image_id] = uri
            self._remember(image_id, uri)
            self.counts["rendered"] += 1
            fresh.append((image_id, base64.b64decode(uri.split(",", 1)[1])))
        if fresh and db is not None:
            try:
                with db:
                    db.executemany("INSERT OR IGNORE INTO blobs VALUES (?, ?)", fresh)
            except sqlite3.Error as exc:
                log.warning("thumbnail cache %s: %s", self.db_path, exc)
        return out

    def get(self, image_id: str) -> str | None:
        return self.get_many([image_id])[image_id]


def open_blob_db(path: Path) -> sqlite3.Connection:
    """An SQLite file of image id -> bytes (JPEG thumbnails or PNG pixels); WAL, so the warmer
    process writes while the app reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=10.0, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS blobs (image_id TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID")
    db.commit()
    return db


def thumbnail_db_path(fingerprint: str, size: int) -> Path:
    from cir_demo.paths import cache_dir

    return cache_dir() / "app" / "thumbnails" / f"{fingerprint}-{size}px.sqlite"


def pixel_db_path(fingerprint: str) -> Path:
    from cir_demo.paths import cache_dir

    return cache_dir() / "app" / "pixels" / f"{fingerprint}.sqlite"


def png_bytes(image) -> bytes:
    """Lossless (PNG, fast setting): decoding gives back the exact pixels."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def jpeg_bytes(image, size: int, quality: int) -> bytes:
    return base64.b64decode(encode_jpeg_data_uri(image, size, quality).split(",", 1)[1])


class PixelCachedStore:
    """An image store serving exact pixels from a PNG file cache (filled by the warmer process) and
    everything else from the wrapped store. Decoding a cached 160 px world image takes ~1.3 ms;
    rendering it ~6.6 ms, which dominated reranking latency (every candidate is opened)."""

    def __init__(self, inner, db_path: str | Path):
        self.inner = inner
        self.db_path = Path(db_path)
        self._local = threading.local()
        self.counts = {"cached": 0, "opened": 0}
        open_blob_db(self.db_path).close()

    def source(self, image_id: str):
        return self.inner.source(image_id)

    def open(self, image_id: str):
        from PIL import Image

        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = open_blob_db(self.db_path)
        try:
            row = db.execute("SELECT data FROM blobs WHERE image_id = ?", (image_id,)).fetchone()
        except sqlite3.Error:
            row = None
        if row is not None:
            self.counts["cached"] += 1
            img = Image.open(io.BytesIO(row[0]))
            img.load()
            return img if img.mode == "RGB" else img.convert("RGB")
        self.counts["opened"] += 1
        return self.inner.open(image_id)


def warm_images(benchmark: Benchmark, image_ids: Sequence[str], targets: Sequence[dict], batch: int = 64,
                keep_going: Callable[[], bool] = lambda: True) -> int:
    """Open each image once and store what every target file lacks: `{"db_path", "kind": "jpeg" |
    "png", "size", "quality"}`. Returns how many images were opened. Stops when `keep_going()` is false."""
    dbs = [open_blob_db(Path(t["db_path"])) for t in targets]
    have = [{r[0] for r in db.execute("SELECT image_id FROM blobs")} for db in dbs]
    todo = [i for i in dict.fromkeys(image_ids) if any(i not in h for h in have)]
    opened = 0
    for start in range(0, len(todo), batch):
        if not keep_going():
            break
        rows: list[list[tuple[str, bytes]]] = [[] for _ in targets]
        for image_id in todo[start:start + batch]:
            try:
                img = benchmark.images.open(image_id)
            except Exception:
                continue
            opened += 1
            for t, h, out in zip(targets, have, rows):
                if image_id not in h:
                    out.append((image_id, png_bytes(img) if t["kind"] == "png"
                                else jpeg_bytes(img, int(t["size"]), int(t["quality"]))))
        for db, out in zip(dbs, rows):
            with db:
                db.executemany("INSERT OR IGNORE INTO blobs VALUES (?, ?)", out)
    for db in dbs:
        db.close()
    return opened


def warm_thumbnails(benchmark: Benchmark, db_path: Path, size: int, quality: int = 85,
                    image_ids: Sequence[str] | None = None) -> int:
    """Store the thumbnails `db_path` lacks (default: the corpus); returns how many images were opened."""
    ids = list(benchmark.corpus_ids) if image_ids is None else list(image_ids)
    return warm_images(benchmark, ids, [{"db_path": str(db_path), "kind": "jpeg", "size": size, "quality": quality}])


def _warm_main(payload: str) -> None:  # entry point of the warmer process
    args = json.loads(payload)
    if args.get("nice", True):
        try:
            os.nice(19)  # never compete with the app for the CPU
        except OSError:
            pass
    parent = os.getppid()
    from cir_demo.benchmarks.registry import load_benchmark

    bench = load_benchmark(args["benchmark"], **args["kwargs"])
    if args.get("limit_groups"):
        bench = bench.limit(args["limit_groups"])
    refs = list(dict.fromkeys(r for q in bench.queries for r in q.reference_ids))
    for job in args["jobs"]:  # references, then the corpus: each image opened once for all its files
        ids = (refs if job["what"] == "references" else list(bench.corpus_ids))[: args["limit"]]
        warm_images(bench, ids, job["targets"], keep_going=lambda: os.getppid() == parent)  # stop if the app is gone


def start_image_warmer(config: ServiceConfig, jobs: Sequence[dict], limit: int = 30000):
    """A low-priority child process filling thumbnail and pixel files; returns the Popen (or None).
    `jobs`: `{"what": "references" | "corpus", "targets": [target, ...]}` (see `warm_images`)."""
    import atexit
    import subprocess
    import sys

    from cir_demo.paths import REPO_ROOT

    jobs = [j for j in jobs if j["targets"]]
    if not jobs:
        return None
    payload = json.dumps({"benchmark": config.benchmark, "kwargs": dict(config.benchmark_kwargs),
                          "limit_groups": config.limit_groups, "jobs": jobs, "limit": limit}, default=str)
    try:
        proc = subprocess.Popen([sys.executable, "-c", "import sys; from cir_demo.services import _warm_main; "
                                 "_warm_main(sys.argv[1])", payload], cwd=str(REPO_ROOT),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as exc:
        log.warning("thumbnail warmer not started: %s", exc)
        return None

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()

    atexit.register(stop)
    return proc


# =========================================================================== uploads
ALLOWED_FORMATS = {"JPEG": "JPEG", "PNG": "PNG", "WEBP": "WebP", "GIF": "GIF", "BMP": "BMP", "TIFF": "TIFF", "MPO": "JPEG"}
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
MAX_UPLOAD_PIXELS = 40_000_000
MIN_UPLOAD_SIDE = 8
MAX_WORKING_SIDE = 1024  # uploads are shrunk to this longest side (every model resizes far below it)


@dataclass
class ValidatedImage:
    image: Any  # PIL RGB
    name: str
    notes: list[str]
    content_id: str  # "upload-<sha256 of the pixels, 16 hex>": uploads are keyed by content


def validate_upload(path: str | os.PathLike, name: str | None = None, max_bytes: int = MAX_UPLOAD_BYTES,
                    max_pixels: int = MAX_UPLOAD_PIXELS) -> ValidatedImage:
    """Open an uploaded image defensively and return it as 8-bit RGB with notes on what was changed.

    Refused (UploadError naming the file): missing or empty files, files over `max_bytes`,
    formats other than JPEG/PNG/WebP/GIF/BMP/TIFF, images over `max_pixels` (checked
    from the header, before decoding: decompression bombs never decode), truncated or
    corrupt data, images under 8 px. Fixed (with a note): EXIF orientation, CMYK and
    other colour modes, 16-bit and float depth, transparency (on white), animation
    (first frame), large images (shrunk to 1024 px).
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    label = name or path.name
    try:
        nbytes = path.stat().st_size
    except OSError as exc:
        raise UploadError(f"{label}: cannot read the uploaded file ({exc.strerror or exc})") from None
    if nbytes == 0:
        raise UploadError(f"{label}: the file is empty")
    if nbytes > max_bytes:
        raise UploadError(f"{label}: the file is {nbytes / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.0f} MB")
    notes: list[str] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                fmt = img.format or "?"
                if fmt not in ALLOWED_FORMATS:
                    raise UploadError(f"{label}: {fmt} images are not supported; use "
                                      f"{', '.join(sorted(set(ALLOWED_FORMATS.values())))}")
                w, h = img.size
                if w * h > max_pixels:
                    raise UploadError(f"{label}: {w} x {h} = {w * h / 1e6:.1f} megapixels; the limit is "
                                      f"{max_pixels / 1e6:.0f} megapixels")
                if min(w, h) < MIN_UPLOAD_SIDE:
                    raise UploadError(f"{label}: {w} x {h} pixels is too small (at least {MIN_UPLOAD_SIDE} px a side)")
                n_frames = int(getattr(img, "n_frames", 1) or 1)
                if getattr(img, "is_animated", False) and n_frames > 1:
                    img.seek(0)
                    notes.append(f"animated image ({n_frames} frames): the first frame is used")
                deep = any(";16" in str(t) for t in (getattr(img, "tile", None) or ()))
                img.load()  # truncated or corrupt data raises here
                upright = img
                orientation = _orientation(img)
                if orientation in ORIENTATIONS:
                    upright = ImageOps.exif_transpose(img)
                    notes.append(f"turned upright from its EXIF orientation ({ORIENTATIONS[orientation]})")
                if deep and upright.mode in ("RGB", "RGBA"):
                    notes.append("16-bit image reduced to 8 bits per channel")
                out = normalize_mode(upright, notes)
    except UploadError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise UploadError(f"{label}: refused: its header claims far more pixels than the limit of "
                          f"{max_pixels / 1e6:.0f} megapixels (a possible decompression bomb)") from None
    except UnidentifiedImageError:
        raise UploadError(f"{label}: not an image file this app can read "
                          f"(supported: {', '.join(sorted(set(ALLOWED_FORMATS.values())))})") from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        text = str(exc)
        what = "the file is truncated (incomplete upload?)" if "truncated" in text.lower() else f"corrupt image data ({text})"
        raise UploadError(f"{label}: {what}") from None
    if max(out.size) > MAX_WORKING_SIDE:
        before = out.size
        out = out.copy()
        out.thumbnail((MAX_WORKING_SIDE, MAX_WORKING_SIDE))
        notes.append(f"shrunk from {before[0]} x {before[1]} to {out.size[0]} x {out.size[1]} pixels")
    digest = hashlib.sha256(out.tobytes() + repr(out.size).encode()).hexdigest()[:16]
    return ValidatedImage(out, label, notes, f"upload-{digest}")


ORIENTATIONS = {2: "mirrored", 3: "rotated 180°", 4: "flipped", 5: "mirrored and rotated", 6: "rotated 90°",
                7: "mirrored and rotated", 8: "rotated 270°"}


def _orientation(img) -> int | None:
    try:
        return img.getexif().get(0x0112)
    except Exception:
        return None


def normalize_mode(img, notes: list[str]):
    """8-bit RGB from any PIL mode; transparency composited on white. Appends what it did to `notes`."""
    from PIL import Image

    mode = img.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        hi = 65535.0 if mode.startswith("I;16") or (mode == "I" and arr.max(initial=0) <= 65535) else max(arr.max(initial=1), 1.0)
        if mode == "F":
            lo, hi = float(arr.min(initial=0)), float(arr.max(initial=1))
            arr = (arr - lo) / max(hi - lo, 1e-12) * 255.0
        else:
            arr = arr / hi * 255.0
        notes.append(f"{'32-bit float' if mode == 'F' else '16-bit'} image reduced to 8 bits per channel")
        return Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), "L").convert("RGB")
    if mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        alpha = np.asarray(rgba)[..., 3]
        if alpha.min() < 255:
            notes.append("transparent areas were placed on a white background")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if mode == "CMYK":
        notes.append("CMYK colours converted to RGB")
        return img.convert("RGB")
    if mode != "RGB":
        if mode not in ("L", "P", "1"):
            notes.append(f"{mode} colours converted to RGB")
        return img.convert("RGB")
    return img.copy()


# =========================================================================== results
@dataclass
class Tile:
    image_id: str
    rank: int  # 1-based, as shown
    score: float | None
    judgment: str | None  # "positive", "negative" (explicit negative) or None
    thumb: str | None  # data URI
    first_stage_rank: int | None = None  # 1-based, when reranked
    p_yes: float | None = None
    flag: str | None = None
    reranked: bool = False

    @property
    def moved(self) -> int | None:
        """Positive: moved up by reranking."""
        return None if self.first_stage_rank is None else self.first_stage_rank - self.rank


@dataclass
class Column:
    retriever: str
    modality: str
    tiles: list[Tile] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # of the ranking shown
    first_stage_metrics: dict[str, float] | None = None  # before reranking
    error: str | None = None
    note: str | None = None
    seconds: float = 0.0
    ranking: list[str] = field(default_factory=list, repr=False)  # the full ranking shown (SEARCH_K deep)
    first_stage_ranking: list[str] | None = field(default=None, repr=False)  # before reranking


def fill_metrics(columns: Sequence[Column], query: Query) -> None:
    """Per-column metrics of the shown and first-stage rankings, in one metrics call."""
    jobs = [(c, "metrics", c.ranking) for c in columns if c.error is None]
    jobs += [(c, "first_stage_metrics", c.first_stage_ranking) for c in columns
             if c.error is None and c.first_stage_ranking is not None]
    for (col, attr, _), values in zip(jobs, metrics_many([(r, query) for _, _, r in jobs])):
        setattr(col, attr, values)


@dataclass
class Comparison:
    instruction: str
    reference_thumbs: list[str | None]
    reference_labels: list[str]
    columns: list[Column]
    k: int
    judged: bool  # tiles carry positive / explicit-negative judgments
    query_id: str | None = None
    reranker: str | None = None
    top_n: int | None = None
    n_positives: int | None = None
    n_negatives: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Paraphrase:
    query_id: str
    label: str
    instruction: str


@dataclass
class QueryView:
    query: Query
    paraphrases: list[Paraphrase]
    reference_thumbs: list[str | None]
    facts: list[tuple[str, str]]  # (label, value) lines about the query

    @property
    def paraphrase_index(self) -> int:
        return next(i for i, p in enumerate(self.paraphrases) if p.query_id == self.query.query_id)


@dataclass
class QueryList:
    rows: pd.DataFrame  # query_id, instruction, type, why
    total: int  # matches before the display limit
    note: str


@dataclass
class RunSummary:
    path: Path
    label: str
    matches: str  # "fingerprint" (same benchmark content) or "name" (same benchmark name only)


@dataclass
class Report:
    run: RunSummary
    metrics: pd.DataFrame  # display table with CIs
    plots: list[tuple[Path, str]]
    info: list[str]


# =========================================================================== eval runs
def list_runs(benchmark_name: str, fingerprint: str, root: Path | None = None) -> list[RunSummary]:
    """Eval run folders (with metrics.csv) of this benchmark, newest first.

    A run matches by `run_info.json`'s benchmark fingerprint (same content), else (older
    runs and results-file evaluations, which have no run_info) by the benchmark name in
    metrics.json or the folder name suffix `-<benchmark>`.
    """
    from cir_demo.paths import runs_dir

    root = Path(root) if root is not None else runs_dir()
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        if not (d.is_dir() and (d / "metrics.csv").is_file()):
            continue
        info = _read_json(d / "run_info.json")
        if info is not None:
            if info.get("benchmark_fingerprint") == fingerprint:
                out.append((d.stat().st_mtime, RunSummary(d, d.name, "fingerprint")))
            continue
        meta = _read_json(d / "metrics.json") or {}
        if meta.get("benchmark") == benchmark_name or d.name.endswith(f"-{benchmark_name}"):
            out.append((d.stat().st_mtime, RunSummary(d, d.name, "name")))
    out.sort(key=lambda t: (t[1].matches == "fingerprint", t[0], t[1].label), reverse=True)
    return [r for _, r in out]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def metrics_display_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """The headline columns of metrics.csv with their 95% intervals as 'value [lo, hi]'."""
    wanted = (("mAP@10", "precision@10", "NegRecall@10", "recall@10", "ling_sens_paraphrase_range")
              if "NegRecall@10" in metrics else ("mAP@5", "mAP@10", "mAP@25", "Recall@10", "Recall@1", "Recall@3", "hard_negative@1"))
    heads = [c for c in wanted if c in metrics]
    out = pd.DataFrame({"run": metrics["model"].astype(str) if "model" in metrics else metrics.index.astype(str)})
    for c in heads:
        lo, hi = f"{c}_ci_lo", f"{c}_ci_hi"
        vals = []
        for i in range(len(metrics)):
            v = metrics[c].iloc[i]
            text = "n/a" if pd.isna(v) else f"{v:.4f}"
            if lo in metrics and hi in metrics and not pd.isna(metrics[lo].iloc[i]):
                text += f" [{metrics[lo].iloc[i]:.4f}, {metrics[hi].iloc[i]:.4f}]"
            vals.append(text)
        out[c] = vals
    for c in ("total_queries", "coverage"):
        if c in metrics:
            out[c] = metrics[c].to_numpy()
    return out


def load_report(run: RunSummary) -> Report:
    """The metrics table (with CIs) and plots of one eval run folder."""
    try:
        metrics = pd.read_csv(run.path / "metrics.csv")
    except (OSError, ValueError) as exc:
        raise ServiceError(f"{run.path / 'metrics.csv'}: cannot read ({exc})") from None
    plots = sorted((run.path / "plots").glob("*.png")) if (run.path / "plots").is_dir() else []
    first = ["precision_vs_safety.png", "paraphrase_sensitivity.png", "single_vs_two_image.png"]
    plots.sort(key=lambda p: (first.index(p.name) if p.name in first else len(first), p.name))
    captions = {
        "precision_vs_safety.png": "Precision versus safety: mAP@10 against NegRecall@10 (up-left is better)",
        "paraphrase_sensitivity.png": "Paraphrase sensitivity (lower is more robust)",
        "single_vs_two_image.png": "Single versus two-image queries (mAP@10 with 95% CIs in the table)",
        "per_category.png": "mAP@10 per intent category",
        "per_subcategory.png": "mAP@10 per edit subcategory",
    }
    info = []
    run_info = _read_json(run.path / "run_info.json") or {}
    if run.matches == "name":
        info.append("This run has no benchmark fingerprint; it may come from another version of the benchmark.")
    if run_info.get("reranker"):
        info.append(f"Reranker: {run_info['reranker'].get('backend', '?')} on the top {run_info.get('rerank_top_n')}.")
    meta = _read_json(run.path / "metrics.json") or {}
    if meta.get("n_boot"):
        info.append(f"Intervals: 95% bootstrap over paraphrase groups ({meta['n_boot']} resamples).")
    if (run.path / "report.md").is_file():
        info.append(f"Full report: {run.path / 'report.md'}")
    return Report(run, metrics_display_table(metrics), [(p, captions.get(p.name, p.stem.replace("_", " "))) for p in plots], info)


def read_eval_per_query(run_dir: Path, retriever_specs: Mapping[str, str], reranker_hash: str | None) -> pd.DataFrame | None:
    """per_query.csv rows of an eval run whose retrievers have the given spec hashes.

    Only runs written by the pipeline (run_info.json with specs) qualify: a ranking is
    reused only when it came from the same retriever spec. Reranked rows are kept when
    the reranker's spec hash matches too.
    """
    from cir_demo.rerank.base import spec_hash_of
    from cir_demo.retrievers.base import spec_hash

    info = _read_json(run_dir / "run_info.json")
    if not info or not (run_dir / "per_query.csv").is_file():
        return None
    specs = info.get("retrievers") or {}
    ok = [n for n, h in retriever_specs.items() if n in specs and isinstance(specs[n], dict) and spec_hash(specs[n]) == h]
    if not ok:
        return None
    runs = set(ok)
    rr_spec = info.get("reranker")
    if reranker_hash and isinstance(rr_spec, dict) and spec_hash_of(rr_spec) == reranker_hash:
        runs |= {f"{n}{RERANK_SUFFIX}" for n in ok}
    cols = ["run", "query_id", "group_id", "AP@10", "precision@10", "NegRecall@10", "n_neg"]
    try:
        df = pd.read_csv(run_dir / "per_query.csv", usecols=cols, dtype={"query_id": str, "group_id": str, "run": str})
    except (OSError, ValueError):
        return None
    return df[df["run"].isin(runs)].reset_index(drop=True)


# =========================================================================== the service
class ExplorerService:
    """Answers the app's requests over one benchmark, its retrievers and an optional reranker."""

    def __init__(self, benchmark: Benchmark, engine, retriever_names: Sequence[str], reranker: str | None = None,
                 reranker_note: str = "", config: ServiceConfig | None = None, thumbnails_on_disk: bool = True):
        from cir_demo.retrievers.registry import get_config

        self.benchmark = benchmark
        self.engine = engine
        self.config = config or ServiceConfig(benchmark=benchmark.name)
        self.retriever_names = list(retriever_names)
        self.modality = {n: retriever_modality(get_config(n)) for n in self.retriever_names}
        self.reranker_name = reranker
        self.reranker_note = reranker_note
        self.table = query_table(benchmark)
        self._filter_choices = filter_choices(self.table)
        fp = engine.fingerprint
        self.tiles = ThumbnailStore(engine.open_image, thumbnail_db_path(fp, TILE_PX) if thumbnails_on_disk else None, TILE_PX)
        self.references = ThumbnailStore(engine.open_image, thumbnail_db_path(fp, REFERENCE_PX) if thumbnails_on_disk else None,
                                         REFERENCE_PX, quality=90)
        self._failures: pd.DataFrame | None = None
        self._failure_source = ""
        self._paraphrase_tables: OrderedDict[tuple, pd.DataFrame] = OrderedDict()
        self._lock = threading.RLock()
        self.warnings: list[str] = []

    # ------------------------------------------------------------------ facts
    @property
    def is_world(self) -> bool:
        return self.benchmark.name == "world"

    @property
    def fingerprint(self) -> str:
        return self.engine.fingerprint

    def summary(self) -> str:
        b = self.benchmark
        size = (b.info or {}).get("size")
        name = f"{b.name} ({size})" if size else b.name
        return (f"{name}: {len(b.queries):,} queries in {len(b.groups()):,} intents, {len(b.corpus_ids):,} corpus images; "
                f"retrievers: {', '.join(self.retriever_names) or 'none'}; reranker: {self.reranker_name or 'off'}")

    def filter_choices(self) -> dict[str, list[str]]:
        return dict(self._filter_choices)

    def check_retrievers(self, names: Sequence[str] | None) -> list[str]:
        """The requested columns (default: the first four), validated."""
        names = list(self.retriever_names[:MAX_COLUMNS] if names is None else names)
        unknown = [n for n in names if n not in self.retriever_names]
        if unknown:
            raise ServiceError(f"unknown retriever(s) {', '.join(unknown)}; this app serves: "
                               f"{', '.join(self.retriever_names) or 'none'}")
        if len(names) > MAX_COLUMNS:
            raise ServiceError(f"at most {MAX_COLUMNS} columns side by side; {len(names)} retrievers selected")
        return names

    def query(self, query_id: str) -> Query:
        try:
            return self.benchmark.query(query_id)
        except KeyError:
            raise ServiceError(f"benchmark {self.benchmark.name!r} has no query {query_id!r}") from None

    # ------------------------------------------------------------------ finding queries
    def find_queries(self, text: str = "", filters: Mapping[str, str | None] | None = None, sort: str = "order",
                     limit: int = MAX_QUERY_ROWS, progress: Callable[[str], None] | None = None) -> QueryList:
        rows = filter_queries(self.table, text, filters)
        note = ""
        if sort != "order":
            rows, note = sort_queries(rows, self.failure_stats(progress, need_rerank=sort.startswith("rerank")), sort)
        total = len(rows)
        shown = rows.head(limit)
        kind = shown["intent_category"].where(shown["intent_category"] != NO_VALUE, "")
        display = pd.DataFrame({"query": shown["query_id"].to_numpy(), "instruction": shown["instruction"].to_numpy(),
                                "type": kind.to_numpy(), "refs": shown["n_refs"].to_numpy(),
                                "why": shown["why"].to_numpy() if "why" in shown else ""})
        return QueryList(display, total, note)

    def query_view(self, query_id: str) -> QueryView:
        q = self.query(query_id)
        paraphrases = []
        for i, p in enumerate(self.benchmark.paraphrases(query_id)):
            form = str(p.meta.get("paraphrase_form") or f"phrasing {i + 1}").replace("_", " ")
            paraphrases.append(Paraphrase(p.query_id, form, p.instruction))
        thumbs = self.references.get_many(list(q.reference_ids))
        meta = q.meta
        facts = [("query", q.query_id), ("intent", q.group_id)]
        for key, label in FILTER_FIELDS.items():
            value = meta.get(key)
            if value is not None:
                facts.append((label, filter_value(key, value)))
        facts.append(("judgments", f"{len(q.positives)} positives, {len(q.negatives)} explicit negatives"))
        return QueryView(q, paraphrases, [thumbs[r] for r in q.reference_ids], facts)

    # ------------------------------------------------------------------ retrieval
    def _column(self, name: str, cq, query: Query | None, k: int, rerank: bool, top_n: int) -> Column:
        t0 = time.perf_counter()
        col = Column(name, self.modality.get(name, "composed"))
        try:
            ranking = self.engine.search(name, [cq], k=max(SEARCH_K, k, top_n if rerank else 0))[0]
            ids, scores = list(ranking.ids), list(ranking.scores)
            first_rank = None
            p_yes: dict[str, tuple[float | None, str | None, bool]] = {}
            if rerank:
                items = self.engine.rerank(self.reranker_name, cq, ranking, top_n=top_n,
                                           reranker_kw=dict(self.config.reranker_kwargs))
                first_rank = {it.candidate_id: it.first_stage_rank + 1 for it in items}
                p_yes = {it.candidate_id: (it.p_yes, it.flag, it.reranked) for it in items}
                col.first_stage_ranking = ids
                ids = [it.candidate_id for it in items]
                scores = [it.first_stage_score for it in items]
                flagged = sum(1 for it in items if it.flag)
                if flagged:
                    col.note = f"{flagged} candidate(s) could not be scored and kept their first-stage place"
            col.ranking = ids
            pos, neg = (set(query.positives), set(query.negatives)) if query is not None else (set(), set())
            thumbs = self.tiles.get_many(ids[:k])
            for r, (image_id, score) in enumerate(zip(ids[:k], scores[:k]), 1):
                judged = "positive" if image_id in pos else "negative" if image_id in neg else None
                py, flag, was_reranked = p_yes.get(image_id, (None, None, False))
                col.tiles.append(Tile(image_id, r, score, judged, thumbs.get(image_id),
                                      first_rank.get(image_id) if first_rank else None, py, flag, was_reranked))
        except ServiceError as exc:
            col.error = str(exc)
        except Exception as exc:  # one failing retriever must not blank the other columns
            log.exception("retriever %s failed", name)
            col.error = f"{type(exc).__name__}: {exc}"
        col.seconds = time.perf_counter() - t0
        return col

    def _prescore(self, cq, names: Sequence[str], top_n: int) -> None:
        """Score the union of the columns' top-n blocks in one reranker call. It fills the score
        cache, which each column's rerank then reads: one pass over the reference images and no
        candidate scored twice when retrievers agree. A failure here is left to the columns."""
        if not cq.reference_ids:
            return
        from cir_demo.rerank import RerankRequest
        from cir_demo.rerank.rerank import score_candidates

        union: list[str] = []
        for name in names:
            try:
                union += self.engine.search(name, [cq], k=max(SEARCH_K, top_n))[0].ids[:top_n]
            except Exception:
                continue
        try:
            reranker = self.engine.reranker(self.reranker_name, **dict(self.config.reranker_kwargs))
            request = RerankRequest(cq.reference_images, cq.reference_ids, cq.text)
            score_candidates(request, list(dict.fromkeys(union)), self.engine.open_image, reranker,
                             cache=self.engine.score_cache)
        except Exception:
            log.exception("scoring the union of the top-%d blocks failed", top_n)

    def _check_rerank(self, rerank: bool, top_n: int) -> None:
        if rerank and not self.reranker_name:
            raise ServiceError(self.reranker_note or "no reranker is configured")
        if rerank and (isinstance(top_n, bool) or not isinstance(top_n, int) or not 1 <= top_n <= 100):
            raise ServiceError(f"top n must be an integer from 1 to 100, got {top_n!r}")

    @staticmethod
    def _check_k(k: int) -> int:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= SEARCH_K:
            raise ServiceError(f"results per column must be an integer from 1 to {SEARCH_K}, got {k!r}")
        return k

    def compare(self, query_id: str, retrievers: Sequence[str] | None = None, k: int = 10, rerank: bool = False,
                top_n: int = 20, instruction: str | None = None) -> Comparison:
        """Each retriever's top k for a benchmark query (optionally with another instruction),
        with per-column AP@10, precision@10 and NegRecall@10 against the intent's judgments."""
        q = self.query(query_id)
        names = self.check_retrievers(retrievers)
        k = self._check_k(k)
        self._check_rerank(rerank, top_n)
        if instruction is not None and not instruction.strip():
            raise ServiceError("the instruction is empty")
        cq = self.engine.composed(q, instruction)
        if rerank and len(names) > 1:
            self._prescore(cq, names, top_n)
        columns = [self._column(n, cq, q, k, rerank, top_n) for n in names]
        fill_metrics(columns, q)
        refs = self.references.get_many(list(q.reference_ids))
        labels = [f"Reference image {i + 1} ({r})" if len(q.reference_ids) > 1 else f"Reference image ({r})"
                  for i, r in enumerate(q.reference_ids)]
        return Comparison(cq.text, [refs[r] for r in q.reference_ids], labels, columns, k, True, q.query_id,
                          self.reranker_name if rerank else None, top_n if rerank else None,
                          len(q.positives), len(q.negatives))

    def search_uploads(self, images: Sequence[ValidatedImage], instruction: str, retrievers: Sequence[str] | None = None,
                       k: int = 10, rerank: bool = False, top_n: int = 20) -> Comparison:
        """Each retriever's top k in the loaded corpus for uploaded reference image(s) + an instruction."""
        from cir_demo.retrievers.base import ComposedQuery

        if not 1 <= len(images) <= 2:
            raise ServiceError(f"upload one or two reference images (got {len(images)})")
        if not instruction or not instruction.strip():
            raise ServiceError("type an instruction (what should change in the reference image)")
        if len(images) == 1 and ("<img2>" in instruction):
            raise ServiceError("the instruction mentions <img2> but only one image was uploaded")
        names = self.check_retrievers(retrievers)
        k = self._check_k(k)
        self._check_rerank(rerank, top_n)
        cq = ComposedQuery(tuple(v.image for v in images), instruction.strip(), None, tuple(v.content_id for v in images))
        if rerank and len(names) > 1:
            self._prescore(cq, names, top_n)
        columns = [self._column(n, cq, None, k, rerank, top_n) for n in names]
        notes = [f"{v.name}: {n}" for v in images for n in v.notes]
        if self.is_world:
            notes.insert(0, WORLD_UPLOAD_NOTE)
        labels = [f"Reference image {i + 1} ({v.name})" if len(images) > 1 else f"Reference image ({v.name})"
                  for i, v in enumerate(images)]
        return Comparison(cq.text, [encode_jpeg_data_uri(v.image, REFERENCE_PX, 90) for v in images], labels, columns, k,
                          False, None, self.reranker_name if rerank else None, top_n if rerank else None, notes=notes)

    def paraphrase_table(self, query_id: str, retrievers: Sequence[str] | None = None) -> pd.DataFrame:
        """AP@10 of every paraphrase of the query's intent under each retriever (first stage),
        plus a last row with the range (max - min) per retriever."""
        q = self.query(query_id)
        names = self.check_retrievers(retrievers)
        key = (q.group_id, tuple(names))
        with self._lock:
            if key in self._paraphrase_tables:
                self._paraphrase_tables.move_to_end(key)
                return self._paraphrase_tables[key].copy()
        group = self.benchmark.paraphrases(query_id)
        cqs = [self.engine.composed(p) for p in group]
        forms = [str(p.meta.get("paraphrase_form") or f"phrasing {i + 1}").replace("_", " ") for i, p in enumerate(group)]
        table = pd.DataFrame({"paraphrase": forms, "instruction": [p.instruction for p in group]})
        pairs, owners = [], []
        for name in names:
            try:
                rankings = self.engine.search(name, cqs, k=SEARCH_K)
            except Exception as exc:  # that column shows n/a; the rest of the table stands
                log.exception("paraphrase table: %s failed", name)
                table[name] = float("nan")
                continue
            pairs += [(r.ids, p) for r, p in zip(rankings, group)]
            owners += [name] * len(group)
        values = metrics_many(pairs)
        for name in dict.fromkeys(owners):
            table[name] = [v["AP@10"] for v, o in zip(values, owners) if o == name]
        spread = {"paraphrase": "range (max − min)", "instruction": ""}
        spread.update({n: float(table[n].max() - table[n].min()) for n in names})
        table = pd.concat([table, pd.DataFrame([spread])], ignore_index=True)
        table = table[["paraphrase", *names, "instruction"]]  # numbers first: the instruction is long
        with self._lock:
            self._paraphrase_tables[key] = table
            while len(self._paraphrase_tables) > 256:
                self._paraphrase_tables.popitem(last=False)
        return table.copy()

    def reranker_prompt(self, instruction: str, n_references: int) -> str:
        """The exact prompt the reranker sends (images shown as markers)."""
        if not self.reranker_name:
            return self.reranker_note or "no reranker is configured"
        from cir_demo.rerank import RerankRequest

        reranker = self.engine.reranker(self.reranker_name, **dict(self.config.reranker_kwargs))
        ids = tuple(f"ref{i + 1}" for i in range(n_references))
        return reranker.prompt_text(RerankRequest((None,) * n_references, ids, instruction))

    # ------------------------------------------------------------------ failure statistics
    def _spec_hashes(self) -> dict[str, str]:
        out = {}
        for n in self.retriever_names:
            try:
                out[n] = self.engine.retriever(n).spec_hash()
            except Exception as exc:
                log.warning("retriever %s: %s", n, exc)
        return out

    def failure_stats(self, progress: Callable[[str], None] | None = None, need_rerank: bool = False) -> pd.DataFrame:
        """Per-query failure measures over the app's retrievers (see `failure_scores`).

        From the latest eval run of this benchmark content with the same retriever specs when
        there is one; the rest is computed here once (all queries, every retriever) and cached
        on disk. Reranked deltas come from the eval run, or are computed when
        `need_rerank` and the work is small (`max_rerank_scores`).
        """
        with self._lock:
            if self._failures is not None and (not need_rerank or "rerank_gain" in self._failures or not self.reranker_name):
                return self._failures
            per_query = self._gather_per_query(progress, need_rerank)
            self._failures = failure_scores(per_query, {n: self.modality[n] for n in self.retriever_names})
            return self._failures

    @property
    def failure_source(self) -> str:
        return self._failure_source

    max_rerank_scores = 30_000  # candidate scores the app may compute for the reranker sorts

    def _gather_per_query(self, progress: Callable[[str], None] | None, need_rerank: bool) -> pd.DataFrame:
        if not self.retriever_names:
            raise ServiceError("no retrievers are loaded, so there are no results to sort by")
        hashes = self._spec_hashes()
        rr_hash = None
        if self.reranker_name:
            try:
                rr_hash = self.engine.reranker(self.reranker_name, **dict(self.config.reranker_kwargs)).spec_hash()
            except Exception as exc:
                log.warning("reranker %s: %s", self.reranker_name, exc)
        parts: list[pd.DataFrame] = []
        have: set[str] = set()
        sources = []
        for run in list_runs(self.benchmark.name, self.fingerprint):
            if run.matches != "fingerprint":
                continue
            df = read_eval_per_query(run.path, {n: h for n, h in hashes.items() if n not in have}, rr_hash)
            if df is None or not len(df):
                continue
            df = df[df["query_id"].isin(set(self.table["query_id"]))]
            # a run counts only when it covers every query the app shows (e.g. not an `--limit` eval)
            covered = df.groupby("run")["query_id"].nunique()
            new = sorted(set(covered[covered == len(self.table)].index) - have)
            parts.append(df[df["run"].isin(new)])
            have |= set(new)
            sources.append(run.label)
            if all(n in have for n in hashes) and (not rr_hash or all(f"{n}{RERANK_SUFFIX}" in have for n in hashes)):
                break
        for name in self.retriever_names:
            if name not in have and name in hashes:
                parts.append(self._computed_per_query(name, hashes[name], progress))
                have.add(name)
                sources.append(f"{name} computed here")
        if need_rerank and rr_hash and not any(f"{n}{RERANK_SUFFIX}" in have for n in hashes):
            cost = len(self.benchmark.queries) * len(hashes) * self.config.default_top_n
            if cost <= self.max_rerank_scores:
                for name in hashes:
                    parts.append(self._computed_rerank_per_query(name, hashes[name], rr_hash, progress))
                sources.append("reranker effect computed here")
            else:
                raise ServiceError(
                    f"sorting by the reranker's effect needs reranked results for all {len(self.benchmark.queries):,} "
                    f"queries ({cost:,} candidate scores); run `python app.py --eval` (it reranks with "
                    f"{self.reranker_name}) and reload the app")
        self._failure_source = "; ".join(sources)
        return pd.concat(parts, ignore_index=True)

    def _per_query_cache(self, name: str) -> Path:
        from cir_demo.paths import cache_dir

        return cache_dir() / "app" / "per_query" / self.fingerprint / f"{name}.csv"

    def _computed_per_query(self, name: str, spec_hash: str, progress) -> pd.DataFrame:
        from cir_demo.metrics.pinpoint import per_query
        from cir_demo.utils.io import write_text_atomic

        path = self._per_query_cache(name).with_name(f"{name}-{spec_hash[:16]}.csv")
        if path.is_file():
            try:
                return pd.read_csv(path, dtype={"query_id": str, "group_id": str, "run": str})
            except (OSError, ValueError):
                pass

        def report(done: int, total: int) -> None:
            if progress:
                progress(f"retrieving with {name}: {done:,}/{total:,} queries")

        run, _ = self.engine.run_benchmark(name, k=SEARCH_K, progress=report)
        df = per_query(run, self.benchmark.queries)[["query_id", "group_id", "AP@10", "precision@10", "NegRecall@10", "n_neg"]]
        df.insert(0, "run", name)
        write_text_atomic(path, df.to_csv(index=False))
        return df

    def _computed_rerank_per_query(self, name: str, spec_hash: str, rr_hash: str, progress) -> pd.DataFrame:
        from cir_demo.metrics.pinpoint import per_query
        from cir_demo.rerank import rerank_run
        from cir_demo.utils.io import write_text_atomic

        top_n = self.config.default_top_n
        path = self._per_query_cache(name).with_name(f"{name}-{spec_hash[:16]}+{rr_hash}-top{top_n}.csv")
        if path.is_file():
            try:
                return pd.read_csv(path, dtype={"query_id": str, "group_id": str, "run": str})
            except (OSError, ValueError):
                pass
        if progress:
            progress(f"reranking the top {top_n} of {name} for every query")
        run, scores = self.engine.run_benchmark(name, k=SEARCH_K)
        reranker = self.engine.reranker(self.reranker_name, **dict(self.config.reranker_kwargs))
        rr = rerank_run(self.benchmark.queries, run, self.engine.open_image, reranker, top_n=top_n,
                        cache=self.engine.score_cache, run_scores=scores, progress=False)
        df = per_query(rr.run, self.benchmark.queries)[["query_id", "group_id", "AP@10", "precision@10", "NegRecall@10", "n_neg"]]
        df.insert(0, "run", f"{name}{RERANK_SUFFIX}")
        write_text_atomic(path, df.to_csv(index=False))
        return df

    # ------------------------------------------------------------------ report
    def runs(self) -> list[RunSummary]:
        return list_runs(self.benchmark.name, self.fingerprint)

    def report(self, label: str | None = None) -> Report | None:
        runs = self.runs()
        if not runs:
            return None
        if label is None:
            return load_report(runs[0])
        for r in runs:
            if r.label == label:
                return load_report(r)
        raise ServiceError(f"no eval run {label!r} for benchmark {self.benchmark.name!r}")


# =========================================================================== loading
@dataclass
class LoadStatus:
    stage: str
    done: bool
    error: str | None
    elapsed: float
    detail: str = ""

    def text(self) -> str:
        if self.error:
            return f"Loading failed: {self.error}"
        if self.done:
            return f"Ready in {self.elapsed:.1f} s."
        return f"{self.stage} ({self.elapsed:.0f} s){': ' + self.detail if self.detail else ''}"


def live_progress_bars() -> str:
    """What the running tqdm bars say (index builds, world generation), for the status line."""
    try:
        from tqdm import tqdm

        bars = list(getattr(tqdm, "_instances", []))
    except Exception:
        return ""
    parts = []
    for bar in bars:
        total = getattr(bar, "total", None)
        if total:
            parts.append(f"{getattr(bar, 'desc', '') or 'working'} {getattr(bar, 'n', 0):,}/{int(total):,}")
    return "; ".join(parts)


class ServiceLoader:
    """Builds an `ExplorerService` in a background thread so the page can show progress:
    the world generated on first use, retriever models loaded, indexes built or loaded."""

    def __init__(self, config: ServiceConfig, start: bool = True):
        self.config = config
        self._service: ExplorerService | None = None
        self._error: BaseException | None = None
        self._stage = "starting"
        self._t0 = time.perf_counter()
        self._t_done: float | None = None
        self._event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cir-demo-loader", daemon=True)
        if start:
            self._thread.start()

    def start(self) -> "ServiceLoader":
        if not self._thread.is_alive() and not self._event.is_set():
            self._thread.start()
        return self

    def _set(self, stage: str) -> None:
        self._stage = stage
        log.info("loading: %s", stage)

    def _run(self) -> None:
        try:
            self._service = build_service(self.config, self._set)
        except BaseException as exc:  # reported on the page; the server stays up
            log.exception("loading the explorer failed")
            self._error = exc
        finally:
            self._t_done = time.perf_counter()
            self._event.set()

    def status(self) -> LoadStatus:
        end = self._t_done if self._t_done is not None else time.perf_counter()
        err = None if self._error is None else f"{type(self._error).__name__}: {self._error}"
        return LoadStatus(self._stage, self._event.is_set() and self._error is None, err, end - self._t0,
                          "" if self._event.is_set() else live_progress_bars())

    @property
    def ready(self) -> bool:
        return self._event.is_set() and self._service is not None

    def wait(self, timeout: float | None = None) -> ExplorerService:
        """The service; raises ServiceError if loading failed or is still running after `timeout`."""
        if not self._event.wait(timeout):
            raise ServiceError(f"still loading: {self.status().text()}")
        if self._service is None:
            raise ServiceError(f"the explorer could not load: {self.status().error}")
        return self._service


class RememberingStore:
    """Wraps an image store while indexes are built: images opened once are kept (up to
    `max_bytes` of pixels), so a second retriever that cannot share corpus embeddings
    (`Retriever.image_spec`) encodes the corpus without rendering it again. Dropped
    once loading is done; costs nothing when every index already exists."""

    def __init__(self, inner, max_bytes: int = 1 << 30):
        self.inner = inner
        self.max_bytes = max_bytes
        self.used = 0
        self._kept: dict[str, Any] = {}

    def source(self, image_id: str):
        return self.inner.source(image_id)

    def open(self, image_id: str):
        img = self._kept.get(image_id)
        if img is None:
            img = self.inner.open(image_id)
            size = img.width * img.height * len(img.getbands())
            if self.used + size <= self.max_bytes:
                self._kept[image_id] = img
                self.used += size
        return img


def _load_indexes(engine, names: Sequence[str], config: ServiceConfig, stage: Callable[[str], None],
                  notes: list[str]) -> list[str]:
    """Load each retriever and its index (building it on first use); returns those that loaded."""
    loaded = []
    for i, name in enumerate(names, 1):
        stage(f"retriever {i}/{len(names)} {name}: loading the model and its index (built on first use)")
        try:
            engine.index(name)
        except Exception as exc:  # the other columns still work
            log.exception("retriever %s failed to load", name)
            notes.append(f"{name} could not be loaded and is left out ({type(exc).__name__}: {exc})")
            continue
        loaded.append(name)
        stale = engine.stale_reasons(name) if config.allow_stale else []
        if stale:
            notes.append(f"{name}: serving a stale index ({'; '.join(stale)})")
    return loaded


def build_service(config: ServiceConfig, stage: Callable[[str], None] = lambda s: None) -> ExplorerService:
    """Load the benchmark, resolve retrievers and reranker, load models and indexes."""
    from cir_demo.benchmarks.registry import load_benchmark
    from cir_demo.rerank import BACKENDS
    from cir_demo.retrievers.registry import list_retrievers

    stage(f"loading benchmark {config.benchmark!r}" + (" (the offline world is generated on first use)"
                                                         if config.benchmark == "world" else ""))
    bench = load_benchmark(config.benchmark, **dict(config.benchmark_kwargs))
    if config.limit_groups:
        bench = bench.limit(config.limit_groups)
    known = [r["name"] for r in list_retrievers()]
    names = list(config.retrievers) if config.retrievers else default_retrievers(bench.name, known)
    notes = []
    if not names:
        notes.append("No retrievers: " + (
            "none of the world models (" + ", ".join(WORLD_RETRIEVERS) + ") is registered yet; train them "
            "(`python -m cir_demo train ...`, see docs/world_models.md) or start with --retrievers NAME,..."
            if bench.name == "world" else "start the app with --retrievers NAME,... "
            "(`python -m cir_demo retrievers list` shows them)"))
    reranker, rr_note = resolve_reranker(bench.name, config.reranker, BACKENDS)
    stage("loading retrieval libraries")
    from cir_demo.engine import RetrievalEngine

    engine = RetrievalEngine(bench, names, device=config.device, allow_stale=config.allow_stale, progress=True,
                             trust_remote_code=config.trust_remote_code)
    store = bench.images
    if store is not None and len(names) > 1:
        bench.images = RememberingStore(store)  # the engine holds this same benchmark object
    try:
        loaded = _load_indexes(engine, names, config, stage, notes)
    finally:
        bench.images = store
    names = loaded
    if config.threads and names:
        import torch

        torch.set_num_threads(config.threads)
    for name in names:  # bars were for the index builds; per-query encoding stays quiet
        retriever = engine.retriever(name)
        if hasattr(retriever, "progress"):
            retriever.progress = False
    if reranker:
        stage(f"loading reranker {reranker}")
        try:
            engine.reranker(reranker, **dict(config.reranker_kwargs))
        except Exception as exc:  # the app works without the toggle
            log.exception("reranker %s failed to load", reranker)
            rr_note = f"The reranker {reranker!r} could not be loaded ({type(exc).__name__}: {exc}); the toggle is off."
            reranker = None
    stage("preparing the explorer")
    if config.pixel_cache and bench.images is not None:
        bench.images = PixelCachedStore(bench.images, pixel_db_path(engine.fingerprint))
    service = ExplorerService(bench, engine, names, reranker, rr_note, config)
    service.warnings.extend(notes)
    if config.warm_thumbnails and bench.images is not None:
        pixels = ([{"db_path": str(bench.images.db_path), "kind": "png"}]
                  if isinstance(bench.images, PixelCachedStore) else [])
        jpeg = lambda t: {"db_path": str(t.db_path), "kind": "jpeg", "size": t.size, "quality": t.quality}  # noqa: E731
        start_image_warmer(config, [
            {"what": "references", "targets": [jpeg(service.references)] + pixels},
            {"what": "corpus", "targets": [jpeg(service.tiles)] + pixels}])
    return service

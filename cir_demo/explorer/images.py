"""Images for the page: data-URI thumbnails (memory LRU over an SQLite file), a lossless pixel
cache in front of a benchmark's image store, and the low-priority process that fills both."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from cir_demo.benchmarks.schema import Benchmark
from cir_demo.explorer.config import ServiceConfig
from cir_demo.utils.lru import LRU

log = logging.getLogger(__name__)


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

    def __init__(
        self,
        open_image: Callable[[str], Any],
        db_path: str | Path | None,
        size: int,
        quality: int = 85,
        max_memory: int = 8192,
    ):
        self.open_image = open_image
        self.size = size
        self.quality = quality
        self.db_path = Path(db_path) if db_path is not None else None
        self.max_memory = max_memory
        self._mem = LRU(max_memory)
        self._lock = threading.Lock()
        self._local = threading.local()
        self.counts = {"memory": 0, "disk": 0, "rendered": 0}  # where thumbnails came from (benchmarks read it)
        self.db_path, self.warning = usable_blob_db(self.db_path, "thumbnail cache")
        # images that could not be opened were logged once: a benchmark served without its images (`--runs`)
        # would otherwise log every tile of every view
        self._logged_missing = LRU(max_memory)

    def _db(self) -> sqlite3.Connection | None:
        if self.db_path is None:
            return None
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = open_blob_db(self.db_path)
        return db

    def _remember(self, image_id: str, uri: str) -> None:
        self._mem.put(image_id, uri)

    def get_many(self, image_ids: Sequence[str]) -> dict[str, str | None]:
        """{id: data URI, or None when the image cannot be opened}."""
        out: dict[str, str | None] = {}
        for i in image_ids:
            uri = self._mem.get(i)
            if uri is not None:
                out[i] = uri
        with self._lock:
            self.counts["memory"] += len(out)
        todo = [i for i in dict.fromkeys(image_ids) if i not in out]
        db = self._db()
        if todo and db is not None:
            for start in range(0, len(todo), 500):
                chunk = todo[start : start + 500]
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
                if self._logged_missing.get(image_id) is None:
                    log.warning("thumbnail %s: %s", image_id, exc)
                    self._logged_missing.put(image_id, True)
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


def usable_blob_db(path: Path | None, what: str) -> tuple[Path | None, str | None]:
    """(path, None) when the cache file can be opened and written; a damaged file is moved aside
    and started afresh; otherwise (None, one-line warning): the caller keeps its data in memory.
    These caches are optimisations: they never stop the app."""
    if path is None:
        return None, None
    try:
        open_blob_db(path).close()
        return path, None
    except sqlite3.DatabaseError as exc:
        try:
            path.rename(path.with_name(f"{path.name}.damaged-{int(time.time())}"))
            open_blob_db(path).close()
            return path, f"{what} {path} was damaged ({exc}); moved it aside and started a new one"
        except (OSError, sqlite3.Error) as exc2:
            return None, f"{what} {path} cannot be used ({exc2}); working in memory"
    except OSError as exc:
        return None, f"{what} {path} cannot be used ({exc}); working in memory"


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
    everything else from the wrapped store. Decoding a cached world image is several times cheaper
    than rendering it, and reranking opens every candidate."""

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


def warm_images(
    benchmark: Benchmark,
    image_ids: Sequence[str],
    targets: Sequence[dict],
    batch: int = 64,
    keep_going: Callable[[], bool] = lambda: True,
) -> int:
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
        for image_id in todo[start : start + batch]:
            try:
                img = benchmark.images.open(image_id)
            except Exception:
                continue
            opened += 1
            for t, h, out in zip(targets, have, rows):
                if image_id not in h:
                    out.append(
                        (
                            image_id,
                            png_bytes(img)
                            if t["kind"] == "png"
                            else jpeg_bytes(img, int(t["size"]), int(t["quality"])),
                        )
                    )
        for db, out in zip(dbs, rows):
            with db:
                db.executemany("INSERT OR IGNORE INTO blobs VALUES (?, ?)", out)
    for db in dbs:
        db.close()
    return opened


def warm_thumbnails(
    benchmark: Benchmark, db_path: Path, size: int, quality: int = 85, image_ids: Sequence[str] | None = None
) -> int:
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
    # the app names itself: read here, the parent may already be gone (an app stopped as it became ready)
    # and this process adopted, and the warmer would then outlive it with the whole corpus to render
    parent = args.get("parent", os.getppid())
    if os.getppid() != parent:
        return
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
    payload = json.dumps(
        {
            "benchmark": config.benchmark,
            "kwargs": dict(config.benchmark_kwargs),
            "limit_groups": config.limit_groups,
            "jobs": jobs,
            "limit": limit,
            "parent": os.getpid(),
        },
        default=str,
    )
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from cir_demo.explorer.images import _warm_main; _warm_main(sys.argv[1])",
                payload,
            ],
            cwd=str(REPO_ROOT),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError as exc:
        log.warning("thumbnail warmer not started: %s", exc)
        return None

    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()

    atexit.register(stop)
    import threading

    threading.Thread(target=proc.wait, name="cir-warmer-reaper", daemon=True).start()  # no zombie once it is done
    return proc

"""Bulk, resumable image fetching into a benchmark's image cache.

Parallel downloads (threads: the work is waiting on the network) over the project's one
HTTP client (`cir_demo.utils.http`: connections reused, its retry policy for timeouts,
429 with Retry-After and 5xx), plus a retry for truncated or undecodable bodies; no retry
for answers that will not change (404, 410, 403: the pin is gone). Every file is
validated by decoding it before it is written,
and written atomically, so an interrupted fetch leaves only whole images and the
next run resumes by skipping them. Ids that could not be fetched are returned
and written to a tab-separated report (`id<TAB>reason`).
"""

from __future__ import annotations

import io
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from cir_demo.utils.http import HttpError, RetryableBody, RetryPolicy, request
from cir_demo.utils.io import atomic_path, write_text_atomic

USER_AGENT = "cir_demo/1 (benchmark image fetch)"
PERMANENT_HTTP = (400, 401, 403, 404, 410, 451)
REPORT_NAME = "fetch_failed.tsv"
REPORT_HEADER = "id\treason\n"  # how a report an earlier fetch wrote is told from a user's file


class PermanentFetchError(Exception):
    """The server says this image will not come (404, 403, ...): do not retry."""


class TransientFetchError(RetryableBody):
    """Worth another try after a pause (timeouts, 5xx, truncated or corrupt bodies)."""


@dataclass
class FetchReport:
    requested: int
    already_present: int = 0
    fetched: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # id -> reason
    permanent: set[str] = field(default_factory=set)  # failed ids the server says are gone (no use retrying)
    report_path: Path | None = None
    seconds: float = 0.0

    @property
    def present(self) -> int:
        return self.already_present + self.fetched

    @property
    def coverage(self) -> float:
        return self.present / self.requested if self.requested else 1.0

    def summary(self) -> str:
        text = (
            f"{self.present} of {self.requested} images present ({100 * self.coverage:.1f}%): "
            f"{self.already_present} already there, {self.fetched} fetched, {len(self.failed)} failed "
            f"in {self.seconds:.1f} s"
        )
        if self.failed and self.report_path is not None:
            text += f"; the ids that could not be fetched and why: {self.report_path}"
        return text


def validate_image_bytes(data: bytes) -> None:
    """Raise TransientFetchError unless `data` decodes as an image (refuses error pages and truncated files)."""
    from PIL import Image

    if not data:
        raise TransientFetchError("empty body")
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # a full decode: verify() alone accepts some truncated JPEGs
    except Exception as exc:  # PIL raises several types for bad data
        raise TransientFetchError(f"not a valid image ({type(exc).__name__}: {exc})") from None


def fetch_one(
    url: str, dest: Path, *, retries: int, backoff_s: float, timeout: float, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Download `url`, validate it, write it to `dest` atomically; a transient failure or a body
    that does not decode is tried again `retries` times (`cir_demo.utils.http.RetryPolicy`)."""
    try:
        response = request(
            "GET",
            url,
            timeout=timeout,
            policy=RetryPolicy(retries, backoff_s),
            headers={"User-Agent": USER_AGENT},
            check=validate_image_bytes,
            sleep=sleep,
        )
    except HttpError as exc:
        if exc.kind == "status" and exc.status in PERMANENT_HTTP:
            raise PermanentFetchError(str(exc)) from None
        raise TransientFetchError(str(exc)) from None
    with atomic_path(dest) as tmp:
        tmp.write_bytes(response.content)


_PARTIAL_FILE = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")  # utils.io.atomic_path's `.<name>.<mkstemp>.tmp`


def _remove_partial_files(folder: Path) -> None:
    """Temporary files an interrupted fetch left behind: only atomic_path's names (`.<name>.<8>.tmp`)."""
    if folder.is_dir():
        for p in folder.glob(".*.tmp"):
            try:
                if _PARTIAL_FILE.fullmatch(p.name) and p.is_file():
                    p.unlink()
            except OSError:
                pass


def _in_data_folder(folder: Path) -> bool:
    from cir_demo.paths import cache_dir

    try:
        return cache_dir().resolve() in folder.resolve().parents
    except Exception:  # a data folder variable naming a file: no folder is the project's
        return False


def fetch_images(
    store,
    ids: Iterable[str],
    *,
    workers: int = 16,
    retries: int = 3,
    backoff_s: float = 0.5,
    timeout: float = 20.0,
    progress: bool = True,
    report_path: str | Path | None = None,
) -> FetchReport:
    """Fetch every id in `ids` that `store` (a `FolderImageStore` with a URL pattern and a
    cache folder) does not have locally. Returns what happened; failed ids are also
    written to `report_path` (default `<cache folder>/fetch_failed.tsv`)."""
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    ids = list(dict.fromkeys(ids))
    report = FetchReport(requested=len(ids))
    if getattr(store, "cache_dir", None) is None or getattr(store, "url_pattern", None) is None:
        raise ValueError(
            "this benchmark's images cannot be fetched: its image store has no URL pattern "
            "or no cache folder; put the images in the folder given by --image-dir"
        )
    cache = Path(store.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    ours = _in_data_folder(cache)  # only there is anything removed: a user's folder keeps every file
    if ours:
        _remove_partial_files(cache)
    todo = [i for i in ids if store.local_path(i) is None]
    report.already_present = len(ids) - len(todo)
    lock = threading.Lock()

    def one(image_id: str) -> tuple[str, str | None, bool]:
        try:
            fetch_one(
                store.url(image_id), store._cache_path(image_id), retries=retries, backoff_s=backoff_s, timeout=timeout
            )
            return image_id, None, False
        except TransientFetchError as exc:
            return image_id, str(exc), False
        except OSError as exc:  # writing it (disk full, a folder that went away): worth another run
            return image_id, f"cannot write it: {exc}", False
        except (PermanentFetchError, ValueError) as exc:  # gone, or an id that cannot be a name or address
            return image_id, str(exc), True

    with tqdm(
        total=len(ids), initial=report.already_present, desc="fetch images", unit="img", disable=not progress
    ) as bar:
        if todo:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                futures = [pool.submit(one, i) for i in todo]
                for fut in as_completed(futures):
                    image_id, error, permanent = fut.result()
                    with lock:
                        if error is None:
                            report.fetched += 1
                        else:
                            report.failed[image_id] = error
                            if permanent:
                                report.permanent.add(image_id)
                        bar.update(1)
                        bar.set_postfix(failed=len(report.failed), refresh=False)
    path = Path(report_path) if report_path is not None else cache / REPORT_NAME
    if report.failed:
        if report_path is not None and os.path.lexists(path):  # an earlier report the user named: kept
            from cir_demo.utils.owned_folder import set_aside

            set_aside(path)
        write_text_atomic(path, REPORT_HEADER + "".join(f"{i}\t{r}\n" for i, r in sorted(report.failed.items())))
        report.report_path = path
    elif path.is_file() and report_path is None and ours:
        path.unlink()  # an old report of failures that are now fixed
    report.seconds = time.perf_counter() - t0
    return report

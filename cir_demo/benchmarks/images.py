"""Image stores for benchmarks whose images live in a folder, on a CDN, or both.

`FolderImageStore` looks for an image in a local folder first (the configured
file name, then the same stem with .jpg/.jpeg/.png), then in its download
cache, and only then fetches it from a URL pattern into the cache. With
`online=False` (the default) it never touches the network: a missing image is
a clear `ImageUnavailableError` naming the id, the paths tried and the URL.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Mapping

from cir_demo.benchmarks.schema import ImageSource, ImageStore
from cir_demo.utils.io import atomic_path

_ALT_SUFFIXES = (".jpg", ".jpeg", ".png")
_HEX = re.compile(r"^[0-9a-f]{6,}$")
_USER_AGENT = "cir_demo/1 (benchmark image fetch)"


class ImageUnavailableError(FileNotFoundError):
    """An image id could not be resolved to readable pixels."""


def pinpoint_cdn_url(signature: str) -> str:
    """The public PinPoint CDN address of an image signature (official README pattern)."""
    s = str(signature).strip().lower()
    if not _HEX.match(s):
        raise ValueError(f"not a PinPoint image signature (lowercase hex, >= 6 chars): {signature!r}")
    return f"https://i.pinimg.com/736x/{s[0:2]}/{s[2:4]}/{s[4:6]}/{s}.jpg"


def check_image_id(image_id: str) -> str:
    """Reject ids that would escape the image folder when used as a file name."""
    s = str(image_id)
    if not s or s in (".", "..") or "/" in s or "\\" in s or "\x00" in s:
        raise ValueError(f"image id {image_id!r} cannot be used as a file name")
    return s


class FolderImageStore(ImageStore):
    """Local folder first, else a URL fetched lazily into an on-disk cache.

    filename_pattern: `str.format` pattern with `{id}` (e.g. "{id}.jpg", or
        "{id:0>12}.jpg" for zero-padded COCO names).
    filenames: optional explicit id -> file name (relative to `root`), used
        before the pattern (EDIR and COCO annotation files name each file).
    url_pattern: "https://host/{id}.jpg" or a function id -> URL.
    cache_dir: where fetched images are kept (required for fetching).
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        filename_pattern: str = "{id}.jpg",
        url_pattern: str | Callable[[str], str] | None = None,
        cache_dir: str | os.PathLike | None = None,
        online: bool = False,
        *,
        filenames: Mapping[str, str] | None = None,
        timeout: float = 20.0,
    ):
        if "{id" not in filename_pattern:
            raise ValueError(f"filename_pattern must contain '{{id}}', got {filename_pattern!r}")
        self.root = Path(root) if root is not None else None
        self.filename_pattern = filename_pattern
        self.url_pattern = url_pattern
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.online = bool(online)
        self.filenames = dict(filenames) if filenames else {}
        self.timeout = float(timeout)

    # ------------------------------------------------------------------ lookup
    def _file_name(self, image_id: str) -> str:
        return self.filenames.get(image_id) or self.filename_pattern.format(id=image_id)

    def candidate_paths(self, image_id: str) -> list[Path]:
        """Local paths tried in order: the folder (named, then other suffixes), then the cache."""
        check_image_id(image_id)
        name = self._file_name(image_id)
        out: list[Path] = []
        if self.root is not None:
            first = self.root / name
            out.append(first)
            # same stem, other usual suffixes (string ops: ids may contain dots)
            stem = name[: -len(first.suffix)] if first.suffix.lower() in _ALT_SUFFIXES else name
            out += [self.root / (stem + s) for s in _ALT_SUFFIXES if self.root / (stem + s) != first]
        if self.cache_dir is not None:
            out.append(self._cache_path(image_id))
        return out

    def local_path(self, image_id: str) -> Path | None:
        """The first existing local file for `image_id` (folder or cache), else None."""
        for p in self.candidate_paths(image_id):
            if p.is_file():
                return p
        return None

    def exists(self, image_id: str) -> bool:
        return self.local_path(image_id) is not None

    def url(self, image_id: str) -> str | None:
        if self.url_pattern is None:
            return None
        if callable(self.url_pattern):
            return self.url_pattern(image_id)
        return self.url_pattern.format(id=image_id)

    def _cache_path(self, image_id: str) -> Path:
        assert self.cache_dir is not None
        suffix = Path(self._file_name(image_id)).suffix or ".jpg"
        return self.cache_dir / f"{check_image_id(image_id)}{suffix}"

    def source(self, image_id: str) -> ImageSource:
        local = self.local_path(image_id)
        if local is not None:
            return ImageSource("file", str(local))
        url = self.url(image_id)
        if url is not None:
            return ImageSource("url", url)
        paths = self.candidate_paths(image_id)
        return ImageSource("file", str(paths[0]) if paths else self._file_name(image_id))

    # ------------------------------------------------------------------ open
    def _open(self, image_id: str):
        from PIL import Image

        path = self.local_path(image_id) or self.fetch(image_id)
        try:
            with Image.open(path) as img:
                img.load()
                return img.copy()
        except OSError as exc:
            raise ImageUnavailableError(f"image {image_id!r}: cannot decode {path}: {exc}") from exc

    def fetch(self, image_id: str) -> Path:
        """Download `image_id` into the cache and return its path (atomic write)."""
        tried = ", ".join(str(p) for p in self.candidate_paths(image_id)) or "(no image folder configured)"
        url = self.url(image_id)
        if url is None:
            raise ImageUnavailableError(
                f"image {image_id!r} not found locally (tried {tried}) and no URL pattern is set"
            )
        if not self.online:
            raise ImageUnavailableError(
                f"image {image_id!r} not found locally (tried {tried}); it is at {url}: fetch the benchmark's "
                "images with `python -m cir_demo images fetch` and the same benchmark flags (or add --fetch-images), "
                "or put the file in the folder given by --image-dir"
            )
        if self.cache_dir is None:
            raise ImageUnavailableError(f"image {image_id!r}: cannot fetch {url} without a cache_dir")
        dest = self._cache_path(image_id)
        data = _download(url, self.timeout, image_id)
        _check_decodes(data, image_id, url)
        with atomic_path(dest) as tmp:
            tmp.write_bytes(data)
        return dest


def _download(url: str, timeout: float, image_id: str) -> bytes:
    """One try (someone is waiting on this image) over the project's shared HTTP client."""
    from cir_demo.utils.http import HttpError, RetryPolicy, request

    try:
        return request(
            "GET", url, timeout=timeout, policy=RetryPolicy(retries=0), headers={"User-Agent": _USER_AGENT}
        ).content
    except HttpError as exc:
        if exc.kind == "status":
            raise ImageUnavailableError(f"image {image_id!r}: HTTP {exc.status} from {url}") from exc
        raise ImageUnavailableError(f"image {image_id!r}: cannot fetch {url}: {exc}") from exc


def _check_decodes(data: bytes, image_id: str, url: str) -> None:
    """Refuse to cache an error page or a truncated file as an image."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    except Exception as exc:  # PIL raises several types for bad data
        raise ImageUnavailableError(f"image {image_id!r}: {url} did not return a valid image ({exc})") from exc

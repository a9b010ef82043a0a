"""Validation of uploaded reference images: refuse what cannot be used, fix what can (with notes)."""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cir_demo.explorer.config import UploadError

ALLOWED_FORMATS = {
    "JPEG": "JPEG",
    "PNG": "PNG",
    "WEBP": "WebP",
    "GIF": "GIF",
    "BMP": "BMP",
    "TIFF": "TIFF",
    "MPO": "JPEG",
}
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


def validate_upload(
    path: str | os.PathLike,
    name: str | None = None,
    max_bytes: int = MAX_UPLOAD_BYTES,
    max_pixels: int = MAX_UPLOAD_PIXELS,
) -> ValidatedImage:
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
                    raise UploadError(
                        f"{label}: {fmt} images are not supported; use "
                        f"{', '.join(sorted(set(ALLOWED_FORMATS.values())))}"
                    )
                w, h = img.size
                if w * h > max_pixels:
                    raise UploadError(
                        f"{label}: {w} x {h} = {w * h / 1e6:.1f} megapixels; the limit is "
                        f"{max_pixels / 1e6:.0f} megapixels"
                    )
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
        claimed = re.search(r"\((\d+) pixels\)", str(exc))  # PIL: "Image size (N pixels) exceeds limit ..."
        claim = f"{int(claimed.group(1)) / 1e6:,.0f} megapixels" if claimed else "far more pixels"
        raise UploadError(
            f"{label}: refused: its header claims {claim}, over the limit of "
            f"{max_pixels / 1e6:.0f} megapixels (a possible decompression bomb)"
        ) from None
    except UnidentifiedImageError:
        raise UploadError(
            f"{label}: not an image file this app can read "
            f"(supported: {', '.join(sorted(set(ALLOWED_FORMATS.values())))})"
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        text = str(exc)
        what = (
            "the file is truncated (incomplete upload?)"
            if "truncated" in text.lower()
            else f"corrupt image data ({text})"
        )
        raise UploadError(f"{label}: {what}") from None
    if max(out.size) > MAX_WORKING_SIDE:
        before = out.size
        out = out.copy()
        out.thumbnail((MAX_WORKING_SIDE, MAX_WORKING_SIDE))
        notes.append(f"shrunk from {before[0]} x {before[1]} to {out.size[0]} x {out.size[1]} pixels")
    digest = hashlib.sha256(out.tobytes() + repr(out.size).encode()).hexdigest()[:16]
    return ValidatedImage(out, label, notes, f"upload-{digest}")


ORIENTATIONS = {
    2: "mirrored",
    3: "rotated 180°",
    4: "flipped",
    5: "mirrored and rotated",
    6: "rotated 90°",
    7: "mirrored and rotated",
    8: "rotated 270°",
}


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
        hi = (
            65535.0
            if mode.startswith("I;16") or (mode == "I" and arr.max(initial=0) <= 65535)
            else max(arr.max(initial=1), 1.0)
        )
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

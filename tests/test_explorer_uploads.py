"""Upload validation (cir_demo/explorer/uploads.py) against hand-built files: what is refused names
the file and the problem, what is fixed gives the pixels an independent conversion gives."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from cir_demo.explorer import UploadError, validate_upload


def save(img, path, **kw):
    img.save(path, **kw)
    return path


def test_upload_plain_jpeg_is_accepted_unchanged_in_size(tmp_path):
    img = Image.new("RGB", (64, 48), (10, 200, 30))
    v = validate_upload(save(img, tmp_path / "a.jpg", quality=95))
    assert v.image.mode == "RGB" and v.image.size == (64, 48)
    assert v.notes == [] and v.name == "a.jpg" and v.content_id.startswith("upload-")
    assert np.abs(np.asarray(v.image, dtype=int) - [10, 200, 30]).max() <= 3


def test_upload_alpha_is_composited_on_white(tmp_path):
    arr = np.zeros((20, 20, 4), np.uint8)
    arr[:, :10] = (255, 0, 0, 255)  # left half opaque red, right half fully transparent
    v = validate_upload(save(Image.fromarray(arr, "RGBA"), tmp_path / "a.png"))
    out = np.asarray(v.image)
    assert tuple(out[5, 2]) == (255, 0, 0) and tuple(out[5, 15]) == (255, 255, 255)
    assert any("white background" in n for n in v.notes)


def test_upload_palette_with_transparency(tmp_path):
    img = Image.new("P", (16, 16), 0)
    img.putpalette([0, 0, 255] + [0, 0, 0] * 255)
    img.info["transparency"] = 0
    v = validate_upload(save(img, tmp_path / "p.png", transparency=0))
    assert tuple(np.asarray(v.image)[0, 0]) == (255, 255, 255)


def test_upload_cmyk_converted(tmp_path):
    img = Image.new("CMYK", (32, 32), (0, 255, 255, 0))  # pure red in CMYK
    v = validate_upload(save(img, tmp_path / "c.jpg", quality=95))
    px = np.asarray(v.image, dtype=int)[10, 10]
    assert px[0] > 200 and px[1] < 60 and px[2] < 60
    assert any("CMYK" in n for n in v.notes)


def test_upload_16bit_grayscale_scaled_to_8bit(tmp_path):
    values = np.array([[0, 257 * 100], [65535, 257 * 17]], dtype=np.uint16).repeat(8, 0).repeat(8, 1)
    img = Image.fromarray(values)
    path = tmp_path / "g16.png"
    img.save(path)
    assert Image.open(path).mode.startswith("I")
    v = validate_upload(path)
    out = np.asarray(v.image)[:, :, 0]
    expected = np.rint(values / 65535.0 * 255).astype(np.uint8)  # oracle: linear rescale
    assert np.array_equal(out, expected)
    assert any("16-bit" in n for n in v.notes)


def test_upload_exif_orientation_applied(tmp_path):
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = (255, 0, 0)  # left red, right blue
    arr[:, 20:] = (0, 0, 255)
    img = Image.fromarray(arr)
    exif = img.getexif()
    exif[0x0112] = 6  # the camera was turned: display rotated 90° clockwise
    v = validate_upload(save(img, tmp_path / "rot.jpg", exif=exif.tobytes(), quality=95))
    assert v.image.size == (20, 40)
    out = np.asarray(v.image, dtype=int)
    assert out[2, 10, 0] > 200 and out[37, 10, 2] > 200  # red on top, blue at the bottom
    assert any("EXIF" in n for n in v.notes)


def test_upload_animated_gif_uses_first_frame(tmp_path):
    frames = [Image.new("RGB", (16, 16), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    v = validate_upload(path)
    px = np.asarray(v.image, dtype=int)[8, 8]
    assert px[0] > 200 and px[1] < 50
    assert any("3 frames" in n for n in v.notes)


def test_upload_large_image_is_shrunk(tmp_path):
    v = validate_upload(save(Image.new("RGB", (2048, 1024), "white"), tmp_path / "big.png"))
    assert v.image.size == (1024, 512) and any("shrunk" in n for n in v.notes)


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("empty", "empty"),
        ("text", "not an image"),
        ("truncated_png", "truncat"),
        ("truncated_jpeg", "truncat"),
        ("ppm", "not supported"),
        ("tiny", "too small"),
        ("bytes", "limit is"),
        ("pixels", "megapixels"),
        ("bomb_header", "claims 3,600 megapixels"),
        ("garbage_png", "corrupt"),
    ],
)
def test_upload_refusals_name_the_file_and_problem(tmp_path, kind, expected):
    path = tmp_path / f"{kind}.bin"
    kw = {}
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("hello, not an image")
    elif kind in ("truncated_png", "truncated_jpeg"):
        buf = io.BytesIO()
        noise = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
        noise.save(buf, format="PNG" if kind == "truncated_png" else "JPEG")
        path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    elif kind == "ppm":
        Image.new("RGB", (16, 16)).save(path, format="PPM")
    elif kind == "tiny":
        Image.new("RGB", (4, 4)).save(path, format="PNG")
    elif kind == "bytes":
        Image.new("RGB", (64, 64)).save(path, format="PNG")
        kw["max_bytes"] = 50
    elif kind == "pixels":
        Image.new("RGB", (100, 100)).save(path, format="PNG")
        kw["max_pixels"] = 5000
    elif kind == "bomb_header":  # a PNG whose header claims 60000 x 60000 pixels: must be refused unread
        path.write_bytes(png_with_claimed_size(60000, 60000))
    elif kind == "garbage_png":
        good = io.BytesIO()
        Image.new("RGB", (32, 32), "red").save(good, format="PNG")
        data = bytearray(good.getvalue())
        data[60:90] = b"\x00" * 30  # corrupt the compressed stream, keep the length
        path.write_bytes(bytes(data))
    with pytest.raises(UploadError) as err:
        validate_upload(path, name="photo-1.png", **kw)
    assert str(err.value).startswith("photo-1.png: ")
    assert expected in str(err.value).lower()


def png_with_claimed_size(width: int, height: int) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 10)) + chunk(b"IEND", b"")
    )


def test_upload_content_id_depends_on_pixels_only(tmp_path):
    a = validate_upload(save(Image.new("RGB", (20, 20), "red"), tmp_path / "a.png"))
    b = validate_upload(save(Image.new("RGB", (20, 20), "red"), tmp_path / "b.bmp"))
    c = validate_upload(save(Image.new("RGB", (20, 20), "blue"), tmp_path / "c.png"))
    assert a.content_id == b.content_id != c.content_id

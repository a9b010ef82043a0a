"""The model-input pixels of every world model (world-CLIP, world-CIR, the world judge), shared by
training and serving: the open_clip eval transform (resize to 64 px, centre crop), then ToTensor and
Normalize. Train-time and serve-time pixels are identical by construction (tests check it).
torch, torchvision and open_clip are imported inside the functions; the model-input pixels
(`to_model_pixels`) need neither open_clip nor torchvision (`shortest_resize_crop`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Sequence

import numpy as np

# The model-input preprocessing of every world model (written into the open_clip sidecar).
PREPROCESS = {
    "size": 64,
    "mean": [0.5, 0.5, 0.5],
    "std": [0.5, 0.5, 0.5],
    "interpolation": "bicubic",
    "resize_mode": "shortest",
}


def pixel_transform(preprocess: dict = PREPROCESS):
    """The open_clip eval transform for `preprocess` (PIL -> normalised CHW tensor)."""
    from open_clip.transform import PreprocessCfg, image_transform_v2

    cfg = {k: (tuple(v) if isinstance(v, list) else v) for k, v in preprocess.items()}
    return image_transform_v2(PreprocessCfg(**cfg), is_train=False)


def resize_stage(preprocess: dict = PREPROCESS):
    """The PIL-to-PIL part of `pixel_transform` (everything before ToTensor/Normalize)."""
    from torchvision import transforms as T

    full = pixel_transform(preprocess)
    steps = []
    for step in full.transforms:
        if type(step).__name__ in ("MaybeToTensor", "ToTensor", "Normalize"):
            break
        steps.append(step)
    return T.Compose(steps)


def shortest_resize_crop(img, size: int, interpolation: str):
    """open_clip's eval resize for resize_mode "shortest" on a PIL image, as torchvision runs it (the
    PIL part of `pixel_transform`, bit for bit): the shorter side resized to `size` (the longer one
    scaled and truncated), then the centre `size` x `size` crop. PIL alone: importing open_clip and
    torchvision (torch._dynamo through torchvision.ops) is a large part of a cold process's CPU."""
    from PIL import Image

    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(size * long / short)
    new_w, new_h = (size, new_long) if w <= h else (new_long, size)
    if (new_h, new_w) != (h, w):
        img = img.resize((new_w, new_h), {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR}[interpolation])
    top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def to_model_pixels(images: Sequence, preprocess: dict = PREPROCESS) -> np.ndarray:
    """PIL images or uint8 (H, W, 3) arrays -> uint8 (n, size, size, 3) model-input pixels."""
    from PIL import Image

    if preprocess.get("resize_mode") == "shortest" and preprocess.get("interpolation") in ("bicubic", "bilinear"):
        size, interpolation = int(preprocess["size"]), preprocess["interpolation"]
        stage = lambda pil: shortest_resize_crop(pil, size, interpolation)  # noqa: E731
    else:
        stage = resize_stage(preprocess)
    out = []
    for img in images:
        pil = Image.fromarray(img) if isinstance(img, np.ndarray) else img
        out.append(np.asarray(stage(pil.convert("RGB")), dtype=np.uint8))
    size = int(preprocess["size"])
    return np.stack(out) if out else np.zeros((0, size, size, 3), dtype=np.uint8)


def normalize_pixels(pixels_uint8: np.ndarray, preprocess: dict = PREPROCESS):
    """uint8 (n, H, W, 3) -> float32 torch tensor (n, 3, H, W), as ToTensor + Normalize would give."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(pixels_uint8)).permute(0, 3, 1, 2).float().div_(255.0)
    mean = torch.tensor(preprocess["mean"], dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(preprocess["std"], dtype=torch.float32).view(1, 3, 1, 1)
    return (x - mean) / std


def preprocess_key(preprocess: dict = PREPROCESS) -> str:
    return hashlib.sha256(json.dumps(preprocess, sort_keys=True).encode()).hexdigest()[:12]

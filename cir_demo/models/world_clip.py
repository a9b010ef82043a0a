"""world-CLIP served with torch alone: open_clip's plain CLIP (a ViT image tower, a causal text
transformer pooled at its EOS token), its eval preprocessing and its `HFTokenizer`, for the small
configs the offline world trains (assets/world-clip/model_config.json).

Why: importing open_clip is a large part of a cold start (torch._dynamo through torchvision.ops,
and transformers); the world models need none of it to run. The modules
below are torch's own (`nn.MultiheadAttention`, `nn.LayerNorm`, ...) built with open_clip's
parameter names and called in open_clip's order, so the same weights give bit-identical
embeddings (tests/test_world_clip_native.py compares both on images and texts). A config with
anything this file does not build (`supported` says so) is loaded by open_clip as before.
torch is imported inside functions only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

# model_config keys this file builds, with the value each must have where open_clip offers others
VISION_KEYS = {"image_size", "patch_size", "width", "layers", "head_width", "mlp_ratio", "patch_dropout"}
TEXT_KEYS = {
    "context_length",
    "vocab_size",
    "width",
    "heads",
    "layers",
    "hf_tokenizer_name",
    "pool_type",
    "eos_id",
    "pad_id",
}
TOP_KEYS = {"embed_dim", "vision_cfg", "text_cfg"}
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)  # open_clip's defaults when a sidecar names none
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


def supported(model_config: dict | None, tokenizer_dir: Path | None, precision: str) -> bool:
    """Whether this file builds `model_config` exactly as open_clip would (fp32, a local tokenizer)."""
    if not isinstance(model_config, dict) or precision != "fp32" or tokenizer_dir is None:
        return False
    vision, text = model_config.get("vision_cfg"), model_config.get("text_cfg")
    if set(model_config) - TOP_KEYS or not isinstance(vision, dict) or not isinstance(text, dict):
        return False
    if set(vision) - VISION_KEYS or set(text) - TEXT_KEYS:
        return False
    return (
        text.get("pool_type") == "eos"
        and isinstance(text.get("eos_id"), int)
        and isinstance(vision.get("image_size"), int)
        and "head_width" in vision
    )


def preprocess_cfg(model_config: dict, sidecar: dict | None) -> dict:
    """open_clip's `model.visual.preprocess_cfg`: its defaults for the tower, then the sidecar's fields."""
    cfg = {
        "size": model_config["vision_cfg"]["image_size"],
        "mode": "RGB",
        "mean": OPENAI_MEAN,
        "std": OPENAI_STD,
        "interpolation": "bicubic",
        "resize_mode": "shortest",
        "fill_color": 0,
    }
    cfg.update(sidecar or {})
    return cfg


def build_model(model_config: dict, weights: str | Path, device: str = "cpu"):
    """The CLIP of `model_config` with the safetensors `weights` loaded (every key, strictly), in eval mode."""
    import torch
    from safetensors.torch import load_file
    from torch import nn

    vision, text = model_config["vision_cfg"], model_config["text_cfg"]

    class Clip(nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = _vision_tower(vision, model_config["embed_dim"])
            width = text["width"]
            self.transformer = _transformer(width, text["layers"], text["heads"], 4.0)
            self.context_length = text["context_length"]
            self.token_embedding = nn.Embedding(text["vocab_size"], width)
            self.positional_embedding = nn.Parameter(torch.empty(self.context_length, width))
            self.ln_final = _layer_norm(width)
            self.text_projection = nn.Parameter(torch.empty(width, model_config["embed_dim"]))
            self.logit_scale = nn.Parameter(torch.ones([]))  # in the file; unused by the encoders
            mask = torch.empty(self.context_length, self.context_length)
            mask.fill_(float("-inf"))
            mask.triu_(1)
            self.register_buffer("attn_mask", mask, persistent=False)
            self.eos_id = text["eos_id"]

        def encode_image(self, image):
            return self.visual(image)

        def encode_text(self, tokens):
            cast = self.transformer.resblocks[0].mlp.c_fc.weight.dtype
            idx = (tokens == self.eos_id).int().argmax(dim=-1)
            # causal attention: no position after the batch's last end-of-text token reaches a pooled one
            n = int(idx.max()) + 1 if len(idx) else 1
            x = self.token_embedding(tokens[:, :n]).to(cast)
            x = x + self.positional_embedding[:n].to(cast)
            x = self.transformer(x, attn_mask=self.attn_mask[:n, :n])
            x = self.ln_final(x)
            return x[torch.arange(x.shape[0], device=x.device), idx] @ self.text_projection

    model = Clip()
    model.load_state_dict(load_file(str(weights)), strict=True)
    return model.to(device=device).eval()


def _layer_norm(width: int):
    """open_clip's `LayerNorm` (fp32 here): layer_norm, then a cast back to the input's dtype."""
    from torch import nn
    from torch.nn import functional as F

    class LayerNorm(nn.LayerNorm):
        def forward(self, x):
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps).to(x.dtype)

    return LayerNorm(width)


def _transformer(width: int, layers: int, heads: int, mlp_ratio: float):
    from collections import OrderedDict

    from torch import nn

    class Block(nn.Module):  # open_clip's ResidualAttentionBlock without layer scale
        def __init__(self):
            super().__init__()
            self.ln_1 = _layer_norm(width)
            self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
            self.ln_2 = _layer_norm(width)
            hidden = int(width * mlp_ratio)
            self.mlp = nn.Sequential(
                OrderedDict(
                    [("c_fc", nn.Linear(width, hidden)), ("gelu", nn.GELU()), ("c_proj", nn.Linear(hidden, width))]
                )
            )

        def forward(self, x, attn_mask=None):
            mask = attn_mask.to(x.dtype) if attn_mask is not None else None
            q = self.ln_1(x)
            x = x + self.attn(q, q, q, need_weights=False, attn_mask=mask)[0]
            return x + self.mlp(self.ln_2(x))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.resblocks = nn.ModuleList([Block() for _ in range(layers)])

        def forward(self, x, attn_mask=None):
            for block in self.resblocks:
                x = block(x, attn_mask=attn_mask)
            return x

    return Transformer()


def _vision_tower(cfg: dict, embed_dim: int):
    """open_clip's VisionTransformer with a class token, LN before and after, token pooling and a
    projection (its patch dropout is inactive in eval mode, so it is not built)."""
    import torch
    from torch import nn

    width, grid = cfg["width"], cfg["image_size"] // cfg["patch_size"]

    class Vision(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, kernel_size=cfg["patch_size"], stride=cfg["patch_size"], bias=False)
            self.class_embedding = nn.Parameter(torch.empty(width))
            self.positional_embedding = nn.Parameter(torch.empty(grid * grid + 1, width))
            self.ln_pre = _layer_norm(width)
            self.transformer = _transformer(width, cfg["layers"], width // cfg["head_width"], cfg.get("mlp_ratio", 4.0))
            self.ln_post = _layer_norm(width)
            self.proj = nn.Parameter(torch.empty(width, embed_dim))

        def forward(self, x):
            x = self.conv1(x)
            x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
            cls = self.class_embedding.view(1, 1, -1).expand(x.shape[0], -1, -1).to(x.dtype)
            x = torch.cat([cls, x], dim=1)
            x = self.ln_pre(x + self.positional_embedding.to(x.dtype))
            x = self.ln_post(self.transformer(x))
            return x[:, 0] @ self.proj

    return Vision()


class Preprocess:
    """open_clip's eval transform for resize_mode "shortest" on PIL images, as torchvision runs it:
    resize the shorter side (PIL), centre crop, convert the mode, to float in [0, 1], normalise."""

    def __init__(self, cfg: dict):
        if cfg.get("resize_mode") != "shortest":
            raise ValueError(f"preprocess: resize_mode {cfg.get('resize_mode')!r} is not built here")
        if cfg["interpolation"] not in ("bicubic", "bilinear"):
            raise KeyError(cfg["interpolation"])
        self.size, self.mode = int(cfg["size"]), cfg.get("mode", "RGB")
        self.mean, self.std = tuple(cfg["mean"]), tuple(cfg["std"])
        self.interpolation = cfg["interpolation"]

    def __call__(self, img):
        import numpy as np
        import torch

        from cir_demo.models.preprocess import shortest_resize_crop

        img = shortest_resize_crop(img, self.size, self.interpolation).convert(self.mode)
        pixels = torch.from_numpy(np.array(img, np.uint8, copy=True)).view(self.size, self.size, -1)
        x = pixels.permute((2, 0, 1)).contiguous().to(dtype=torch.get_default_dtype()).div(255)
        mean = torch.as_tensor(self.mean, dtype=x.dtype).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=x.dtype).view(-1, 1, 1)
        return x.sub_(mean).div_(std)


class Tokenizer:
    """open_clip's `HFTokenizer` (clean "whitespace", no special mode) over a local tokenizer.json,
    read by the `tokenizers` library that transformers' fast tokenizer runs: ids padded and
    truncated to `context_length` as `AutoTokenizer(..., padding="max_length", truncation=True)`."""

    def __init__(self, folder: Path, context_length: int):
        import json

        from tokenizers import Tokenizer as RustTokenizer

        self.context_length = context_length
        self.tokenizer = RustTokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        config = json.loads((Path(folder) / "tokenizer_config.json").read_text(encoding="utf-8"))
        pad_token = config.get("pad_token") or "[PAD]"
        pad_id = self.tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise ValueError(f"{folder}: the pad token {pad_token!r} is not in tokenizer.json")
        self.tokenizer.enable_truncation(max_length=context_length)
        self.tokenizer.enable_padding(length=context_length, pad_id=pad_id, pad_token=pad_token)

    def __call__(self, texts: str | Sequence[str], context_length: int | None = None) -> Any:
        import html

        import ftfy
        import torch

        if context_length not in (None, self.context_length):
            raise ValueError(f"context_length {context_length}: this tokenizer pads to {self.context_length}")
        texts = [texts] if isinstance(texts, str) else list(texts)
        clean = [" ".join(html.unescape(html.unescape(ftfy.fix_text(t))).strip().split()).strip() for t in texts]
        return torch.tensor([e.ids for e in self.tokenizer.encode_batch(clean)], dtype=torch.long)

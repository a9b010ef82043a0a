"""CLIP-family retrievers through transformers (CLIPModel, SiglipModel, anything with
`get_image_features` / `get_text_features`).

`model` is a Hub id or a local folder written by `save_pretrained` (model,
tokenizer and image processor). The image processor saved with the model is
its preprocessing, recorded in the spec. SigLIP was trained on text padded to
the full context ("max_length" padding); CLIP pads to the longest text.

transformers and torch are imported only inside functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cir_demo.retrievers.dual_encoder import (
    DualEncoder,
    DualEncoderRetriever,
    features_tensor,
    retriever_from_config,
    torch_precision,
)
from cir_demo.utils import versions
from cir_demo.utils.code_hash import code_key

FAMILY = "hf_clip"
# text_padding: "auto" = "max_length" for SigLIP-type models, "longest" otherwise.
PARAMS = {"marker_style": "words", "batch_size": 64, "text_padding": "auto", "revision": None}
_TEXT_PADDING = ("auto", "max_length", "longest")
USES_RECIPE = True  # queries are composed by a recipe (recipes.py) over this dual encoder


def weights(config: dict) -> list:
    from cir_demo.utils.needs import HubModel

    return [HubModel(config["model"])]


class HFClipEncoder(DualEncoder):
    def __init__(self, model, tokenizer, image_processor, device: str, precision: str, text_padding: str):
        import torch

        self.model = model.eval()
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.device = device
        self.precision = precision
        self._dtype = torch.float16 if precision == "fp16" else torch.float32
        self.text_padding = text_padding
        self.max_length = _text_max_length(model)
        self.dim = int(self.encode_text_batch(["a photo"]).shape[1])

    def encode_image_batch(self, images: Sequence[Any]) -> np.ndarray:
        import torch

        pixels = self.image_processor(images=[_rgb(i) for i in images], return_tensors="pt")["pixel_values"]
        pixels = pixels.to(device=self.device, dtype=self._dtype)
        with torch.inference_mode():
            emb = features_tensor(self.model.get_image_features(pixel_values=pixels), "get_image_features")
            emb = torch.nn.functional.normalize(emb.float(), dim=-1)
        return emb.cpu().numpy()

    def encode_text_batch(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        enc = self.tokenizer(
            list(texts), padding=self.text_padding, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        inputs = {"input_ids": enc["input_ids"].to(self.device)}
        # Pass the mask only when the tokenizer declares it as a model input (as its
        # processor would): SigLIP's tokenizer does not, and a mask changes its outputs.
        if "attention_mask" in enc and "attention_mask" in getattr(self.tokenizer, "model_input_names", ()):
            inputs["attention_mask"] = enc["attention_mask"].to(self.device)
        with torch.inference_mode():
            emb = features_tensor(self.model.get_text_features(**inputs), "get_text_features")
            emb = torch.nn.functional.normalize(emb.float(), dim=-1)
        return emb.cpu().numpy()


def _rgb(img):
    return img if getattr(img, "mode", "RGB") == "RGB" else img.convert("RGB")


def _text_max_length(model) -> int:
    text_cfg = getattr(model.config, "text_config", model.config)
    return int(getattr(text_cfg, "max_position_embeddings", 77))


def _is_siglip(model) -> bool:
    return "siglip" in str(getattr(model.config, "model_type", "")).lower()


def library_versions() -> dict[str, str | None]:
    return versions.library_versions("transformers", "torch", imported=True)


def load_encoder(
    model_id: str,
    device: str = "cpu",
    precision: str = "fp32",
    text_padding: str = "auto",
    revision: str | None = None,
    where: str = "transformers retriever",
) -> tuple[HFClipEncoder, dict]:
    import torch
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    if text_padding not in _TEXT_PADDING:
        raise ValueError(f"{where}: params.text_padding must be one of {_TEXT_PADDING}, got {text_padding!r}")
    precision = torch_precision(precision, device)
    dtype = torch.float16 if precision == "fp16" else torch.float32
    local = Path(model_id).expanduser()
    if ("/" in model_id and model_id.startswith((".", "/", "~"))) and not local.is_dir():
        raise FileNotFoundError(f"{where}: model folder not found: {local}")
    kwargs = {"revision": revision} if revision else {}
    # Never trust remote code here: CLIP and SigLIP are built into transformers.
    model = AutoModel.from_pretrained(model_id, dtype=dtype, trust_remote_code=False, **kwargs).to(device)
    for method in ("get_image_features", "get_text_features"):
        if not hasattr(model, method):
            raise TypeError(f"{where}: {type(model).__name__} from {model_id} has no {method}; not a dual encoder")
    tokenizer = AutoTokenizer.from_pretrained(model_id, **kwargs)
    image_processor = AutoImageProcessor.from_pretrained(model_id, **kwargs)
    padding = ("max_length" if _is_siglip(model) else "longest") if text_padding == "auto" else text_padding
    encoder = HFClipEncoder(model, tokenizer, image_processor, device, precision, padding)
    spec: dict[str, Any] = {
        "model": model_id,
        "architecture": type(model).__name__,
        "weights": _weights_spec(model_id, local, revision),
        "preprocess": _preprocess_spec(image_processor),
        "text": {"padding": padding, "max_length": encoder.max_length, "tokenizer": type(tokenizer).__name__},
        "precision": precision,
        "dim": encoder.dim,
        "code": code_key((__name__,), ("torch", "numpy", "pillow", "transformers")),
    }
    return encoder, spec


def _weights_spec(model_id: str, local: Path, revision: str | None) -> dict:
    if local.is_dir():
        from cir_demo.utils.io import sha256_file

        files = sorted(list(local.glob("*.safetensors")) + list(local.glob("*.bin")))
        return {"path": model_id, "sha256": {f.name: sha256_file(f) for f in files}}
    return {"hub": model_id, "revision": revision}


def _preprocess_spec(image_processor) -> dict:
    """The image processor's settings that change pixels (JSON-safe)."""
    keys = (
        "image_processor_type",
        "do_resize",
        "size",
        "resample",
        "do_center_crop",
        "crop_size",
        "do_rescale",
        "rescale_factor",
        "do_normalize",
        "image_mean",
        "image_std",
        "do_convert_rgb",
    )
    out = {}
    full = image_processor.to_dict()
    for k in keys:
        if k in full:
            out[k] = _jsonable(full[k])
    return out


def _jsonable(v):
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


def load(config: dict, device: str, progress: bool = False, **_: Any) -> DualEncoderRetriever:
    """Build the retriever a validated registry config describes."""

    def encoder(options: dict, where: str):
        return load_encoder(
            config["model"],
            device,
            config.get("precision", "fp32"),
            options["text_padding"],
            options["revision"],
            where=where,
        )

    return retriever_from_config(config, FAMILY, PARAMS, encoder, library_versions, progress)

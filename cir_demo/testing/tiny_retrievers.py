"""Tiny, randomly initialised real models for offline tests.

These are real open_clip / transformers models (a few hundred thousand
parameters, random weights) saved to a folder and loaded back through the
real adapters, so tests of indexes, harnesses and the app exercise the actual
loading and encoding code without network access. Their rankings are
meaningless; their numerics are deterministic for a given seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TINY_OPEN_CLIP_CONFIG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
TINY_PREPROCESS = {
    "size": 32,
    "mean": [0.48145466, 0.4578275, 0.40821073],
    "std": [0.26862954, 0.26130258, 0.27577711],
    "interpolation": "bicubic",
    "resize_mode": "shortest",
}
TINY_WORDS = (
    "a photo of the red blue green car dog cat tree first second image make it with without in on and small large"
).split()


def build_tiny_open_clip(
    folder: str | Path, model_name: str = "cir-demo-tiny-clip", seed: int = 0, suffix: str = ".safetensors"
) -> Path:
    """Create, seed and save a tiny open_clip model + preprocessing sidecar; returns the weights path."""
    import open_clip
    import torch

    from cir_demo.retrievers.openclip import register_model_config, save_weights_with_preprocess

    register_model_config(model_name, TINY_OPEN_CLIP_CONFIG)
    torch.manual_seed(seed)
    model = open_clip.create_model(model_name)
    weights = Path(folder) / f"{model_name}-seed{seed}{suffix}"
    save_weights_with_preprocess(model, weights, model_name, TINY_PREPROCESS)
    return weights


def tiny_open_clip_config(
    weights: str | Path, name: str, recipe: str = "early_fusion", model_name: str = "cir-demo-tiny-clip", **params: Any
) -> dict:
    """A registry config for weights written by `build_tiny_open_clip`."""
    return {
        "name": name,
        "family": "open_clip",
        "description": "tiny random open_clip model (tests only)",
        "model": model_name,
        "model_config": TINY_OPEN_CLIP_CONFIG,
        "pretrained": str(weights),
        "recipe": recipe,
        "params": {"batch_size": 4, **params},
        "requires": ["open_clip_torch", "torch"],
    }


def tiny_open_clip_retriever(folder: str | Path, recipe: str = "early_fusion", seed: int = 0, **params: Any):
    """Build (once per folder/seed), register and load a tiny open_clip retriever on CPU."""
    from cir_demo.retrievers import registry

    weights = Path(folder) / f"cir-demo-tiny-clip-seed{seed}.safetensors"
    if not weights.is_file():
        weights = build_tiny_open_clip(folder, seed=seed)
    name = f"tiny-clip-s{seed}-{recipe}-" + "-".join(f"{k}{v}" for k, v in sorted(params.items()))
    registry.register_config(tiny_open_clip_config(weights, name.rstrip("-"), recipe, **params), replace=True)
    return registry.load_retriever(name.rstrip("-"), device="cpu")


def _word_tokenizer(model_input_names: list[str] | None = None):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[BOS]", "[EOS]", *TINY_WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[BOS] $A [EOS]", special_tokens=[("[BOS]", 2), ("[EOS]", 3)]
    )
    extra = {"model_input_names": model_input_names} if model_input_names is not None else {}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]", **extra
    )
    return fast, len(vocab)


def build_tiny_hf(folder: str | Path, kind: str = "clip", seed: int = 0) -> Path:
    """Save a tiny transformers CLIPModel or SiglipModel with tokenizer and image processor; returns the folder."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, SiglipConfig, SiglipImageProcessor, SiglipModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=16
    )
    torch.manual_seed(seed)
    if kind == "clip":
        tokenizer, vocab_size = _word_tokenizer()
        text = dict(
            vocab_size=vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=16,
            pad_token_id=0,
            bos_token_id=2,
            eos_token_id=3,
        )
        model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
        processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    elif kind == "siglip":
        tokenizer, vocab_size = _word_tokenizer(["input_ids"])
        text = dict(
            vocab_size=vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=16,
            pad_token_id=0,
            bos_token_id=2,
            eos_token_id=3,
        )
        model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision))
        processor = SiglipImageProcessor(size={"height": 32, "width": 32})
    else:
        raise ValueError(f"kind must be 'clip' or 'siglip', got {kind!r}")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder

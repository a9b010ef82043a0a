"""Build a tiny, randomly initialised Qwen2.5-VL checkpoint on disk (tests and benchmarks only).

The checkpoint is a real `Qwen2_5_VLForConditionalGeneration` with a real
processor (Qwen2VLImageProcessor + a word-level tokenizer carrying Qwen's
special tokens + a Qwen-style chat template), saved with `save_pretrained` so
the reranker's normal loading code reads it by path. Its scores mean nothing;
it exists to check that prefix-cached scoring equals full-sequence scoring and
to time the two. Nothing here is ever used as a reranker in the app.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Qwen2.5-VL's template, reduced to what the reranker uses (text and images;
# list or string content; a system turn).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Words the tokenizer knows besides those of the default prompt (tests use them in instructions).
EXTRA_WORDS = (
    "yes no True False Yes No red blue green yellow black white dark light small large make it the a an "
    "same shape color colour style of with and but in on one two image images add remove change to "
    "combine from more less bigger smaller background pattern striped dotted plain shoe dress bag lamp "
    "0 1 2 3 4 5 6 7 8 9 . , ' \" : ; ? ! ( ) - < > / [ ] { }"
)

_WORD_RE = re.compile(r"\w+|[^\w\s]+")  # what tokenizers' `Whitespace` pre-tokenizer splits on


@dataclass(frozen=True)
class TinySize:
    """Model sizes. `image_side` is the pixel side every image is resized to
    (min_pixels = max_pixels = side²), so an image gives (side/28)² tokens."""

    text_hidden: int
    text_layers: int
    text_heads: int
    text_kv_heads: int
    text_intermediate: int
    mrope_section: tuple[int, int, int]
    vision_hidden: int
    vision_depth: int
    vision_heads: int
    vision_intermediate: int
    image_side: int


SIZES = {
    # Fast enough for unit tests: 4 tokens per image.
    "test": TinySize(64, 2, 4, 2, 128, (2, 3, 3), 32, 2, 2, 64, 56),
    # Benchmark: 64 tokens per 224x224 image. Per image token the vision tower
    # costs about 0.45x the language model (~1.3 M vs 2.9 M multiply-adds), near
    # Qwen2.5-VL-7B's 0.4x (~2.6 G vs 6.5 G), so neither part dominates unrealistically.
    "bench": TinySize(256, 4, 8, 4, 688, (4, 6, 6), 64, 4, 2, 192, 224),
}


def _vocabulary(corpus: str) -> list[str]:
    words = sorted(set(_WORD_RE.findall(corpus)) | set(EXTRA_WORDS.split()))
    return ["[UNK]"] + [w for w in words if w != "[UNK]"]


def build_tokenizer(corpus: str):
    """A word-level fast tokenizer: Qwen's special tokens, every word of `corpus`, and EXTRA_WORDS."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(_vocabulary(corpus))}
    for tok in SPECIAL_TOKENS:
        vocab[tok] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
    )


def build_tiny_qwen2_5_vl(path: str | Path, size: str = "test", seed: int = 0, init_std: float = 0.2) -> Path:
    """Write a tiny random Qwen2.5-VL (model + processor) to `path`; return the path.

    `init_std` is larger than a real model's 0.02 so that scores react visibly
    to positions and images (a test that wrong positions change the scores
    needs a model that is not nearly constant).
    """
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    from cir_demo.rerank.prompt import DEFAULT_REFERENCE_LINE, DEFAULT_SYSTEM, DEFAULT_USER

    s = SIZES[size]
    path = Path(path)
    tokenizer = build_tokenizer(
        " ".join((DEFAULT_SYSTEM, DEFAULT_USER, DEFAULT_REFERENCE_LINE, "assistant user system"))
    )
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    head_dim = s.text_hidden // s.text_heads
    if sum(s.mrope_section) * 2 != head_dim:
        raise ValueError(f"size {size!r}: mrope_section {s.mrope_section} must sum to head_dim/2 = {head_dim // 2}")
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=s.text_hidden,
            intermediate_size=s.text_intermediate,
            num_hidden_layers=s.text_layers,
            num_attention_heads=s.text_heads,
            num_key_value_heads=s.text_kv_heads,
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": list(s.mrope_section)},
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            initializer_range=init_std,
        ),
        vision_config=dict(
            depth=s.vision_depth,
            hidden_size=s.vision_hidden,
            intermediate_size=s.vision_intermediate,
            num_heads=s.vision_heads,
            out_hidden_size=s.text_hidden,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=112,  # as in Qwen2.5-VL: 4x4 merged tokens per window
            fullatt_block_indexes=[s.vision_depth - 1],
            initializer_range=init_std,
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    pixels = s.image_side * s.image_side
    image_processor = Qwen2VLImageProcessor(min_pixels=pixels, max_pixels=pixels)
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),  # required by the processor class, unused
        chat_template=CHAT_TEMPLATE,
    )
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path

"""GME-Qwen2-VL retrievers through the model repository's documented entry points:

    gme = AutoModel.from_pretrained(id, dtype=..., device_map=..., trust_remote_code=True)
    gme.get_image_embeddings(images=[...], is_query=False)        # corpus
    gme.get_fused_embeddings(texts=[...], images=[...], instruction=...)   # composed query

Loading requires the explicit `trust_remote_code=True`. The repository code
itself refuses transformers>=4.52.0 (its model card: "please downgrade:
pip install transformers==4.51.3"); this project pins transformers 5, so the
config carries a hard pin and loading stops *before* any download with an
error that says so. Run GME in a separate environment and load its rankings as
a 'precomputed' retriever (docs/retrievers.md).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from cir_demo.retrievers.remote_code import guarded, native_retriever, remote_code_failure, require_opt_in, to_numpy

FAMILY = "gme"
# MMEB's CIRR instruction (GME is trained and evaluated with MMEB-style instructions); our default.
CIR_INSTRUCTION = "Given an image, find a similar everyday image with the described changes."
PARAMS = {"query_instruction": CIR_INSTRUCTION, "batch_size": 8, "marker_style": "words"}
REMOTE_CODE = True  # runs its repository's code: a config must say so ("needs_remote_code": true)


def validate(config: dict, where: str) -> None:
    if not config.get("model"):
        raise ValueError(f"{where}: key 'model' is required for family 'gme'")


def weights(config: dict) -> list:
    from cir_demo.utils.needs import HubModel

    return [HubModel(config["model"])]


def load(config: dict, device: str, progress: bool = False, trust_remote_code: bool = False, **_: Any):
    require_opt_in(config, trust_remote_code)
    import torch
    from transformers import AutoModel

    from cir_demo.retrievers.dual_encoder import torch_precision

    p = {**PARAMS, **config.get("params", {})}
    precision = torch_precision(config.get("precision", "fp32"), device)
    try:
        gme = AutoModel.from_pretrained(
            config["model"],
            trust_remote_code=True,
            device_map=device,
            dtype=torch.float16 if precision == "fp16" else torch.float32,
        )
    except Exception as exc:
        raise remote_code_failure(config, "loading", exc) from exc
    gme.eval()
    rgb = lambda imgs: [i if i.mode == "RGB" else i.convert("RGB") for i in imgs]  # noqa: E731

    def encode_images(images: Sequence) -> np.ndarray:
        return to_numpy(gme.get_image_embeddings(images=rgb(images), is_query=False))

    def encode_pairs(images: Sequence, texts: Sequence[str]) -> np.ndarray:
        return to_numpy(
            gme.get_fused_embeddings(texts=list(texts), images=rgb(images), instruction=p["query_instruction"])
        )

    return native_retriever(
        config,
        FAMILY,
        p,
        precision,
        device,
        guarded(config, encode_images, "encoding images"),
        guarded(config, encode_pairs, "encoding queries"),
        progress,
        f"native (instruction={p['query_instruction']!r})",
    )

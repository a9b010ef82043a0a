"""BGE-VL / MMRet retrievers through the model repositories' documented entry points.

- CLIP-based (BAAI/BGE-VL-base, BAAI/BGE-VL-large):
  `AutoModel.from_pretrained(id, trust_remote_code=True)`, `model.set_processor(id)`,
  `model.encode(images=..., text=...)` (image+text -> composed query embedding,
  images only -> candidate embedding).
- MLLM-based (BAAI/BGE-VL-MLLM-S1, -S2): `model.set_processor(id)`,
  `model.data_process(images=..., text=..., q_or_c="q"|"c", task_instruction=...)`,
  embedding = last hidden state of the last token of `model(**inputs, output_hidden_states=True)`.

Both run code from the model repository: loading requires the explicit
`trust_remote_code=True`. Their model cards say the code "works well on
transformers==4.45.2"; this project pins transformers 5, so loading warns and
any failure inside that code is reported as such (see docs/retrievers.md).
Images are handed over as in-memory PNG files (the repository code calls
`PIL.Image.open` on what it is given).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from cir_demo.retrievers.remote_code import (
    as_file,
    guarded,
    native_retriever,
    remote_code_failure,
    require_opt_in,
    to_numpy,
)

FAMILY = "bge_vl"
CIR_TASK_INSTRUCTION = (
    "Retrieve the target image that best meets the combined criteria by using both the provided image "
    "and the image retrieval instructions: "
)
PARAMS = {"variant": None, "task_instruction": CIR_TASK_INSTRUCTION, "batch_size": 16, "marker_style": "words"}
VARIANTS = ("clip", "mllm")
REMOTE_CODE = True  # runs its repository's code: a config must say so ("needs_remote_code": true)


def validate(config: dict, where: str) -> None:
    p = config.get("params", {})
    if p.get("variant") not in VARIANTS:
        raise ValueError(f"{where}: key 'params.variant' must be one of {VARIANTS}, got {p.get('variant')!r}")
    if not config.get("model"):
        raise ValueError(f"{where}: key 'model' is required for family 'bge_vl'")


def weights(config: dict) -> list:
    from cir_demo.utils.needs import HubModel

    return [HubModel(config["model"])]


def _load_model(config: dict, device: str, fp16: bool):
    import torch
    from transformers import AutoModel

    model_id = config["model"]
    try:
        model = AutoModel.from_pretrained(
            model_id, trust_remote_code=True, dtype=torch.float16 if fp16 else torch.float32
        )
        model.set_processor(model_id)
    except Exception as exc:
        raise remote_code_failure(config, "loading", exc) from exc
    return model.eval().to(device)


def load(config: dict, device: str, progress: bool = False, trust_remote_code: bool = False, **_: Any):
    require_opt_in(config, trust_remote_code)
    from cir_demo.retrievers.dual_encoder import torch_precision

    p = {**PARAMS, **config.get("params", {})}
    precision = torch_precision(config.get("precision", "fp32"), device)
    model = _load_model(config, device, precision == "fp16")

    if p["variant"] == "clip":

        def encode_images(images: Sequence) -> np.ndarray:
            return to_numpy(model.encode(images=[as_file(i) for i in images]))

        def encode_pairs(images: Sequence, texts: Sequence[str]) -> np.ndarray:
            return to_numpy(model.encode(images=[as_file(i) for i in images], text=list(texts)))
    else:
        instruction = p["task_instruction"]

        def _last_token(inputs) -> np.ndarray:
            out = model(**inputs, output_hidden_states=True)
            return to_numpy(out[:, -1, :])

        def encode_images(images: Sequence) -> np.ndarray:
            return _last_token(model.data_process(images=[as_file(i) for i in images], q_or_c="c"))

        def encode_pairs(images: Sequence, texts: Sequence[str]) -> np.ndarray:
            return _last_token(
                model.data_process(
                    images=[as_file(i) for i in images], text=list(texts), q_or_c="q", task_instruction=instruction
                )
            )

    composition = "native" + ("" if p["variant"] == "clip" else f" (task_instruction={p['task_instruction']!r})")
    return native_retriever(
        config,
        FAMILY,
        p,
        precision,
        device,
        guarded(config, encode_images, "encoding images"),
        guarded(config, encode_pairs, "encoding queries"),
        progress,
        composition,
        variant=p["variant"],
    )

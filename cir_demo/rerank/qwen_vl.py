"""Local Qwen2.5-VL reranker (transformers) with a shared-prefix KV cache.

For one query, the prompt up to the candidate image (system text, reference
image(s), instruction) is the same for every candidate. It is encoded once;
candidates are then scored in batches that attend to the cached prefix.

Qwen2.5-VL uses multimodal rotary positions (mrope): an image of h x w merged
tokens advances the position counter by max(h, w), not by h*w, so a token's
position is not its index. The position ids of a candidate segment are
therefore computed with the model's own `get_rope_index` over the FULL
sequence (prefix + candidate) and sliced after the prefix; continuing from the
prefix length would silently give wrong scores (the tests check both).

Candidates of different image sizes are supported: each batch is right-padded
(causal attention means a real token never sees the padding after it) and the
answer logits are read at each row's last real token.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cir_demo.rerank.base import LogitPairReranker, RerankRequest
from cir_demo.rerank.prompt import PromptTemplate, render_segments
from cir_demo.utils.code_hash import code_key

log = logging.getLogger(__name__)

DEFAULT_MODEL = "Qwen/Qwen2.5-VL-7B-Instruct"


def single_token_id(tokenizer, word: str, role: str, model_name: str) -> int:
    """The id of `word` as the first answer token; an error unless it is exactly one token."""
    if not isinstance(word, str) or not word:
        raise ValueError(f"{role} token must be a non-empty string, got {word!r}")
    ids = tokenizer.encode(word, add_special_tokens=False)
    if len(ids) != 1:
        pieces = tokenizer.convert_ids_to_tokens(ids)
        raise ValueError(
            f"{role} token {word!r} is {len(ids)} tokens {pieces} in the tokenizer of {model_name}; "
            "the score reads one next-token logit, so pick a word that is a single token "
            "(e.g. yes/no or True/False)"
        )
    if tokenizer.unk_token_id is not None and ids[0] == tokenizer.unk_token_id:
        raise ValueError(f"{role} token {word!r} is unknown to the tokenizer of {model_name}")
    return int(ids[0])


def resolve_model_dir(name_or_path: str, revision: str | None = None) -> Path | None:
    """The local directory holding the model files (a path, or the hub cache snapshot), if it can be found."""
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        return p
    try:
        from transformers.utils import cached_file

        config = cached_file(name_or_path, "config.json", revision=revision)
        return Path(config).parent if config else None
    except Exception:  # offline and not cached: from_pretrained will report the real problem
        return None


def weights_fingerprint(model_dir: Path | None, chunk: int = 1 << 20) -> str | None:
    """A cheap fingerprint of a checkpoint: config.json in full, and for each weight
    file its name, size, first and last MiB. Hashing a 15 GB checkpoint in full
    would cost minutes per load; retrained or swapped weights change these bytes."""
    if model_dir is None:
        return None
    h = hashlib.sha256()
    files = sorted(
        f
        for f in model_dir.iterdir()
        if f.is_file() and (f.name == "config.json" or f.suffix in (".safetensors", ".bin"))
    )
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.name}:{size}:".encode())
        with open(f, "rb") as fh:
            if f.name == "config.json":
                h.update(fh.read())
                continue
            h.update(fh.read(chunk))
            if size > chunk:
                fh.seek(max(chunk, size - chunk))
                h.update(fh.read(chunk))
    return h.hexdigest()[:16]


def _pick_device_dtype(device: str, dtype: str):
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in names:
        raise ValueError(f"dtype must be one of {sorted(names)} or 'auto', got {dtype!r}")
    return torch.device(device), dtype, names[dtype]


class QwenVLReranker(LogitPairReranker):
    """Qwen2.5-VL pointwise reranker.

    model: hub name or local directory. device: "auto" (CUDA when present, else
    CPU), "cpu", "cuda", "cuda:1". dtype: "auto" (bfloat16 on CUDA, float32 on
    CPU), "float32", "bfloat16", "float16". batch_size: candidates per forward.
    min_pixels/max_pixels: image resolution bounds (None: the processor's).
    use_prefix_cache=False scores each candidate with its own full forward
    (the reference path; same scores, slower).
    """

    backend = "qwen2.5-vl"
    FLAGS = ("yes_token", "no_token", "model", "device", "dtype", "batch_size", "max_pixels")

    @classmethod
    def weights(cls, **kw) -> list:
        from cir_demo.utils.needs import HubModel

        return [HubModel(kw.get("model") or DEFAULT_MODEL)]

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        device: str = "auto",
        dtype: str = "auto",
        yes_token: str = "yes",
        no_token: str = "no",
        batch_size: int = 8,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        prompt: PromptTemplate | dict | None = None,
        use_prefix_cache: bool = True,
        attn_implementation: str = "sdpa",
        revision: str | None = None,
    ):
        import torch
        import transformers
        from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if yes_token == no_token:
            raise ValueError(f"yes and no tokens must differ, both are {yes_token!r}")
        self.model_name = str(model)
        self._lock = threading.Lock()  # one scoring call at a time (the app may call from several threads)
        self.batch_size = int(batch_size)
        self.use_prefix_cache = bool(use_prefix_cache)
        self.template = prompt if isinstance(prompt, PromptTemplate) else PromptTemplate.from_dict(prompt or {})
        self.device, dtype_name, torch_dtype = _pick_device_dtype(device, dtype)

        self.processor = AutoProcessor.from_pretrained(self.model_name, revision=revision)
        if min_pixels is not None or max_pixels is not None:
            size = dict(self.processor.image_processor.size)
            if min_pixels is not None:
                size["shortest_edge"] = int(min_pixels)
            if max_pixels is not None:
                size["longest_edge"] = int(max_pixels)
            self.processor.image_processor.size = type(self.processor.image_processor.size)(**size)
        tok = self.processor.tokenizer
        self.yes_id = single_token_id(tok, yes_token, "yes", self.model_name)
        self.no_id = single_token_id(tok, no_token, "no", self.model_name)
        if self.yes_id == self.no_id:
            raise ValueError(f"yes token {yes_token!r} and no token {no_token!r} map to the same id {self.yes_id}")

        self.model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            self.model_name, dtype=torch_dtype, attn_implementation=attn_implementation, revision=revision
        ).to(self.device)
        self.model.eval()
        cfg = self.model.config
        self.image_token_id = int(cfg.image_token_id)
        self.vision_start = tok.convert_ids_to_tokens(int(cfg.vision_start_token_id))
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else int(self.no_id)

        size = self.processor.image_processor.size
        self.spec = {
            "backend": self.backend,
            "model": self.model_name,
            "revision": revision,
            "weights_fingerprint": weights_fingerprint(resolve_model_dir(self.model_name, revision)),
            "yes_token": yes_token,
            "no_token": no_token,
            "yes_token_id": self.yes_id,
            "no_token_id": self.no_id,
            "score": "sigmoid(logit_yes - logit_no) at the first answer position",
            "prompt": self.template.to_dict(),
            "chat_template_sha256": hashlib.sha256((self.processor.chat_template or "").encode("utf-8")).hexdigest()[
                :16
            ],
            "dtype": dtype_name,
            "image_pixels": {"min": size.get("shortest_edge"), "max": size.get("longest_edge")},
            "attn_implementation": attn_implementation,
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
            "code": code_key((__name__,), ("torch", "transformers", "pillow", "numpy")),
        }

    # ------------------------------------------------------------------ prompt
    def chat_text(self, request: RerankRequest) -> str:
        """The exact text given to the processor (one image placeholder per image)."""
        system, segments = render_segments(
            self.template,
            request.instruction,
            len(request.reference_ids),
            self.spec["yes_token"],
            self.spec["no_token"],
        )
        user = [{"type": "text", "text": t} if kind == "text" else {"type": "image"} for kind, t in segments]
        messages = [
            {"role": "system", "content": [{"type": "text", "text": system}]},
            {"role": "user", "content": user},
        ]
        return self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def prompt_text(self, request: RerankRequest) -> str:
        return self.chat_text(request)

    def split_prefix(self, text: str, n_references: int) -> tuple[str, str]:
        """Split the chat text just before the candidate image: (shared prefix, candidate segment)."""
        cut = text.rfind(self.vision_start)
        image_token = self.processor.image_token
        prefix, segment = text[:cut], text[cut:]
        if cut < 0 or prefix.count(image_token) != n_references or segment.count(image_token) != 1:
            raise ValueError(
                f"chat template output does not hold {n_references} reference image(s) then one candidate image "
                f"(split at {self.vision_start!r}): {text!r}"
            )
        return prefix, segment

    # ------------------------------------------------------------------ scoring
    def score_logits(self, request: RerankRequest, candidate_images: Sequence[Any]) -> np.ndarray:
        import torch

        if len(candidate_images) == 0:
            return np.zeros((0, 2))
        with self._lock, torch.inference_mode():
            if self.use_prefix_cache:
                return self._score_with_prefix_cache(request, candidate_images)
            return self._score_one_by_one(request, candidate_images)

    def _answer_logits(self, hidden_last):
        """(B, H) final hidden states at the answer position -> (B, 2) float64 numpy [yes, no]."""
        logits = self.model.lm_head(hidden_last)
        return logits[:, [self.yes_id, self.no_id]].float().cpu().numpy().astype(np.float64)

    def _score_one_by_one(self, request: RerankRequest, candidate_images: Sequence[Any]) -> np.ndarray:
        """The reference path: each candidate in its own full forward; the model computes its own positions."""
        text = self.chat_text(request)
        out = []
        for image in candidate_images:
            enc = self.processor(text=[text], images=[*request.reference_images, image], return_tensors="pt").to(
                self.device
            )
            hidden = self.model.model(**enc, use_cache=False).last_hidden_state
            out.append(self._answer_logits(hidden[:, -1]))
        return np.concatenate(out, axis=0)

    def _score_with_prefix_cache(self, request: RerankRequest, candidate_images: Sequence[Any]) -> np.ndarray:
        import torch
        from transformers import DynamicCache

        n_refs = len(request.reference_ids)
        prefix_text, segment_text = self.split_prefix(self.chat_text(request), n_refs)
        prefix = self.processor(text=[prefix_text], images=list(request.reference_images), return_tensors="pt").to(
            self.device
        )
        prefix_len = prefix["input_ids"].shape[1]
        core = self.model.model
        prefix_pos, _ = core.get_rope_index(
            prefix["input_ids"], mm_token_type_ids=prefix["mm_token_type_ids"], image_grid_thw=prefix["image_grid_thw"]
        )
        prefix_out = core(
            input_ids=prefix["input_ids"],
            pixel_values=prefix["pixel_values"],
            image_grid_thw=prefix["image_grid_thw"],
            position_ids=prefix_pos,
            use_cache=True,
        )
        prefix_kv = [(layer.keys, layer.values) for layer in prefix_out.past_key_values.layers]

        segments = self.candidate_segments(segment_text, candidate_images)
        lengths = [s["input_ids"].shape[1] for s in segments]
        # Similar lengths share a batch: less padding.
        order = sorted(range(len(segments)), key=lambda i: lengths[i])
        result = np.zeros((len(segments), 2))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            batch = [segments[i] for i in rows]
            b, width = len(rows), max(lengths[i] for i in rows)
            seg_ids = torch.full((b, width), self.pad_id, dtype=torch.long)
            seg_types = torch.zeros((b, width), dtype=torch.long)
            seg_mask = torch.zeros((b, width), dtype=torch.long)
            for r, s in enumerate(batch):
                n = s["input_ids"].shape[1]
                seg_ids[r, :n] = s["input_ids"][0]
                seg_types[r, :n] = s["mm_token_type_ids"][0]
                seg_mask[r, :n] = 1
            seg_ids, seg_types, seg_mask = seg_ids.to(self.device), seg_types.to(self.device), seg_mask.to(self.device)
            cand_grids = torch.cat([s["image_grid_thw"] for s in batch]).to(self.device)

            # mrope positions of the full sequences (prefix + candidate), sliced after the prefix.
            full_ids = torch.cat([prefix["input_ids"].expand(b, -1), seg_ids], dim=1)
            full_types = torch.cat([prefix["mm_token_type_ids"].expand(b, -1), seg_types], dim=1)
            full_mask = torch.cat([torch.ones_like(prefix["input_ids"]).expand(b, -1), seg_mask], dim=1)
            full_grids = torch.cat([torch.cat([prefix["image_grid_thw"], g[None]]) for g in cand_grids])
            full_pos, _ = core.get_rope_index(
                full_ids, mm_token_type_ids=full_types, image_grid_thw=full_grids, attention_mask=full_mask
            )
            if not torch.equal(full_pos[:, :, :prefix_len], prefix_pos.expand(-1, b, -1)):
                raise RuntimeError("mrope positions of the prefix depend on the candidate; prefix caching is invalid")
            seg_pos = full_pos[:, :, prefix_len:]

            # Each row gets its own view of the prefix cache (expand: no copy until the cache grows).
            cache = DynamicCache(
                [(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in prefix_kv], config=self.model.config
            )
            out = core(
                input_ids=seg_ids,
                pixel_values=torch.cat([s["pixel_values"] for s in batch]).to(self.device),
                image_grid_thw=cand_grids,
                position_ids=seg_pos,
                past_key_values=cache,
                use_cache=True,
            )
            last = seg_mask.sum(dim=1) - 1
            hidden_last = out.last_hidden_state[torch.arange(b, device=self.device), last]
            result[rows] = self._answer_logits(hidden_last)
        return result

    def candidate_segments(self, segment_text: str, images: Sequence[Any]) -> list[dict]:
        """Processor outputs for each candidate segment (its image + the end of the chat turn).

        Equivalent to calling the processor once per candidate, but the images are
        processed in one call and the text is tokenized once: the image
        placeholder is expanded to each image's token count by id. The first
        candidate is checked against a real processor call.
        """
        import torch

        pixels = self.processor.image_processor(images=list(images), return_tensors="pt")
        grids = pixels["image_grid_thw"]
        patches = grids.prod(dim=1)
        merge = self.processor.image_processor.merge_size**2
        text_ids = self.processor.tokenizer(segment_text, add_special_tokens=False)["input_ids"]
        slot = text_ids.index(self.image_token_id)  # the one placeholder (split_prefix checked the count)
        out = []
        for grid, pv in zip(grids, torch.split(pixels["pixel_values"], patches.tolist())):
            n_tokens = int(grid.prod()) // merge
            ids = torch.tensor([text_ids[:slot] + [self.image_token_id] * n_tokens + text_ids[slot + 1 :]])
            out.append(
                {
                    "input_ids": ids,
                    "mm_token_type_ids": (ids == self.image_token_id).long(),
                    "pixel_values": pv,
                    "image_grid_thw": grid[None],
                }
            )
        check = self.processor(text=[segment_text], images=[images[0]], return_tensors="pt")
        if not (
            torch.equal(check["input_ids"], out[0]["input_ids"])
            and torch.equal(check["mm_token_type_ids"].long(), out[0]["mm_token_type_ids"])
            and torch.equal(check["image_grid_thw"], out[0]["image_grid_thw"])
            and torch.allclose(check["pixel_values"], out[0]["pixel_values"])
        ):
            raise RuntimeError(f"candidate segment built by id differs from the processor's for {self.model_name}")
        return out

    def close(self) -> None:
        import torch

        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

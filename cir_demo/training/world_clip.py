"""world-CLIP: a small open_clip CLIP trained from scratch on the world's train captions.

Architecture: an open_clip custom config (ViT 64 px / patch 8, text transformer) with a
word-level tokenizer built from the train split's vocabulary and saved as a local HF tokenizer
folder (open_clip's BPE table alone would be ~25 MB). Loss: CLIP's symmetric contrastive loss
with multi-positive targets: two batch items whose sampled captions are the same string are
positives of each other, not negatives (many images share a short description). Plus an
auxiliary supervised loss: linear heads on the (scaled) unit image embedding predict each train
image's scene-graph attributes (type, colour, pattern, material, shape, count, pose, place, ...;
train split only), so the image embedding encodes the item's identity, not just its colour and
background. The heads are discarded at save time: the saved model is a plain open_clip model.

The saved files are exactly what the open_clip retriever adapter loads:
`<out>/model_config.json`, `<out>/tokenizer/`, `<out>/world_clip.safetensors` + its
preprocessing sidecar, and `<out>/manifest.json`.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from cir_demo.models.preprocess import PREPROCESS
from cir_demo.training.loop import lr_at, step_plan
from cir_demo.training.scene_fields import PREDICTED_FIELDS

MODEL_NAME = "world-clip"
WEIGHTS_NAME = "world_clip.safetensors"
PAD, UNK, EOS = "[PAD]", "[UNK]", "[EOS]"  # ids 0, 1, 2 (open_clip's default pad_id 0 / eos_id 2)
_WORD_RE = re.compile(r"\w+|[^\w\s]")
# What an embedding cached from `encode_pixels` is keyed by (`training.data.cached_array`): this module's
# code (and what it reaches: the model, open_clip's wrapper) and the libraries that compute it
ENCODE_CODE = (__name__,)
ENCODE_LIBRARIES = ("torch", "numpy", "open_clip")


@dataclass
class WorldClipConfig:
    embed_dim: int = 128
    image_width: int = 128
    image_layers: int = 4
    patch_dropout: float = 0.5  # FLIP-style: train on half the patches (2x cheaper image tower); off at eval
    text_width: int = 128
    text_layers: int = 3
    context_length: int = 48
    batch_size: int = 256
    epochs: float = 18.0
    lr: float = 1e-3
    weight_decay: float = 0.1
    warmup_steps: int = 50
    seed: int = 0
    max_steps: int | None = None  # tests: stop after a few steps
    # Auxiliary supervision (train split only; the heads are discarded at save time): linear heads on
    # the normalised image embedding predict each train image's scene-graph attributes.
    aux_weight: float = 5.0  # 0 = plain CLIP loss
    aux_identity_weight: float = 2.0  # relative weight of the item identity (type, colour, pattern, material, shape)
    aux_scale: float = 10.0  # the heads read `aux_scale * unit embedding` (cosine-space linear separability)


# --------------------------------------------------------------------------- tokenizer
def world_texts(train) -> list[str]:
    """All train texts the text tower sees: captions and intent paraphrases (markers as words)."""
    from cir_demo.retrievers.base import render_markers

    texts = [c for caps in train.captions.values() for c in caps]
    texts += [render_markers(p, "words") for it in train.intents for p in it["paraphrases"]]
    return texts


def build_tokenizer(texts: Sequence[str], out_dir: Path) -> int:
    """A lower-cased word-level HF tokenizer over `texts` saved to `out_dir`; returns the vocab size.

    Words and punctuation are tokens; unseen words map to [UNK]; every sequence ends in [EOS]
    (text pooling reads the [EOS] position: open_clip pool_type 'eos', eos_id 2).
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    counts = Counter(w for t in texts for w in _WORD_RE.findall(t.lower()))
    vocab = {PAD: 0, UNK: 1, EOS: 2}
    for word, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        vocab[word] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", special_tokens=[(EOS, 2)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, unk_token=UNK, eos_token=EOS, model_max_length=512
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    return len(vocab)


def model_config(cfg: WorldClipConfig, vocab_size: int, tokenizer_path: str) -> dict:
    """The open_clip architecture config (JSON-able)."""
    return {
        "embed_dim": cfg.embed_dim,
        "vision_cfg": {
            "image_size": PREPROCESS["size"],
            "patch_size": 8,
            "width": cfg.image_width,
            "layers": cfg.image_layers,
            "head_width": 32,
            "mlp_ratio": 4.0,
            "patch_dropout": cfg.patch_dropout,
        },
        "text_cfg": {
            "context_length": cfg.context_length,
            "vocab_size": vocab_size,
            "width": cfg.text_width,
            "heads": cfg.text_width // 32,
            "layers": cfg.text_layers,
            "hf_tokenizer_name": tokenizer_path,
            "pool_type": "eos",
            "eos_id": 2,
            "pad_id": 0,
        },
    }


def create_model(model_name: str, arch: dict):
    """The open_clip model for `arch` (registered under `model_name`) and its tokenizer."""
    import open_clip

    from cir_demo.retrievers.openclip import make_tokenizer, register_model_config

    register_model_config(model_name, arch)
    model = open_clip.create_model(model_name, pretrained=None, device="cpu", precision="fp32")
    return model, make_tokenizer(model_name, arch)


# --------------------------------------------------------------------------- encoding helpers
def encode_pixels(
    model, pixels_uint8: np.ndarray, batch_size: int = 512, progress: bool = False, desc: str = "encode images"
) -> np.ndarray:
    """(n, dim) float32 unit rows from uint8 model-input pixels."""
    import torch

    from cir_demo.models.preprocess import normalize_pixels

    out = []
    starts = range(0, len(pixels_uint8), batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=desc, unit="batch")
    model.eval()
    with torch.inference_mode():
        for s in starts:
            x = normalize_pixels(pixels_uint8[s : s + batch_size])
            out.append(torch.nn.functional.normalize(model.encode_image(x).float(), dim=-1).numpy())
    dim = model.text_projection.shape[1] if hasattr(model, "text_projection") else None
    return np.concatenate(out) if out else np.zeros((0, dim or 0), np.float32)


def encode_texts(model, tokenizer, texts: Sequence[str], batch_size: int = 1024) -> np.ndarray:
    """(n, dim) float32 unit rows (texts used as given)."""
    import torch

    out = []
    model.eval()
    with torch.inference_mode():
        for s in range(0, len(texts), batch_size):
            tokens = tokenizer(list(texts[s : s + batch_size]))
            out.append(torch.nn.functional.normalize(model.encode_text(tokens).float(), dim=-1).numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


# --------------------------------------------------------------------------- loss
def multi_positive_clip_loss(img_emb, txt_emb, logit_scale, caption_ids):
    """Symmetric CLIP cross-entropy where items with equal `caption_ids` are all positives.

    Targets are uniform over the positives of each row, so with all-distinct captions this is
    exactly CLIP's loss.
    """
    import torch

    logits = logit_scale * img_emb @ txt_emb.t()
    same = (caption_ids[:, None] == caption_ids[None, :]).float()
    target = same / same.sum(dim=1, keepdim=True)
    loss_i = -(target * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
    loss_t = -(target * torch.log_softmax(logits.t(), dim=1)).sum(dim=1).mean()
    return (loss_i + loss_t) / 2


# --------------------------------------------------------------------------- auxiliary attribute heads
# Scene attributes the image heads predict: everything a query may ask about or keep, in head order.
AUX_FIELDS = PREDICTED_FIELDS


def attribute_targets(scenes: np.ndarray, fields: Sequence[str] = AUX_FIELDS) -> tuple[np.ndarray, list[int]]:
    """(n, len(fields)) int64 class codes of a scene table (train split) and each field's class count."""
    from cir_demo.world import attributes as A

    codes = np.stack([np.asarray(scenes[f], dtype=np.int64) for f in fields], axis=1)
    sizes = []
    for j, f in enumerate(fields):
        vocab = A.CATEGORICAL.get(f)
        sizes.append(max(len(vocab) if vocab is not None else 0, int(codes[:, j].max()) + 1))
    return codes, sizes


def attribute_weights(fields: Sequence[str], identity_weight: float) -> np.ndarray:
    from cir_demo.world.attributes import ITEM_FIELDS

    w = np.array([identity_weight if f in ITEM_FIELDS else 1.0 for f in fields], dtype=np.float32)
    return w / w.sum()


def build_aux_heads(dim: int, sizes: Sequence[int]):
    """One linear classifier per attribute over the (scaled) unit image embedding."""
    import torch

    return torch.nn.ModuleList([torch.nn.Linear(dim, k) for k in sizes])


def aux_attribute_loss(heads, emb, targets, weights, scale: float):
    """Weighted sum over attributes of the cross-entropy of `heads[j](scale * emb)` vs `targets[:, j]`."""
    import torch

    x = scale * emb
    total = emb.new_zeros(())
    for j, head in enumerate(heads):
        total = total + float(weights[j]) * torch.nn.functional.cross_entropy(head(x), targets[:, j])
    return total


# --------------------------------------------------------------------------- training
def _caption_tokens(train, tokenizer, n_pixel_rows: int):
    """(token ids (n, captions per image, L), caption ids (n, captions per image)) of every train image."""
    import torch

    from cir_demo.training.data import caption_data

    data = caption_data(train)
    n = len(data.image_ids)
    if n_pixel_rows != n:
        raise ValueError(f"world-CLIP training: {n_pixel_rows} pixel rows for {n} train images")
    flat_caps = [c for caps in data.captions for c in caps]
    per_image = len(data.captions[0])
    if any(len(c) != per_image for c in data.captions):
        raise ValueError("world-CLIP training: every train image needs the same number of captions")
    return tokenizer(flat_caps).view(n, per_image, -1), torch.tensor(data.caption_ids, dtype=torch.long)


def _aux_supervision(train, cfg: WorldClipConfig, n: int):
    """(heads, targets, weights) of the auxiliary attribute loss from the train-split scene graphs (heads
    discarded at save); (None, None, None) when `cfg.aux_weight` is 0."""
    import torch

    if cfg.aux_weight <= 0:
        return None, None, None
    codes, sizes = attribute_targets(train.scenes)
    if codes.shape[0] != n:
        raise ValueError(f"world-CLIP training: {codes.shape[0]} train scenes for {n} train images")
    return (
        build_aux_heads(cfg.embed_dim, sizes),
        torch.from_numpy(codes),
        attribute_weights(AUX_FIELDS, cfg.aux_identity_weight),
    )


def _optimizer(model, heads, cfg: WorldClipConfig):
    """AdamW with weight decay on the matrices only (not embeddings, biases, norms or the aux heads)."""
    import torch

    decay = [p for nm, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in nm]
    no_decay = [p for nm, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in nm)]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if heads is not None:
        groups.append({"params": list(heads.parameters()), "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)


def train_world_clip(
    train,
    pixels: np.ndarray,
    out_dir: Path,
    cfg: WorldClipConfig,
    model_name: str = MODEL_NAME,
    tokenizer_ref: str | None = None,
    progress: bool = True,
):
    """Train world-CLIP on `train` (TrainSplit) with `pixels` (uint8, rows = train.image_ids).

    Writes the tokenizer and model config into `out_dir` and returns (model, tokenizer, arch, info).
    `tokenizer_ref` is the path written into the config (repo-relative for committed assets);
    default: the absolute tokenizer folder.
    """
    import torch

    from cir_demo.models.preprocess import normalize_pixels

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    out_dir = Path(out_dir)
    tok_dir = out_dir / "tokenizer"
    vocab_size = build_tokenizer(world_texts(train), tok_dir)
    arch = model_config(cfg, vocab_size, tokenizer_ref or str(tok_dir.resolve()))
    model, tokenizer = create_model(model_name, arch)
    all_tokens, all_cids = _caption_tokens(train, tokenizer, pixels.shape[0])
    n, per_image = all_tokens.shape[:2]

    steps_per_epoch = max(1, n // cfg.batch_size)
    total, it = step_plan(steps_per_epoch, cfg.epochs, cfg.max_steps, "train world-CLIP", progress)
    heads, aux_targets, aux_w = _aux_supervision(train, cfg, n)
    opt = _optimizer(model, heads, cfg)
    model.train()
    t0 = time.time()
    order = rng.permutation(n)
    pos = 0
    losses, aux_losses = [], []
    params = list(model.parameters()) + (list(heads.parameters()) if heads is not None else [])
    for step in it:
        if pos + cfg.batch_size > n:
            order, pos = rng.permutation(n), 0
        idx = order[pos : pos + cfg.batch_size]
        pos += cfg.batch_size
        choice = torch.from_numpy(rng.integers(0, per_image, len(idx)))
        idx_t = torch.from_numpy(idx)
        tokens = all_tokens[idx_t, choice]
        cids = all_cids[idx_t, choice]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, cfg.lr, cfg.warmup_steps)
        img = torch.nn.functional.normalize(model.encode_image(normalize_pixels(pixels[idx])), dim=-1)
        txt = torch.nn.functional.normalize(model.encode_text(tokens), dim=-1)
        loss = multi_positive_clip_loss(img, txt, model.logit_scale.exp().clamp(max=100.0), cids)
        losses.append(float(loss.detach()))
        if heads is not None:
            aux = aux_attribute_loss(heads, img, aux_targets[idx_t], aux_w, cfg.aux_scale)
            aux_losses.append(float(aux.detach()))
            loss = loss + cfg.aux_weight * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if progress and step % 20 == 0:
            post = {"loss": f"{np.mean(losses[-20:]):.3f}", "scale": f"{float(model.logit_scale.exp()):.1f}"}
            if aux_losses:
                post["aux"] = f"{np.mean(aux_losses[-20:]):.3f}"
            it.set_postfix(**post)
    model.eval()
    info = {
        "steps": total,
        "epochs": total / steps_per_epoch,
        "train_seconds": round(time.time() - t0, 1),
        "final_loss": float(np.mean(losses[-50:])),
        "vocab_size": vocab_size,
        "config": asdict(cfg),
    }
    if aux_losses:
        info["final_aux_loss"] = float(np.mean(aux_losses[-50:]))
        info["aux_fields"] = list(AUX_FIELDS)
    return model, tokenizer, arch, info


def save_world_clip(model, arch: dict, out_dir: Path, model_name: str = MODEL_NAME) -> dict:
    """Write `model_config.json` and the weights + preprocessing sidecar; returns their paths/hashes."""
    from cir_demo.retrievers.openclip import save_weights_with_preprocess
    from cir_demo.utils.io import sha256_file, write_json_atomic

    out_dir = Path(out_dir)
    write_json_atomic(out_dir / "model_config.json", arch)
    weights = out_dir / WEIGHTS_NAME
    sidecar = save_weights_with_preprocess(model, weights, model_name, PREPROCESS)
    files = {p.name: sha256_file(p) for p in (out_dir / "model_config.json", weights, sidecar)}
    for p in sorted((out_dir / "tokenizer").iterdir()):
        files[f"tokenizer/{p.name}"] = sha256_file(p)
    return files


def load_world_clip(out_dir: Path, model_name: str = MODEL_NAME):
    """(model, tokenizer, arch) from a folder written by `save_world_clip` (no open_clip retriever)."""
    from safetensors.torch import load_file

    out_dir = Path(out_dir)
    arch = json.loads((out_dir / "model_config.json").read_text(encoding="utf-8"))
    model, tokenizer = create_model(model_name, arch)
    model.load_state_dict({k: v.float() for k, v in load_file(str(out_dir / WEIGHTS_NAME)).items()})
    model.eval()
    return model, tokenizer, arch

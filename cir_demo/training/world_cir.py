"""Training world-CIR, the CLIP4Cir-style Combiner over frozen world-CLIP features (the model
itself is defined in cir_demo/models/world_cir.py, which the retriever loads too).

Training data: the train split's intents (every paraphrase; the train triplets are sampled from
them). Loss per query: a multi-positive softmax over the *whole* train gallery (all ~22k frozen
image embeddings, the query's references masked out; targets = every train image satisfying the
intent), which contains all in-batch negatives, plus a softmax over the target against the
intent's near misses (train images breaking exactly one constraint: the hard negatives).
A held-out 10% of *train* intents picks the epoch count; the test split is never seen.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from cir_demo.models.world_cir import build_combiner
from cir_demo.training.loop import lr_at, step_plan

WEIGHTS_NAME = "world_cir.safetensors"


@dataclass
class WorldCirConfig:
    hidden: int = 512
    batch_size: int = 256
    epochs: int = 6
    lr: float = 1e-3
    weight_decay: float = 0.01
    temperature: float = 0.03
    hard_weight: float = 1.0
    val_fraction: float = 0.1
    seed: int = 0
    max_steps: int | None = None


def reference_pairs(ref_emb: np.ndarray, ref_row: dict, queries) -> tuple[np.ndarray, np.ndarray]:
    """(ref1, ref2) per query; ref2 repeats ref1 for one-image queries."""
    r1 = np.stack([ref_emb[ref_row[q.reference_ids[0]]] for q in queries])
    r2 = np.stack([ref_emb[ref_row[q.reference_ids[-1]]] for q in queries])
    return r1, r2


# --------------------------------------------------------------------------- training
def _flatten(examples, text_emb_of):
    """(intent index, paraphrase index) rows for every paraphrase of every intent."""
    rows = [(i, j) for i, ex in enumerate(examples) for j in range(len(ex.texts))]
    return np.array(rows, dtype=np.int64)


def _loss_terms(model, batch, examples, img, text_emb, cfg, torch):
    ex_idx, par_idx = batch[:, 0], batch[:, 1]
    exs = [examples[i] for i in ex_idx]
    r1 = img[[ex.ref_rows[0] for ex in exs]]
    r2 = img[[ex.ref_rows[-1] for ex in exs]]
    t = torch.stack([text_emb[i][j] for i, j in zip(ex_idx, par_idx)])
    q = model(r1, r2, t)
    logits = q @ img.t() / cfg.temperature
    mask = torch.zeros_like(logits, dtype=torch.bool)
    target = torch.zeros_like(logits)
    for b, ex in enumerate(exs):
        mask[b, list(ex.ref_rows)] = True
        target[b, torch.from_numpy(ex.positive_rows)] = 1.0 / len(ex.positive_rows)
    logits = logits.masked_fill(mask, -1e4)
    gallery = -(target * torch.log_softmax(logits, dim=1)).sum(1).mean()
    # hard negatives: one sampled positive against the intent's near misses
    hard = []
    for b, ex in enumerate(exs):
        if len(ex.near_miss_rows) == 0:
            continue
        pos = int(ex.positive_rows[np.random.randint(len(ex.positive_rows))])
        cand = torch.from_numpy(np.concatenate([[pos], ex.near_miss_rows]))
        hard.append(-torch.log_softmax(logits[b, cand], dim=0)[0])
    hard_loss = torch.stack(hard).mean() if hard else logits.sum() * 0
    return gallery + cfg.hard_weight * hard_loss


def val_map10(model, examples, img, text_emb, torch) -> float:
    """mAP@10 (no negatives) over held-out *train* intents against the train gallery."""
    if not examples:
        return float("nan")
    aps = []
    with torch.inference_mode():
        for ex_i, ex in enumerate(examples):
            n = len(ex.texts)
            r1 = img[[ex.ref_rows[0]] * n]
            r2 = img[[ex.ref_rows[-1]] * n]
            q = model(r1, r2, text_emb[ex_i])
            s = q @ img.t()
            s[:, list(ex.ref_rows)] = -1e4
            top = torch.topk(s, 10, dim=1).indices.numpy()
            pos = set(ex.positive_rows.tolist())
            for row in top:
                hits = np.array([r in pos for r in row], dtype=float)
                prec = np.cumsum(hits) / np.arange(1, 11)
                aps.append(float((prec * hits).sum() / min(len(pos), 10)))
    return float(np.mean(aps))


def train_world_cir(examples, img_emb: np.ndarray, text_emb_fn, cfg: WorldCirConfig, progress: bool = True):
    """Train the combiner. `img_emb`: frozen (n_train, d) world-CLIP image embeddings (row = train
    image index); `text_emb_fn(list[str]) -> (n, d)` encodes paraphrases. Returns (model, info)."""
    import torch

    from cir_demo.training.data import split_intents

    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    tr_ex, val_ex = split_intents(examples, cfg.val_fraction, cfg.seed)
    img = torch.from_numpy(np.asarray(img_emb, np.float32))
    tr_text = [torch.from_numpy(text_emb_fn(ex.texts)) for ex in tr_ex]
    val_text = [torch.from_numpy(text_emb_fn(ex.texts)) for ex in val_ex]
    rows = _flatten(tr_ex, None)
    model = build_combiner(img.shape[1], cfg.hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = max(1, math.ceil(len(rows) / cfg.batch_size))
    total, it = step_plan(steps_per_epoch, cfg.epochs, cfg.max_steps, "train world-CIR", progress)
    best = (-1.0, None, 0)
    history = []
    t0 = time.time()
    order = rng.permutation(len(rows))
    pos = 0
    for step in it:
        if pos >= len(order):
            order, pos = rng.permutation(len(rows)), 0
        batch = rows[order[pos : pos + cfg.batch_size]]
        pos += cfg.batch_size
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, cfg.lr)
        model.train()
        loss = _loss_terms(model, batch, tr_ex, img, tr_text, cfg, torch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        end_of_epoch = (step + 1) % steps_per_epoch == 0 or step == total - 1
        if end_of_epoch:
            model.eval()
            score = val_map10(model, val_ex, img, val_text, torch)
            history.append(round(score, 4))
            if progress:
                it.set_postfix(loss=f"{float(loss):.3f}", val_mAP10=f"{score:.3f}")
            if not score <= best[0]:  # NaN (no validation intents) keeps the latest
                best = (score, {k: v.detach().clone() for k, v in model.state_dict().items()}, len(history))
    model.load_state_dict(best[1])
    model.eval()
    info = {
        "steps": total,
        "train_seconds": round(time.time() - t0, 1),
        "val_mAP@10_noNeg_by_epoch": history,
        "best_epoch": best[2],
        "n_train_intents": len(tr_ex),
        "n_val_intents": len(val_ex),
        "config": asdict(cfg),
    }
    return model, info

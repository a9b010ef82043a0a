"""Training the world judge (`cir_demo/models/world_judge.py`) on the world's train split only.

Stage 1, the eyes: the judge's CNN learns to see the world from pixels, as a multi-task classifier of
the train images' scene attributes (type, colour, pattern, material, shape, count, accessories, pose,
place, ...; linear heads over pooled patch features, left and right halves pooled apart so "the cat
on the left" is learnable). The heads exist only here: the saved judge has no attribute output and
never reads a scene graph; at inference it sees pixels and words only.

Stage 2, the judge: with the CNN frozen (its patch features of the train images computed once), the
query encoder and the cross-attention blocks learn "does the candidate satisfy the instruction applied
to the references" from (references, paraphrase, candidate, label) pairs of the train intents.
Candidates per query: positives, **near misses** (train images that break exactly one constraint;
half of them break the constraint the instruction is about: the same dress still red), what a
first stage shows (world-CLIP fusion top 30 on the train gallery) and random train images. Loss:
binary cross-entropy on the logit margin (near misses weighted `near_miss_weight`) and a pairwise
logistic loss asking every positive to outscore every near miss; optionally, in the last epochs, one
asking every other non-relevant candidate to outscore the near misses (`near_miss_last_weight`, off:
see the config). 10% of the train intents are held out (still train data) to choose the epoch and to
calibrate P(yes) (temperature and bias, folded into the head).

Between the stages, the judge's attribute reader (linear heads over pooled patch tokens) learns the
train images' properties from the frozen features; the judge then compares a wanted distribution of
each property (from the query's probes) with the candidate's.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from cir_demo.training.judge_ranking import (  # noqa: F401  (rank_keys: the trainer's callers import it here)
    PENALTY_RULE,
    choose_ranking,
    first_stage_quality,
    rank_keys,
    rerank_quality,
)
from cir_demo.training.loop import lr_at, step_plan
from cir_demo.training.scene_fields import PREDICTED_FIELDS

WEIGHTS_NAME = "world_judge.safetensors"
# The scene attributes stage 1 predicts (train split only), in head order.
ATTRIBUTES = PREDICTED_FIELDS
IDENTITY = ("type", "color", "pattern", "material", "shape")


@dataclass
class JudgeTrainConfig:
    # stage 1
    cnn_epochs: float = 8.0
    cnn_batch: int = 128
    cnn_lr: float = 2e-3
    # a judge folder whose stage-1 CNN to keep instead of training one (its image encoder, bit for bit)
    cnn_from: str = ""
    # stage 2
    epochs: float = 6.0
    queries_per_batch: int = 48
    n_positive: int = 3
    n_near: int = 6  # half of them break the focus constraint, when the intent has such near misses
    n_first_stage: int = 5
    n_random: int = 2
    first_stage_k: int = 30
    lr: float = 1e-3
    weight_decay: float = 0.01
    near_miss_weight: float = 2.0
    pairwise_weight: float = 1.0
    # An image that breaks the instruction is a worse answer than an off-topic one (PinPoint's premise;
    # it is what would lower NegRecall below a plain yes/no judge): a pairwise loss asking every other
    # non-relevant candidate to outscore the near misses, in the last `near_miss_last_epochs`. Off: it
    # teaches "looks like the reference -> no" and ranks positives below near misses on validation
    # (docs/world_models.md, "World verifier").
    near_miss_last_weight: float = 0.0
    near_miss_last_epochs: float = 2.0
    # stage 3, the near-miss answer (the judge frozen): "is this the target with one thing wrong?",
    # binary cross-entropy of explicit near misses against everything else (positives weighted
    # `near_positive_weight`: flagging a right answer costs most); then the penalty of
    # P(yes) - penalty * P(near) - rank weight * first-stage rank chosen on both validation splits by
    # `choose_ranking`
    near_head: int = 96
    near_steps: int = 600
    near_lr: float = 2e-3
    near_positive_weight: float = 3.0
    near_penalties: tuple = (0.0, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 4.0)
    # ... and the weight of the first-stage rank in the key, P(yes) - penalty * P(near) - w * rank
    # (rank 0-based): a first stage that already ranks well keeps part of its order where the judge
    # is unsure (an edit it has never seen)
    rank_weights: tuple = (0.0, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08)
    # world-CIR, the second first stage both choices are made on ("" = world-CLIP fusion alone)
    choice_cir: str = "assets/world-cir"
    attr_steps: int = 400
    val_fraction: float = 0.1
    val_neg_penalty: float = 1.0
    seed: int = 0
    max_steps: int | None = None
    cnn_max_steps: int | None = None
    arch: dict = field(default_factory=dict)  # JudgeArch overrides


# --------------------------------------------------------------------------- stage 1: the CNN
def attribute_targets(scenes) -> tuple[np.ndarray, list[int]]:
    """(n, len(ATTRIBUTES)) int64 class codes of the train scenes and the number of classes of each."""
    y = np.stack([np.asarray(scenes[a], np.int64) for a in ATTRIBUTES], axis=1)
    return y, [int(y[:, i].max()) + 1 for i in range(len(ATTRIBUTES))]


def _pooled(feats, torch):
    """(n, 64, d) patch features -> (n, 4d): mean, max, left-half mean, right-half mean."""
    from cir_demo.models.world_judge import GRID

    g = feats.view(feats.shape[0], GRID, GRID, -1)
    half = GRID // 2
    return torch.cat([feats.mean(1), feats.amax(1), g[:, :, :half].mean((1, 2)), g[:, :, half:].mean((1, 2))], dim=1)


def train_cnn(pixels: np.ndarray, scenes, arch, cfg: JudgeTrainConfig, progress: bool = True):
    """Stage 1: the patch CNN as an attribute classifier. Returns (cnn, info with held-out accuracies)."""
    import torch
    from torch import nn

    from cir_demo.models.preprocess import normalize_pixels
    from cir_demo.models.world_judge import build_image_encoder

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    y_all, n_classes = attribute_targets(scenes)
    order = rng.permutation(len(pixels))
    n_val = max(1, int(round(0.05 * len(pixels))))
    val_rows, tr_rows = np.sort(order[:n_val]), order[n_val:]
    cnn = build_image_encoder(arch)
    heads = nn.ModuleList(nn.Linear(4 * arch.feat_dim, k) for k in n_classes)
    weight = torch.tensor([2.0 if a in IDENTITY else 1.0 for a in ATTRIBUTES])
    params = list(cnn.parameters()) + list(heads.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.cnn_lr, weight_decay=1e-4)
    steps_per_epoch = max(1, math.ceil(len(tr_rows) / cfg.cnn_batch))
    total, it = step_plan(steps_per_epoch, cfg.cnn_epochs, cfg.cnn_max_steps, "train world judge: eyes (CNN)", progress)
    y_t = torch.from_numpy(y_all)
    t0, pos, perm = time.time(), 0, rng.permutation(tr_rows)
    for step in it:
        if pos >= len(perm):
            perm, pos = rng.permutation(tr_rows), 0
        rows = np.sort(perm[pos : pos + cfg.cnn_batch])
        pos += cfg.cnn_batch
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, cfg.cnn_lr, warmup=min(50, total // 10))
        cnn.train()
        pooled = _pooled(cnn(normalize_pixels(pixels[rows])), torch)
        y = y_t[rows]
        losses = torch.stack([nn.functional.cross_entropy(h(pooled), y[:, i]) for i, h in enumerate(heads)])
        loss = (losses * weight).sum() / weight.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if progress and step % 20 == 0:
            it.set_postfix(loss=f"{float(loss.detach()):.3f}")
    cnn.eval()
    correct = np.zeros(len(ATTRIBUTES))
    with torch.inference_mode():
        for start in range(0, len(val_rows), 256):
            rows = val_rows[start : start + 256]
            pooled = _pooled(cnn(normalize_pixels(pixels[rows])), torch)
            for i, h in enumerate(heads):
                correct[i] += float((h(pooled).argmax(1) == y_t[rows, i]).sum())
    acc = {a: round(float(c / len(val_rows)), 4) for a, c in zip(ATTRIBUTES, correct)}
    return cnn, {
        "steps": total,
        "train_seconds": round(time.time() - t0, 1),
        "n_val_images": int(n_val),
        "val_attribute_accuracy": acc,
    }


def patch_features(cnn, pixels: np.ndarray, batch: int = 256, progress: bool = False, desc: str = "patch features"):
    """Frozen CNN image features (n, feature_dim) float32 unit rows of uint8 model-input pixels."""
    import torch

    from cir_demo.models.preprocess import normalize_pixels
    from cir_demo.models.world_judge import N_TOKENS, image_features

    chunks = range(0, len(pixels), batch)
    if progress:
        from tqdm.auto import tqdm

        chunks = tqdm(chunks, desc=desc, unit="batch")
    out = []
    with torch.inference_mode():
        for s in chunks:
            out.append(image_features(cnn, normalize_pixels(pixels[s : s + batch])).numpy())
    return np.concatenate(out) if out else np.zeros((0, N_TOKENS * 2 * cnn.proj.out_channels), np.float32)


def train_attribute_reader(
    model, feats: np.ndarray, scenes, steps: int = 400, batch: int = 2048, seed: int = 0, progress: bool = True
) -> dict:
    """The judge's attribute reader (linear heads over pooled patch tokens) on the frozen features of
    the train images, cross-entropy per property; 5% of the images held out for its accuracy."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    y, _ = attribute_targets(scenes)
    order = rng.permutation(len(feats))
    n_val = max(1, int(round(0.05 * len(feats))))
    val, tr = order[:n_val], order[n_val:]
    x = torch.from_numpy(np.ascontiguousarray(feats, np.float32))
    y_t = torch.from_numpy(y)
    bounds = [0] + np.cumsum(model.arch.attr_classes).tolist()
    opt = torch.optim.AdamW(model.attr_heads.parameters(), lr=1e-2, weight_decay=1e-4)

    def loss_of(logits, target):
        return sum(
            torch.nn.functional.cross_entropy(logits[:, bounds[a] : bounds[a + 1]], target[:, a])
            for a in range(len(bounds) - 1)
        ) / (len(bounds) - 1)

    t0 = time.time()
    total, it = step_plan(1, steps, None, "train world judge: attribute reader", progress)
    for step in it:
        rows = torch.from_numpy(rng.choice(tr, min(batch, len(tr)), replace=False))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, 1e-2)
        loss = loss_of(model.attribute_logits(x[rows]), y_t[rows])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.inference_mode():
        logits = model.attribute_logits(x[torch.from_numpy(val)])
        acc = {
            a: round(float((logits[:, bounds[i] : bounds[i + 1]].argmax(1) == y_t[val, i]).float().mean()), 4)
            for i, a in enumerate(ATTRIBUTES)
        }
    for p in model.attr_heads.parameters():
        p.requires_grad_(False)
    return {"steps": total, "train_seconds": round(time.time() - t0, 1), "val_attribute_accuracy": acc}


# --------------------------------------------------------------------------- stage 2: the judge
def sample_candidates(ex, fs_row: np.ndarray, n_images: int, cfg: JudgeTrainConfig, rng):
    """Candidates of one training query and their labels / near-miss flags."""
    focus = ex.focus_near_miss_rows if ex.focus_near_miss_rows is not None else np.zeros(0, np.int64)
    near_any = ex.near_miss_rows
    n_focus = min(cfg.n_near // 2, len(focus)) if len(focus) else 0
    n_any = cfg.n_near - n_focus if len(near_any) else 0
    if not len(near_any) and len(focus):
        n_focus = cfg.n_near
    pick = lambda a, n: rng.choice(a, n, replace=len(a) < n) if n and len(a) else np.zeros(0, np.int64)  # noqa: E731
    parts = [
        pick(ex.positive_rows, cfg.n_positive),
        pick(focus, n_focus),
        pick(near_any, n_any),
        pick(fs_row, cfg.n_first_stage),
        rng.integers(0, n_images, cfg.n_random),
    ]
    cand = np.concatenate(parts).astype(np.int64)
    total = cfg.n_positive + cfg.n_near + cfg.n_first_stage + cfg.n_random
    if len(cand) < total:  # few near misses: fill with first-stage candidates
        cand = np.concatenate([cand, pick(fs_row, total - len(cand))])
    labels = np.isin(cand, ex.positive_rows).astype(np.float32)
    near = np.isin(cand, np.union1d(near_any, focus)) & (labels == 0)
    return cand, labels, near


class JudgeData:
    """Train-split tensors the judge reads: patch features of every train image and the token ids of
    every paraphrase of every train intent."""

    def __init__(self, feats: np.ndarray, examples, tokenize, context_length: int):
        import torch

        self.feats = torch.from_numpy(np.ascontiguousarray(feats, np.float32))
        self.examples = examples
        self.tokens = [torch.from_numpy(np.asarray(tokenize(ex.texts, context_length), np.int64)) for ex in examples]

    def query_inputs(self, items):
        """items: (example index, paraphrase index) -> ref1, ref2, two_refs, words tensors."""
        import torch

        exs = [self.examples[i] for i, _ in items]
        r1 = self.feats[[ex.ref_rows[0] for ex in exs]]
        r2 = self.feats[[ex.ref_rows[-1] for ex in exs]]
        two = torch.tensor([len(ex.ref_rows) > 1 for ex in exs])
        words = torch.stack([self.tokens[i][j] for i, j in items])
        return r1, r2, two, words


def pair_margins(model, data: JudgeData, items, cands: np.ndarray):
    """(len(items), m) logit margins of each query's m candidates."""
    import torch

    m = cands.shape[1]
    probes = model.encode_query(*data.query_inputs(items))
    uniq, inv = np.unique(cands.reshape(-1), return_inverse=True)
    memory = model.candidate_memory(data.feats[torch.from_numpy(uniq)])
    logits = model.logits(probes.repeat_interleave(m, 0), memory, torch.from_numpy(inv))
    return (logits[:, 0] - logits[:, 1]).view(len(items), m)


def pair_outputs(model, data: JudgeData, items, cands: np.ndarray):
    """((q, m) logit margins, (q, m) near-miss logits) of each query's m candidates (a judge with a
    near-miss head)."""
    import torch

    m = cands.shape[1]
    inputs = data.query_inputs(items)
    probes = model.encode_query(*inputs)
    ref_props = model.attribute_probs(inputs[0])
    uniq, inv = np.unique(cands.reshape(-1), return_inverse=True)
    memory = model.candidate_memory(data.feats[torch.from_numpy(uniq)])
    logits = model.logits(
        probes.repeat_interleave(m, 0), memory, torch.from_numpy(inv), ref_props.repeat_interleave(m, 0)
    )
    return (logits[:, 0] - logits[:, 1]).view(len(items), m), logits[:, 2].view(len(items), m)


def _near_rows(model, data: JudgeData, idx, fs, top_n: int = 20):
    import torch

    rows = []
    with torch.inference_mode():
        for i in idx:
            cands = fs[i][:, :top_n]
            margins, near_logits = pair_outputs(model, data, [(i, j) for j in range(len(cands))], cands)
            rows.append((data.examples[i], cands, margins.numpy(), near_logits.numpy()))
    return rows


def train_near_head(
    model,
    data: JudgeData,
    fs: list[np.ndarray],
    cfg: JudgeTrainConfig,
    progress: bool = True,
    compositional: tuple | None = None,
    more_first_stages: dict | None = None,
):
    """Stage 3 (everything else frozen): the near-miss answer, then the ranking key's near-miss penalty
    and first-stage rank weight chosen (`choose_ranking`) on the held-out train intents and, given
    `compositional` = (JudgeData, fusion first-stage lists) of the train split's compositional validation
    split, on both; reranking fusion's lists and those of `more_first_stages` ({name: {"in_distribution":
    lists, "compositional": lists}}, e.g. world-CIR's). Returns ((penalty, rank weight), info)."""
    import torch

    from cir_demo.training.data import split_intents

    if model.near is None:
        raise ValueError("world judge: this architecture has no near-miss head (near_head = 0)")
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng([cfg.seed, 3])
    tr_idx, val_idx = split_intents(list(range(len(data.examples))), cfg.val_fraction, cfg.seed)
    rows = np.array([(i, j) for i in tr_idx for j in range(len(data.examples[i].texts))], dtype=np.int64)
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(model.near.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=cfg.near_lr, weight_decay=0.01)
    total, it = step_plan(1, cfg.near_steps, None, "train world judge: near-miss answer", progress)
    n_images = len(data.feats)
    t0 = time.time()
    model.eval()
    for step in it:
        batch = rows[rng.choice(len(rows), min(cfg.queries_per_batch, len(rows)), replace=False)]
        sampled = [sample_candidates(data.examples[i], fs[i][j], n_images, cfg, rng) for i, j in batch]
        cands = np.stack([c for c, _, _ in sampled])
        labels = torch.from_numpy(np.stack([lb for _, lb, _ in sampled]))
        near = torch.from_numpy(np.stack([nm for _, _, nm in sampled])).float()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, cfg.near_lr)
        _, near_logits = pair_outputs(model, data, [tuple(b) for b in batch], cands)
        weights = torch.where(labels > 0, torch.full_like(labels, cfg.near_positive_weight), torch.ones_like(labels))
        loss = (
            torch.nn.functional.binary_cross_entropy_with_logits(near_logits, near, reduction="none") * weights
        ).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if progress and step % 20 == 0:
            it.set_postfix(loss=f"{float(loss.detach()):.3f}")
    for p in params:
        p.requires_grad_(False)
    splits = {"in_distribution": (data, list(val_idx), fs)}
    if compositional is not None:
        cdata, cfs = compositional
        splits["compositional"] = (cdata, list(range(len(cdata.examples))), cfs)
    cases = {}
    for split, (d, idx, f) in splits.items():
        cases[f"{split}/fusion"] = (d, idx, f)
        for name, lists in (more_first_stages or {}).items():
            if split in lists:
                cases[f"{split}/{name}"] = (d, idx, lists[split])
    info = {"steps": total, "train_seconds": round(time.time() - t0, 1)}
    info.update(_choose_ranking(model, cases, cfg))
    info["n_val_intents"] = {name: len(idx) for name, (_, idx, _) in splits.items()}
    return (float(info["penalty"]), float(info["rank_weight"])), info


def _choose_ranking(model, cases: dict, cfg: JudgeTrainConfig) -> dict:
    """Every (penalty, rank weight) of the grid on every case (a validation split's intents reranking one
    first stage's top 20): the chosen one, the rule, every row and the first stages' own measures."""
    rows_of = {case: _near_rows(model, d, idx, f) for case, (d, idx, f) in cases.items()}
    first_stage = {}
    for case, rows in rows_of.items():
        fm, fn = first_stage_quality([c for _, c, _, _ in rows], [ex for ex, _, _, _ in rows])
        first_stage[case] = {"val_mAP@10": round(fm, 4), "val_near_miss_recall@10": round(fn, 4)}
    by_setting = []
    for penalty in cfg.near_penalties:
        for rank_weight in cfg.rank_weights:
            row = {"penalty": penalty, "rank_weight": rank_weight}
            for case, rows in rows_of.items():
                val_map, val_neg = rerank_quality(rows, penalty, rank_weight)
                row[case] = {"val_mAP@10": round(val_map, 4), "val_near_miss_recall@10": round(val_neg, 4)}
            by_setting.append(row)
    best = choose_ranking(by_setting, first_stage)
    return {
        "penalty": best["penalty"],
        "rank_weight": best["rank_weight"],
        "chosen_by": PENALTY_RULE,
        "by_setting": by_setting,
        "val_first_stage": first_stage,
    }


def rerank_val(model, data: JudgeData, val_idx, fs, top_n: int = 20):
    """On held-out train intents: (mAP@10 of the reranked fusion top n, near-miss recall@10, and all
    (margin, label) pairs of the candidates for calibration)."""
    import torch

    val_rows, margins_all, labels_all = [], [], []
    with torch.inference_mode():
        for i in val_idx:
            ex = data.examples[i]
            cands = fs[i][:, :top_n]
            mg = pair_margins(model, data, [(i, j) for j in range(len(cands))], cands).numpy()
            val_rows.append((ex, cands, mg, None))
            pos = set(ex.positive_rows.tolist())
            margins_all.append(mg.reshape(-1))
            labels_all.append(np.array([r in pos for r in cands.reshape(-1)], dtype=float))
    val_map, val_neg = rerank_quality(val_rows, 0.0)
    return val_map, val_neg, np.concatenate(margins_all), np.concatenate(labels_all)


def calibrate(margins: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(temperature, bias) minimising the log loss of sigmoid(margin / T + b) (Platt scaling)."""
    import torch

    m = torch.from_numpy(np.asarray(margins, np.float64))
    y = torch.from_numpy(np.asarray(labels, np.float64))
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([log_t, b], lr=0.5, max_iter=200)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(m / log_t.exp() + b, y)
        loss.backward()
        return loss

    opt.step(closure)
    return float(log_t.detach().exp()), float(b.detach())


def fold_calibration(model, temperature: float, bias: float) -> None:
    """Rewrite the head so that logit_yes - logit_no is the calibrated margin."""
    import torch

    with torch.no_grad():
        w, b = model.head.weight.clone(), model.head.bias.clone()
        model.head.weight[0] = (w[0] - w[1]) / temperature
        model.head.weight[1] = 0.0
        model.head.bias[0] = (b[0] - b[1]) / temperature + bias
        model.head.bias[1] = 0.0
        if model.attr_heads is not None:  # the attribute-match term is added to logit_yes too
            model.attr_weight /= temperature


def train_judge(
    model,
    data: JudgeData,
    fs: list[np.ndarray],
    cfg: JudgeTrainConfig,
    progress: bool = True,
    compositional: tuple | None = None,
):
    """Stage 2 (the CNN is frozen: `data.feats` are its outputs). The epoch is chosen by val mAP@10 -
    val_neg_penalty * near-miss recall@10, summed over the held-out train intents and, given
    `compositional` = (JudgeData, first-stage lists), the train split's compositional validation split.
    Returns (model, info)."""
    import torch

    from cir_demo.training.data import split_intents

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    idx = list(range(len(data.examples)))
    tr_idx, val_idx = split_intents(idx, cfg.val_fraction, cfg.seed)
    rows = np.array([(i, j) for i in tr_idx for j in range(len(data.examples[i].texts))], dtype=np.int64)
    params = [p for n, p in model.named_parameters() if not n.startswith(("image.", "attr_heads."))]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = max(1, math.ceil(len(rows) / cfg.queries_per_batch))
    total, it = step_plan(steps_per_epoch, cfg.epochs, cfg.max_steps, "train world judge", progress)
    n_images = len(data.feats)
    softplus = torch.nn.functional.softplus
    best, history = (-float("inf"), None, 0), []
    t0, pos, order = time.time(), 0, rng.permutation(len(rows))
    for step in it:
        if pos >= len(order):
            order, pos = rng.permutation(len(rows)), 0
        batch = rows[order[pos : pos + cfg.queries_per_batch]]
        pos += cfg.queries_per_batch
        sampled = [sample_candidates(data.examples[i], fs[i][j], n_images, cfg, rng) for i, j in batch]
        cands = np.stack([c for c, _, _ in sampled])
        labels = torch.from_numpy(np.stack([lb for _, lb, _ in sampled]))
        near = torch.from_numpy(np.stack([nm for _, _, nm in sampled]))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, cfg.lr, warmup=min(100, total // 10))
        model.train()
        margins = pair_margins(model, data, [tuple(b) for b in batch], cands)
        weights = torch.where(near, torch.full_like(labels, cfg.near_miss_weight), torch.ones_like(labels))
        loss = (
            torch.nn.functional.binary_cross_entropy_with_logits(margins, labels, reduction="none") * weights
        ).sum() / weights.sum()
        diff = margins[:, None, :] - margins[:, :, None]  # [q, a, b] = margin_b - margin_a
        if cfg.pairwise_weight > 0:
            pair = (labels[:, :, None] > 0) & near[:, None, :]
            if bool(pair.any()):
                loss = loss + cfg.pairwise_weight * softplus(diff[pair]).mean()
        if cfg.near_miss_last_weight > 0 and step >= total - cfg.near_miss_last_epochs * steps_per_epoch:
            other = (labels == 0) & ~near
            pair = other[:, :, None] & near[:, None, :]
            if bool(pair.any()):
                loss = loss + cfg.near_miss_last_weight * softplus(diff[pair]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if progress and step % 20 == 0:
            it.set_postfix(loss=f"{float(loss.detach()):.3f}")
        if (step + 1) % steps_per_epoch == 0 or step == total - 1:
            model.eval()
            val_map, val_neg, _, _ = rerank_val(model, data, val_idx, fs)
            entry = {"val_mAP@10": round(val_map, 4), "val_near_miss_recall@10": round(val_neg, 4)}
            score = val_map - cfg.val_neg_penalty * val_neg
            if compositional is not None:
                cdata, cfs = compositional
                c_map, c_neg, _, _ = rerank_val(model, cdata, range(len(cdata.examples)), cfs)
                entry["compositional"] = {"val_mAP@10": round(c_map, 4), "val_near_miss_recall@10": round(c_neg, 4)}
                score += c_map - cfg.val_neg_penalty * c_neg
            history.append(entry)
            if progress:
                it.write(f"epoch {len(history)}: {entry}")
            if score > best[0]:
                best = (score, {k: v.detach().clone() for k, v in model.state_dict().items()}, len(history))
    model.load_state_dict(best[1])
    model.eval()
    _, _, val_margins, val_labels = rerank_val(model, data, val_idx, fs)
    temperature, bias = calibrate(val_margins, val_labels)
    fold_calibration(model, temperature, bias)
    info = {
        "steps": total,
        "train_seconds": round(time.time() - t0, 1),
        "by_epoch": history,
        "best_epoch": best[2],
        "calibration": {
            "temperature": round(temperature, 4),
            "bias": round(bias, 4),
            "fitted_on": "held-out train intents (fusion top 20 of each paraphrase)",
        },
        "n_train_intents": len(tr_idx),
        "n_val_intents": len(val_idx),
        "config": asdict(cfg),
    }
    return model, info

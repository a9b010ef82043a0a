"""The world verifier: a small cross-encoder of (references, instruction, candidate) -> (logit_yes, logit_no).

Inputs are frozen world-CLIP embeddings: reference 1, reference 2 (= reference 1 for one-image
queries), the instruction's text embedding and the candidate, plus interaction tokens
(candidate * text, candidate * reference, candidate - reference, text - reference), plus two
instruction tokens from its own instruction reader: a 2-layer transformer over the instruction's
world-CLIP token ids (word embedding initialised from world-CLIP's), run once per query. Why: the
pooled world-CLIP text embedding, trained on captions, cannot tell "not red" from "red" nor
"blue instead of red" from "red instead of blue" (docs/world_models.md measures it). A 2-layer
transformer reads the 10 tokens and a [CLS] token jointly (full attention, so every input sees
every other: a cross-encoder, not two towers) and ends in two logits; P(relevant) = sigmoid(yes - no).

Training (train split only): for each train intent paraphrase, candidates are what a first
stage would show it, the world-CLIP fusion top 30 on the train gallery, plus the intent's near
misses (break exactly one constraint: hard negatives; optionally half of them breaking the focus
constraint, the one the instruction is about, as the benchmark's explicit negatives do first) and
positives; label = candidate satisfies the intent. Loss: binary cross-entropy on the logit margin
(near misses weighted more) plus a per-query listwise softmax (the reranker's job is ordering)
plus a pairwise logistic loss asking each positive to outscore each near miss of its query (near
misses are what NegRecall counts); optionally another asking the other non-relevant candidates to
outscore the near misses (`near_miss_last_weight`). A held-out 10% of train intents picks the
epoch (val mAP@10 minus val near-miss recall@10).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from cir_demo.training.loop import lr_at, step_plan

WEIGHTS_NAME = "world_verifier.safetensors"
N_TOKENS = 8
N_INSTRUCTION_TOKENS = 2  # the instruction reader's [CLS] output and its mean over words
_DESCRIPTION_INPUTS = ("world verifier: no text prompt; inputs are frozen world-CLIP embeddings of the reference "
                       "image(s), the instruction (<img1>/<img2> rendered as words) and the candidate image, plus "
                       "their products/difference")
_DESCRIPTION_READER = ", and the instruction's world-CLIP token ids read by its own small text transformer"
_DESCRIPTION_HEAD = ", all read by a small transformer cross-encoder ending in (logit_yes, logit_no)"
DESCRIPTION = _DESCRIPTION_INPUTS + _DESCRIPTION_READER + _DESCRIPTION_HEAD
DESCRIPTION_POOLED_ONLY = _DESCRIPTION_INPUTS + _DESCRIPTION_HEAD  # a verifier without the instruction reader


@dataclass
class VerifierConfig:
    width: int = 128
    layers: int = 2
    heads: int = 4
    queries_per_batch: int = 64
    candidates_per_query: int = 12
    first_stage_k: int = 30
    epochs: int = 4
    lr: float = 1e-3
    weight_decay: float = 0.01
    listwise_weight: float = 1.0
    # Near misses (break exactly one constraint) are what NegRecall counts: weight their BCE more and
    # ask every positive to outscore every near miss of its query (pairwise logistic loss).
    near_miss_weight: float = 2.0  # BCE weight of a near-miss candidate (1 = like any other negative)
    pairwise_weight: float = 1.0
    # PinPoint's premise: a result that breaks the instruction ("still red") is worse than an off-topic
    # one. Pairwise logistic loss asking every other non-relevant candidate of a query to outscore its
    # near misses; without it the verifier grades near misses as almost relevant and fills the top 10
    # with them (docs/world_models.md: the oracle analysis). 0 = off.
    near_miss_last_weight: float = 0.0
    # also sample near misses that break the focus constraint (the benchmark's first explicit negatives)
    # and count them in the validation near-miss recall
    focus_near_misses: bool = False
    # epoch selection on the held-out train intents: val mAP@10_noNeg - this * val near-miss recall@10
    val_neg_penalty: float = 1.0
    # Read the instruction's words with its own small transformer (init from world-CLIP's token
    # embedding): the pooled world-CLIP text embedding cannot tell "not red" from "red".
    instruction_tokens: bool = True
    text_layers: int = 2
    val_fraction: float = 0.1
    seed: int = 0
    max_steps: int | None = None


def build_verifier(dim: int, width: int, layers: int, heads: int, vocab_size: int = 0, context_length: int = 0,
                   text_layers: int = 1):
    import torch
    from torch import nn

    class WorldVerifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.dim, self.width, self.n_layers, self.n_heads = dim, width, layers, heads
            self.vocab_size, self.context_length, self.n_text_layers = vocab_size, context_length, text_layers
            self.proj = nn.Linear(dim, width)
            n_tokens = N_TOKENS + 1 + (N_INSTRUCTION_TOKENS if vocab_size else 0)
            self.type_emb = nn.Parameter(torch.randn(n_tokens, width) * 0.02)
            layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1, batch_first=True,
                                               norm_first=True, activation="gelu")
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, 2)  # (logit_yes, logit_no)
            if vocab_size:  # its own reader of the instruction's words (see the module docstring)
                self.word_emb = nn.Embedding(vocab_size, width, padding_idx=0)
                self.word_pos = nn.Parameter(torch.randn(context_length + 1, width) * 0.02)
                text_layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1, batch_first=True,
                                                        norm_first=True, activation="gelu")
                self.text_encoder = nn.TransformerEncoder(text_layer, text_layers, enable_nested_tensor=False)
                self.text_norm = nn.LayerNorm(width)

        def encode_instruction(self, tokens):
            """(q, L) world-CLIP token ids (0 = padding, at the end) -> (q, 2, width): the [CLS]
            output and the mean over words. Once per query, not per candidate."""
            n_words = max(1, int((tokens != 0).sum(1).max())) if len(tokens) else 1
            tokens = tokens[:, :n_words]  # drop the shared padding: masked anyway, only cheaper
            q = tokens.shape[0]
            x = torch.cat([torch.zeros(q, 1, self.width), self.word_emb(tokens)], dim=1) + self.word_pos[:n_words + 1]
            pad = torch.cat([torch.zeros(q, 1, dtype=torch.bool), tokens == 0], dim=1)
            h = self.text_norm(self.text_encoder(x, src_key_padding_mask=pad))
            words = (~pad).to(h.dtype)[..., None]
            words[:, 0] = 0
            mean = (h * words).sum(1) / words.sum(1).clamp(min=1.0)
            return torch.stack([h[:, 0], mean], dim=1)

        def forward(self, ref1, ref2, text, cand, instruction=None):
            """All (n, dim) unit rows (+ (n, 2, width) `encode_instruction` rows) -> (n, 2) logits."""
            ref = nn.functional.normalize(ref1 + ref2, dim=-1)
            feats = torch.stack([ref1, ref2, text, cand, cand * text * 8, cand * ref * 8, cand - ref,
                                 text - ref], dim=1)  # products rescaled: unit-vector products are tiny
            x = self.proj(feats)
            cls = torch.zeros(x.shape[0], 1, self.width, dtype=x.dtype)
            parts = [cls, x]
            if self.vocab_size:
                if instruction is None:
                    raise ValueError("world verifier: this model reads the instruction's tokens; pass `instruction`")
                parts.append(instruction)
            x = torch.cat(parts, dim=1) + self.type_emb
            return self.head(self.norm(self.encoder(x)[:, 0]))

    return WorldVerifier()


def verifier_from_state(state: dict, layers: int, heads: int, text_layers: int = 1):
    width, dim = state["proj.weight"].shape
    vocab_size, context_length = 0, 0
    if "word_emb.weight" in state:
        vocab_size = state["word_emb.weight"].shape[0]
        context_length = state["word_pos"].shape[0] - 1
    model = build_verifier(dim, width, layers, heads, vocab_size, context_length, text_layers)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval()


# --------------------------------------------------------------------------- training data
def first_stage_candidates(examples, img_emb: np.ndarray, text_embs: list[np.ndarray], k: int,
                           text_weight: float = 0.8) -> list[np.ndarray]:
    """Per intent, (n_paraphrases, k) world-CLIP fusion top-k train rows (references excluded)."""
    from cir_demo.retrievers import recipes

    out = []
    for ex, t in zip(examples, text_embs):
        ref = recipes.mean_of_references([img_emb[r] for r in ex.ref_rows])
        q = recipes.early_fusion(np.repeat(ref[None], len(t), 0), t, text_weight)
        s = q @ img_emb.T
        s[:, list(ex.ref_rows)] = -np.inf
        idx = np.argpartition(-s, k, axis=1)[:, :k]
        out.append(idx)
    return out


def _focus_near(ex, use_focus: bool = True) -> np.ndarray:
    f = ex.focus_near_miss_rows if use_focus else None
    return np.zeros(0, dtype=np.int64) if f is None else f


def near_miss_set(ex, use_focus: bool = True) -> np.ndarray:
    """The (sampled) near misses of an intent: any single broken constraint, plus (`use_focus`) the
    sampled ones breaking its focus constraint."""
    return np.union1d(ex.near_miss_rows, _focus_near(ex, use_focus))


def sample_candidates(ex, fs_row: np.ndarray, n: int, rng, use_focus: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """n candidates for one query: half first-stage, a quarter near misses (with `use_focus`, half of
    them breaking the focus constraint when the intent has such near misses), a quarter positives."""
    n_pos = max(1, n // 4)
    focus = _focus_near(ex, use_focus)
    n_near = max(1, n // 4) if len(ex.near_miss_rows) or len(focus) else 0
    n_focus = min(n_near, (n_near + 1) // 2 if len(ex.near_miss_rows) else n_near) if len(focus) else 0
    n_any = n_near - n_focus
    n_fs = n - n_pos - n_near
    parts = [rng.choice(fs_row, n_fs, replace=len(fs_row) < n_fs),
             rng.choice(ex.positive_rows, n_pos, replace=len(ex.positive_rows) < n_pos)]
    if n_focus:
        parts.append(rng.choice(focus, n_focus, replace=len(focus) < n_focus))
    if n_any:
        parts.append(rng.choice(ex.near_miss_rows, n_any, replace=len(ex.near_miss_rows) < n_any))
    cand = np.concatenate(parts)
    labels = np.isin(cand, ex.positive_rows).astype(np.float32)
    return cand, labels


def _forward_queries(model, exs, par, cands, img, text_embs_t, torch, tokens_t=None):
    m = cands.shape[1]
    r1 = img[[ex.ref_rows[0] for ex in exs]]
    r2 = img[[ex.ref_rows[-1] for ex in exs]]
    t = torch.stack([text_embs_t[i][j] for i, j in par])
    rep = lambda x: x.repeat_interleave(m, dim=0)  # noqa: E731
    instruction = None
    if tokens_t is not None:
        instruction = rep(model.encode_instruction(torch.stack([tokens_t[i][j] for i, j in par])))
    logits = model(rep(r1), rep(r2), rep(t), img[torch.from_numpy(cands.reshape(-1))], instruction)
    return (logits[:, 0] - logits[:, 1]).view(len(exs), m)


def val_rerank_map10(model, examples, fs, img, text_embs_t, torch, with_negatives: bool = False,
                     use_focus: bool = True, tokens_t=None):
    """mAP@10 (no negatives) of the fusion top-k reranked, on held-out *train* intents; with
    `with_negatives`, (mAP@10, near-miss recall@10) where near-miss recall is the share of the
    (sampled) near misses among the top 10, over min(#near misses, 10), as NegRecall@10 counts."""
    aps, negs = [], []
    with torch.inference_mode():
        for i, ex in enumerate(examples):
            cands = fs[i]
            par = [(i, j) for j in range(len(cands))]
            margins = _forward_queries(model, [ex] * len(cands), par, cands, img, text_embs_t, torch, tokens_t).numpy()
            pos = set(ex.positive_rows.tolist())
            near = set(near_miss_set(ex, use_focus).tolist())
            for row, mg in zip(cands, margins):
                top = row[np.argsort(-mg, kind="stable")][:10]
                hits = np.array([r in pos for r in top], dtype=float)
                prec = np.cumsum(hits) / np.arange(1, 11)
                aps.append(float((prec * hits).sum() / min(len(pos), 10)))
                if near:
                    negs.append(sum(r in near for r in top) / min(len(near), 10))
    m = float(np.mean(aps)) if aps else float("nan")
    if with_negatives:
        return m, (float(np.mean(negs)) if negs else 0.0)
    return m


def train_world_verifier(examples, img_emb: np.ndarray, text_emb_fn, cfg: VerifierConfig, progress: bool = True,
                         tokenize=None, word_init: np.ndarray | None = None):
    """Train the verifier on frozen world-CLIP train embeddings. Returns (model, info).

    With `cfg.instruction_tokens`, `tokenize(texts) -> (n, L) int64` gives the world-CLIP token ids
    of the instructions (markers rendered as `text_emb_fn` renders them) and `word_init` (vocab,
    width), e.g. world-CLIP's token embedding, initialises the verifier's word embedding."""
    import torch

    from cir_demo.training.data import split_intents

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    tr_ex, val_ex = split_intents(examples, cfg.val_fraction, cfg.seed)
    tr_text = [text_emb_fn(ex.texts) for ex in tr_ex]
    val_text = [text_emb_fn(ex.texts) for ex in val_ex]
    # sort each first-stage row by score so validation reranks a real ranking
    tr_fs = first_stage_candidates(tr_ex, img_emb, tr_text, cfg.first_stage_k)
    val_fs = first_stage_candidates(val_ex, img_emb, val_text, min(20, cfg.first_stage_k))
    img = torch.from_numpy(np.asarray(img_emb, np.float32))
    tr_text_t = [torch.from_numpy(t) for t in tr_text]
    val_text_t = [torch.from_numpy(t) for t in val_text]
    rows = np.array([(i, j) for i, ex in enumerate(tr_ex) for j in range(len(ex.texts))], dtype=np.int64)
    tr_tok = val_tok = None
    vocab_size = context_length = 0
    if cfg.instruction_tokens:
        if tokenize is None:
            raise ValueError("world verifier: cfg.instruction_tokens needs `tokenize` (the world-CLIP tokenizer)")
        tr_tok = [torch.from_numpy(np.asarray(tokenize(ex.texts), np.int64)) for ex in tr_ex]
        val_tok = [torch.from_numpy(np.asarray(tokenize(ex.texts), np.int64)) for ex in val_ex]
        context_length = int(tr_tok[0].shape[1])
        vocab_size = int(word_init.shape[0]) if word_init is not None else int(max(int(t.max()) for t in tr_tok)) + 1
    model = build_verifier(img.shape[1], cfg.width, cfg.layers, cfg.heads, vocab_size, context_length,
                           cfg.text_layers)
    if vocab_size and word_init is not None:
        if tuple(word_init.shape) != tuple(model.word_emb.weight.shape):
            raise ValueError(f"world verifier: word_init of shape {tuple(word_init.shape)} for a word embedding of "
                             f"shape {tuple(model.word_emb.weight.shape)}")
        with torch.no_grad():
            model.word_emb.weight.copy_(torch.from_numpy(np.asarray(word_init, np.float32)))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = max(1, math.ceil(len(rows) / cfg.queries_per_batch))
    total, it = step_plan(steps_per_epoch, cfg.epochs, cfg.max_steps, "train world verifier", progress)
    best, history, neg_history = (-float("inf"), None, 0), [], []
    t0 = time.time()
    order, pos = rng.permutation(len(rows)), 0
    bce = torch.nn.BCEWithLogitsLoss(reduction="none")
    for step in it:
        if pos >= len(order):
            order, pos = rng.permutation(len(rows)), 0
        batch = rows[order[pos:pos + cfg.queries_per_batch]]
        pos += cfg.queries_per_batch
        exs = [tr_ex[i] for i in batch[:, 0]]
        sampled = [sample_candidates(ex, tr_fs[i][j], cfg.candidates_per_query, rng, cfg.focus_near_misses)
                   for ex, (i, j) in zip(exs, batch)]
        cands = np.stack([c for c, _ in sampled])
        labels = torch.from_numpy(np.stack([lb for _, lb in sampled]))
        is_near = torch.from_numpy(np.stack([np.isin(c, near_miss_set(ex, cfg.focus_near_misses)) & (lb == 0)
                                             for ex, (c, lb) in zip(exs, sampled)]))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, cfg.lr)
        model.train()
        margins = _forward_queries(model, exs, [tuple(b) for b in batch], cands, img, tr_text_t, torch, tr_tok)
        target = labels / labels.sum(1, keepdim=True).clamp(min=1.0)
        listwise = -(target * torch.log_softmax(margins, dim=1)).sum(1).mean()
        weights = torch.where(is_near, torch.full_like(labels, cfg.near_miss_weight), torch.ones_like(labels))
        loss = (bce(margins, labels) * weights).sum() / weights.sum() + cfg.listwise_weight * listwise
        if cfg.pairwise_weight > 0:  # every positive above every near miss of the same query
            pair = (labels[:, :, None] > 0) & is_near[:, None, :]
            if bool(pair.any()):
                diff = margins[:, None, :] - margins[:, :, None]  # near - positive
                loss = loss + cfg.pairwise_weight * torch.nn.functional.softplus(diff[pair]).mean()
        if cfg.near_miss_last_weight > 0:  # every other non-relevant candidate above every near miss
            other = (labels == 0) & ~is_near
            pair = other[:, :, None] & is_near[:, None, :]
            if bool(pair.any()):
                diff = margins[:, None, :] - margins[:, :, None]  # near - other
                loss = loss + cfg.near_miss_last_weight * torch.nn.functional.softplus(diff[pair]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % steps_per_epoch == 0 or step == total - 1:
            model.eval()
            val_map, val_neg = val_rerank_map10(model, val_ex, val_fs, img, val_text_t, torch, with_negatives=True,
                                              use_focus=cfg.focus_near_misses, tokens_t=val_tok)
            score = val_map - cfg.val_neg_penalty * val_neg
            history.append(round(val_map, 4))
            neg_history.append(round(val_neg, 4))
            if progress:
                it.set_postfix(loss=f"{float(loss):.3f}", val_mAP10=f"{val_map:.3f}", val_neg10=f"{val_neg:.3f}")
            if not score <= best[0]:
                best = (score, {k: v.detach().clone() for k, v in model.state_dict().items()}, len(history))
    model.load_state_dict(best[1])
    model.eval()
    info = {"steps": total, "train_seconds": round(time.time() - t0, 1), "val_rerank_mAP@10_noNeg_by_epoch": history,
            "val_near_miss_recall@10_by_epoch": neg_history,
            "best_epoch": best[2], "n_train_intents": len(tr_ex), "n_val_intents": len(val_ex), "config": asdict(cfg)}
    return model, info

"""Held-out evaluation of the world judge on the world's *test* split (never used to train or choose).

- pair accuracy: P(yes) > 0.5 is right, for positives, explicit negatives (near misses: break exactly
  one constraint), and random corpus images, separately, overall and by edit subcategory;
- calibration: a reliability table of P(yes) over the candidates reranking sees (the world-CLIP fusion
  and world-CIR top 20 of every query), with the expected calibration error;
- near-miss answer (a judge with one): P(near) > 0.5 on the same pairs;
- reranking: mAP@10 / NegRecall@10 of the fusion and world-CIR top 20 and top 50, before and after
  (ordered as the app and `--eval` order: P(yes) - penalty * P(near)).
"""

from __future__ import annotations

import numpy as np

N_PAIRS_PER_KIND = 10  # per query: up to this many positives, explicit negatives and random images
BINS = 10


def judge_scorer(model, tokenize, arch, corpus_feats: np.ndarray, ref_feats: np.ndarray, test):
    """score(idx (q, m) corpus rows for every test query) -> (margins (q, m), near-miss logits (q, m)
    or None without a near-miss answer)."""
    import torch

    queries = test.bench.queries
    words = torch.from_numpy(tokenize([q.instruction for q in queries], arch.context_length))
    r1 = torch.from_numpy(ref_feats[[test.ref_row[q.reference_ids[0]] for q in queries]])
    r2 = torch.from_numpy(ref_feats[[test.ref_row[q.reference_ids[-1]] for q in queries]])
    two = torch.tensor([len(q.reference_ids) > 1 for q in queries])
    memory = model.candidate_memory(torch.from_numpy(corpus_feats))
    probes = torch.cat(
        [
            model.encode_query(r1[s : s + 512], r2[s : s + 512], two[s : s + 512], words[s : s + 512])
            for s in range(0, len(queries), 512)
        ]
    )
    ref_props = model.attribute_probs(r1) if model.near is not None else None

    def score(idx: np.ndarray, rows: np.ndarray | None = None):
        rows = np.arange(len(idx)) if rows is None else rows
        out = np.zeros(idx.shape, np.float32)
        near = np.zeros(idx.shape, np.float32) if ref_props is not None else None
        for s in range(0, len(idx), 256):
            c = idx[s : s + 256]
            q = torch.from_numpy(np.repeat(rows[s : s + 256], c.shape[1]))
            lg = model.logits(
                probes[q], memory, torch.from_numpy(c.reshape(-1)), ref_props[q] if ref_props is not None else None
            )
            out[s : s + 256] = (lg[:, 0] - lg[:, 1]).view(c.shape).numpy()
            if near is not None:
                near[s : s + 256] = lg[:, 2].view(c.shape).numpy()
        return out, near

    return score


def reliability(p: np.ndarray, y: np.ndarray, bins: int = BINS) -> dict:
    """Reliability table of predicted P(yes) against observed relevance, and the expected calibration error."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(p, edges[1:-1]), 0, bins - 1)
    table, ece = [], 0.0
    for b in range(bins):
        m = which == b
        if not m.any():
            continue
        conf, acc = float(p[m].mean()), float(y[m].mean())
        ece += m.mean() * abs(conf - acc)
        table.append(
            {
                "bin": f"{edges[b]:.1f}-{edges[b + 1]:.1f}",
                "n": int(m.sum()),
                "mean_p_yes": round(conf, 4),
                "observed_relevant": round(acc, 4),
            }
        )
    return {"bins": table, "ece": round(float(ece), 4), "n_pairs": int(len(p))}


def pair_accuracy(score, test, seed: int = 0) -> dict:
    """Accuracy of P(yes) > 0.5 on positives / explicit negatives / random images, overall and by subcategory."""
    rng = np.random.default_rng(seed)
    row_of = {c: i for i, c in enumerate(test.bench.corpus_ids)}
    queries = test.bench.queries
    kinds = {"positive": [], "near_miss": [], "random": []}
    for qi, q in enumerate(queries):
        pos = [row_of[c] for c in q.positives if c in row_of]
        neg = [row_of[c] for c in q.negatives if c in row_of]
        refs_and_pos = set(pos) | {row_of.get(r) for r in q.reference_ids}
        rand = [
            r
            for r in rng.choice(len(row_of), 2 * N_PAIRS_PER_KIND, replace=False)
            if r not in refs_and_pos and r not in neg
        ][:N_PAIRS_PER_KIND]
        for kind, rows in (("positive", pos), ("near_miss", neg), ("random", rand)):
            for r in rows[:N_PAIRS_PER_KIND]:
                kinds[kind].append((qi, r))
    out, per_sub = {}, {}
    subs = [str(q.meta.get("edit_subcategory")) for q in queries]
    for kind, pairs in kinds.items():
        arr = np.array(pairs, dtype=np.int64)
        margins, near = score(arr[:, 1:2], rows=arr[:, 0])
        right = (margins[:, 0] > 0) if kind == "positive" else (margins[:, 0] <= 0)
        out[kind] = {"accuracy": round(float(right.mean()), 4), "n_pairs": int(len(arr))}
        if near is not None:  # how often the near-miss answer says "near miss" (P(near) > 0.5)
            out[kind]["said_near_miss"] = round(float((near[:, 0] > 0).mean()), 4)
        for s, r in zip((subs[i] for i in arr[:, 0]), right):
            per_sub.setdefault(s, {}).setdefault(kind, []).append(bool(r))
    out["by_subcategory"] = {
        s: {k: round(float(np.mean(v)), 4) for k, v in sorted(d.items())} for s, d in sorted(per_sub.items())
    }
    return out


def held_out_judge(
    model,
    tokenize,
    arch,
    size: str,
    seed: int,
    clip_dir,
    clip_manifest,
    progress: bool,
    near_penalty: float = 0.0,
    rank_weight: float = 0.0,
    split: str = "test",
    pairs: bool = True,
) -> dict:
    """The judge on world `seed`'s test split `split` ("test" or "compositional"); `pairs=False` leaves out
    the pair accuracies (reranking and calibration only)."""
    from safetensors.torch import load_file

    from cir_demo.paths import REPO_ROOT
    from cir_demo.retrievers import recipes
    from cir_demo.training import evaluate as ev
    from cir_demo.training.world_clip import load_world_clip
    from cir_demo.models.world_cir import combine_numpy, combiner_from_state
    from cir_demo.training.world_cir import reference_pairs
    from cir_demo.training.judge_ranking import rank_keys
    from cir_demo.training.world_judge import patch_features

    test = ev.load_test_data(size, seed, progress, split=split)
    corpus_feats = patch_features(model.image, test.corpus_pixels)
    ref_feats = patch_features(model.image, test.ref_pixels)
    score = judge_scorer(model, tokenize, arch, corpus_feats, ref_feats, test)
    clip_model, clip_tok, _ = load_world_clip(clip_dir, clip_manifest["model_name"])
    emb = ev.clip_embeddings(
        clip_model, clip_tok, test, progress, cache_key=clip_manifest["files"]["world_clip.safetensors"][:16]
    )
    queries = test.bench.queries
    first_stage = {
        "world-clip-fusion": recipes.combine(
            "early_fusion", {"text_weight": 0.8}, ev.merged_references(emb["refs"], test.ref_row, queries), emb["texts"]
        )
    }
    cir_weights = REPO_ROOT / "assets" / "world-cir" / "world_cir.safetensors"
    if cir_weights.is_file():
        a, b = reference_pairs(emb["refs"], test.ref_row, queries)
        first_stage["world-cir"] = combine_numpy(combiner_from_state(load_file(str(cir_weights))), a, b, emb["texts"])
    rerank, cal_p, cal_y = {}, [], []
    for name, qv in first_stage.items():
        idx50, _ = ev.top_k(qv, emb["corpus"], 50)
        margins50, near50 = score(idx50)
        keys50 = rank_keys(margins50, near50, near_penalty, rank_weight)
        for n in (20, 50):
            idx = idx50[:, :n]
            before = ev.run_metrics(ev.run_from_topk(queries, test.bench.corpus_ids, idx), queries)
            after = ev.run_metrics(
                ev.run_from_topk(queries, test.bench.corpus_ids, ev.rerank_top_block(idx, keys50[:, :n])), queries
            )
            rerank[f"{name} top {n}"] = {"before": before, "after": after}
        pos = [set(q.positives) for q in queries]
        cal_p.append(1.0 / (1.0 + np.exp(-margins50[:, :20].reshape(-1))))
        cal_y.append(
            np.array(
                [test.bench.corpus_ids[c] in pos[i] for i, row in enumerate(idx50[:, :20]) for c in row], dtype=float
            )
        )
    out = {"pairs": pair_accuracy(score, test, seed)} if pairs else {}
    return {**out, "calibration_top20": reliability(np.concatenate(cal_p), np.concatenate(cal_y)), "rerank": rerank}

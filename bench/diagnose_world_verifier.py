"""How far the world verifier (the world judge) is from perfect judges, per retriever (docs/world_models.md).

    python app.py --eval                                        # writes runs/<stamp>-world/
    python bench/diagnose_world_verifier.py runs/<stamp>-world [--retrievers world-cir world-clip-fusion ...]

Reads the run's results files for each RETRIEVER and RETRIEVER+rerank (default world, seed 0) and prints:
1. what each first stage's top 20 holds (positives, explicit negatives per query);
2. mAP@10 and NegRecall@10 of the first stage, of the run's reranking, of the same judge ranking by
   P(yes) alone (penalty 0: what the near-miss answer costs and buys; read from the run's score cache,
   so nothing is scored again) and of oracle rerankings of the same top 20: a perfect yes/no judge (positives first, the rest in first-stage order), a perfect
   *graded* judge (positives, then the explicit negatives, then the rest) and a perfect judge that puts
   near misses last (positives, the rest, then the explicit negatives);
3. the explicit negatives in each top 10, by the constraint they break (the instruction's focus
   or another one), with the focus negatives of the negation kinds;
4. (--probe) the old question of the pooled world-CLIP text embedding: is "coat not red" closer to the
   caption "red coat" than to every other colour's, and does "blue instead of red" point to blue?
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse
import collections
import json
from pathlib import Path

import numpy as np

WORLD_RETRIEVERS = ("world-cir", "world-clip-fusion", "world-clip-slerp", "world-clip-image", "world-clip-text")


def _neg_recall(top, negatives) -> float:
    return sum(x in negatives for x in top[:10]) / min(len(negatives), 10) if negatives else 0.0


def _results(run: Path, name: str) -> dict:
    path = run / "results" / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"{path}: not found (run `python app.py --eval` with the world verifier first)")
    return json.loads(path.read_text(encoding="utf-8"))


def yes_alone(bench, first: dict, top_n: int = 20) -> dict | None:
    """The run's top `top_n` reordered by the judge's P(yes) alone, from the scores `--eval` cached
    (cache/rerank/<benchmark fingerprint>.sqlite); None when a score is missing there."""
    from cir_demo.engine import benchmark_fingerprint
    from cir_demo.paths import cache_dir
    from cir_demo.rerank import ScoreCache, load_reranker
    from cir_demo.rerank.rerank import order_top_block

    spec_hash = load_reranker("world-verifier").spec_hash()
    out = {}
    # A plain --eval scores both test splits into the test split's cache (the file without a query set).
    name = benchmark_fingerprint(bench).removesuffix(f"-{(bench.info or {}).get('query_set')}")
    with ScoreCache(cache_dir() / "rerank" / f"{name}.sqlite") as cache:
        for q in bench.queries:
            ranked = first[q.query_id]["retrieved_items"]
            top = ranked[:top_n]
            found = cache.get_many(spec_hash, q.instruction, q.reference_ids, top)
            if len(found) < len(top):
                return None
            out[q.query_id] = [top[i] for i in order_top_block([found[c] for c in top], 0.0)] + ranked[top_n:]
    return out


def composition_and_oracles(bench, name: str, first: dict, reranked: dict) -> list[str]:
    """Markdown rows: (ranking, mAP@10, NegRecall@10) for the first stage, the run's reranking and oracles."""
    from cir_demo.metrics.pinpoint import evaluate

    runs = collections.defaultdict(dict)
    n_pos, n_neg = [], []
    for q in bench.queries:
        ranked = first[q.query_id]["retrieved_items"]
        top, rest = ranked[:20], ranked[20:]
        pos, negs = set(q.judgments.positives), set(q.judgments.negatives)
        p = [x for x in top if x in pos]
        n = [x for x in top if x in negs]
        o = [x for x in top if x not in pos and x not in negs]
        n_pos.append(len(p))
        n_neg.append(len(n))
        runs["first stage"][q.query_id] = ranked
        runs["reranked by the world verifier"][q.query_id] = reranked[q.query_id]["retrieved_items"]
        runs["oracle yes/no judge"][q.query_id] = p + [x for x in top if x not in pos] + rest
        runs["oracle graded judge (near misses next)"][q.query_id] = p + n + o + rest
        runs["oracle judge, near misses last"][q.query_id] = p + o + n + rest
    alone = yes_alone(bench, first)
    if alone is not None:
        runs["the same judge, P(yes) alone (penalty 0)"] = alone
    rows = [f"| {name} | top 20 holds {np.mean(n_pos):.2f} positives, {np.mean(n_neg):.2f} explicit negatives | | |"]
    for label, run in runs.items():
        agg, _ = evaluate(run, bench.queries)
        rows.append(f"| {name} | {label} | {agg['mAP@10']:.4f} | {agg['NegRecall@10']:.4f} |")
    return rows


def negatives_by_constraint(bench, runs: dict) -> None:
    from cir_demo.world import loader
    from cir_demo.world.scene import violations

    info = bench.info
    intents = {
        it["intent_id"]: it for it in loader.load_intents(size=info["size"], seed=info["seed"], split=info["split"])
    }
    print("explicit negatives in the top 10, by the constraint they break:")
    for label, results in runs.items():
        focus, other, neg_kinds = 0, collections.Counter(), collections.Counter()
        for q in bench.queries:
            it = intents[q.group_id]
            constraints = loader.intent_constraints(it)
            negs = set(q.judgments.negatives)
            for x in results[q.query_id]["retrieved_items"][:10]:
                if x not in negs:
                    continue
                attr = violations(loader.scene_of(x), constraints)[0].attr
                if attr == it["focus"]:
                    focus += 1
                    if it["kind"].startswith("neg_"):
                        neg_kinds[it["kind"]] += 1
                else:
                    other[attr] += 1
        print(
            f"  {label:32s} total {focus + sum(other.values()):5d}  focus {focus:5d}  "
            f"negation kinds {dict(sorted(neg_kinds.items()))}  other {sum(other.values())} {dict(other.most_common(5))}"
        )


def text_probe() -> None:
    from cir_demo.training.world_clip import encode_texts, load_world_clip
    from cir_demo.world import attributes as A
    from cir_demo.world import loader
    from cir_demo.world import phrases as P
    from cir_demo.world.intents import FORMS

    model, tokenizer, _ = load_world_clip(Path("assets/world-clip"))
    hits = collections.defaultdict(list)
    for it in loader.load_intents():
        if it["kind"] not in ("swap_color", "neg_color"):
            continue
        cons = {(a, op): v for a, op, v in it["constraints"]}
        noun = P.noun(cons[("type", "eq")])
        texts = encode_texts(model, tokenizer, it["paraphrases"])
        if it["kind"] == "swap_color":
            old = loader.scene_of(it["reference_ids"][0]).color
            new_old = encode_texts(model, tokenizer, [f"{cons[('color', 'eq')]} {noun}", f"{old} {noun}"])
            for form, t in zip(FORMS, texts):
                hits[("swap_color: closer to the new colour", form)].append(float(t @ new_old[0] > t @ new_old[1]))
        else:
            excluded = cons[("color", "ne")]
            others = encode_texts(model, tokenizer, [f"{c} {noun}" for c in A.COLORS if c != excluded])
            ex = encode_texts(model, tokenizer, [f"{excluded} {noun}"])[0]
            for form, t in zip(FORMS, texts):
                hits[("neg_color: closer to some allowed colour", form)].append(float((others @ t).max() > t @ ex))
    print("pooled world-CLIP text embedding of the test instructions vs captions (share of intents):")
    for (what, form), values in sorted(hits.items()):
        print(f"  {what:42s} {form:20s} {np.mean(values):.3f}  (n={len(values)})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="an `app.py --eval` run folder on the default world")
    ap.add_argument("--retrievers", nargs="+", default=list(WORLD_RETRIEVERS))
    ap.add_argument("--probe", action="store_true", help="also run the pooled text-embedding probe")
    ap.add_argument("--world-seed", type=int, default=0)
    ap.add_argument("--world-size", default="default", choices=["tiny", "default"])
    ap.add_argument("--split", default="test", choices=["test", "compositional"])
    args = ap.parse_args(argv)
    from cir_demo.world import load_world

    run = Path(args.run) if args.split == "test" else Path(args.run) / "compositional"
    bench = load_world(size=args.world_size, seed=args.world_seed, split=args.split, progress=False)
    print("| retriever | ranking of its top 20 | mAP@10 | NegRecall@10 |\n| --- | --- | --- | --- |")
    by_constraint = {}
    for name in args.retrievers:
        first, reranked = _results(run, name), _results(run, f"{name}+rerank")
        print("\n".join(composition_and_oracles(bench, name, first, reranked)))
        by_constraint[name], by_constraint[f"{name}+rerank"] = first, reranked
    negatives_by_constraint(bench, by_constraint)
    if args.probe:
        text_probe()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Why the world verifier moves NegRecall@10 the way it does (docs/world_models.md).

    python app.py --eval                                        # writes runs/<stamp>-world/
    python bench/diagnose_world_verifier.py runs/<stamp>-world [--retriever world-clip-fusion]

Reads the run's results files for RETRIEVER and RETRIEVER+rerank (default world, seed 0) and prints:
1. what the first stage's top 20 holds (positives, explicit negatives per query);
2. NegRecall@10 of oracle rerankings of that top 20 next to the first stage and the verifier;
3. the explicit negatives in each top 10, by the constraint they break (the instruction's focus
   or another one), with the focus negatives of the negation kinds;
4. a probe of the pooled world-CLIP text embedding: is "coat not red" closer to the caption
   "red coat" than to every other colour's, and does "blue instead of red" point to blue?
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _neg_recall(top, negatives) -> float:
    return sum(x in negatives for x in top[:10]) / min(len(negatives), 10) if negatives else 0.0


def _results(run: Path, name: str) -> dict:
    path = run / "results" / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"{path}: not found (run `python app.py --eval` with the world verifier first)")
    return json.loads(path.read_text(encoding="utf-8"))


def composition_and_oracles(bench, first: dict, reranked: dict) -> None:
    rows = collections.defaultdict(list)
    for q in bench.queries:
        top = first[q.query_id]["retrieved_items"][:20]
        pos, negs = set(q.judgments.positives), set(q.judgments.negatives)
        p = [x for x in top if x in pos]
        n = [x for x in top if x in negs]
        o = [x for x in top if x not in pos and x not in negs]
        rows["positives in the top 20"].append(len(p))
        rows["explicit negatives in the top 20"].append(len(n))
        rows["share of queries with < 10 positives there"].append(float(len(p) < 10))
        rows["first stage"].append(_neg_recall(top, negs))
        rows["reranked (the run's verifier)"].append(_neg_recall(reranked[q.query_id]["retrieved_items"], negs))
        rows["oracle: positives, then the rest in first-stage order"].append(_neg_recall(p + [x for x in top if x not in pos], negs))
        rows["oracle: positives, then explicit negatives, then the rest"].append(_neg_recall(p + n + o, negs))
        rows["oracle: positives, then the rest, then explicit negatives"].append(_neg_recall(p + o + n, negs))
    print("top 20 of the first stage, means over queries; NegRecall@10 of rerankings of it:")
    for name, values in rows.items():
        print(f"  {name:60s} {np.mean(values):.4f}")


def negatives_by_constraint(bench, runs: dict) -> None:
    from cir_demo.world import loader
    from cir_demo.world.scene import violations

    intents = {it["intent_id"]: it for it in loader.load_intents()}
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
        print(f"  {label:32s} total {focus + sum(other.values()):5d}  focus {focus:5d}  "
              f"negation kinds {dict(sorted(neg_kinds.items()))}  other {sum(other.values())} {dict(other.most_common(5))}")


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
    ap.add_argument("--retriever", default="world-clip-fusion")
    ap.add_argument("--no-probe", action="store_true", help="skip the text-embedding probe")
    args = ap.parse_args(argv)
    from cir_demo.world import load_world

    run = Path(args.run)
    bench = load_world(size="default", seed=0, progress=False)
    first, reranked = _results(run, args.retriever), _results(run, f"{args.retriever}+rerank")
    composition_and_oracles(bench, first, reranked)
    negatives_by_constraint(bench, {args.retriever: first, f"{args.retriever}+rerank": reranked})
    if not args.no_probe:
        text_probe()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The world's judgments against a brute-force oracle over the stored scene graphs.

The oracle below is deliberately independent of the generator: it reads the scene
table column by column into plain dicts and evaluates constraints with its own code.
"""

import json
import random

import numpy as np
import pytest

from cir_demo.world import attributes as A
from cir_demo.world.disk import generate_world
from cir_demo.world.generate import MAX_NEGATIVES
from cir_demo.world.intents import CATEGORIES, EDIR_SUBCATEGORIES


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate_world("tiny", 3, tmp_path_factory.mktemp("world") / "tiny", progress=False)


def _scene_dicts(path):
    table = np.load(path, allow_pickle=False)
    rows = []
    for r in table:
        d = {}
        for f in A.SCENE_FIELDS:
            v = int(r[f])
            if f in A.CATEGORICAL:
                v = A.CATEGORICAL[f][v]
            elif f in A.BOOLEAN_FIELDS:
                v = bool(v)
            d[f] = v
        rows.append(d)
    return rows


def _holds(scene: dict, constraint) -> bool:
    attr, op, value = constraint
    v = scene[attr]
    if op == "eq":
        return v == value
    if op == "ne":
        return v != value
    if op == "in":
        return v in value
    raise AssertionError(f"unknown op {op}")


def _read(root, name):
    return [json.loads(line) for line in (root / name).read_text().splitlines()]


def test_positives_and_negatives_match_brute_force(tiny):
    corpus = _scene_dicts(tiny / "test_corpus.npy")
    ids = [f"w-te-{i:06d}" for i in range(len(corpus))]
    intents = _read(tiny, "test_intents.jsonl")
    rng = random.Random(0)
    for it in rng.sample(intents, min(25, len(intents))):
        cons = it["constraints"]
        broken = [sum(not _holds(s, c) for c in cons) for s in corpus]
        expected_pos = [i for i, b in zip(ids, broken) if b == 0]
        one_off = {i for i, b in zip(ids, broken) if b == 1}
        assert it["positives"] == expected_pos, it["intent_id"]
        assert set(it["negatives"]) <= one_off, it["intent_id"]
        assert len(it["negatives"]) == min(MAX_NEGATIVES, len(one_off)), it["intent_id"]
        assert len(set(it["negatives"])) == len(it["negatives"])
        # near misses that break the focus constraint come first
        focus = [c for c in cons if c[0] == it["focus"]][-1]
        by_id = dict(zip(ids, corpus))
        flags = [not _holds(by_id[n], focus) for n in it["negatives"]]
        assert flags == sorted(flags, reverse=True), it["intent_id"]


def test_every_negative_breaks_exactly_one_constraint_all_intents(tiny):
    corpus = dict(zip((f"w-te-{i:06d}" for i in range(10**6)), _scene_dicts(tiny / "test_corpus.npy")))
    for it in _read(tiny, "test_intents.jsonl"):
        assert it["positives"], f"{it['intent_id']} has no positives"
        for n in it["negatives"]:
            assert sum(not _holds(corpus[n], c) for c in it["constraints"]) == 1
        for p in it["positives"]:
            assert all(_holds(corpus[p], c) for c in it["constraints"])


def test_references_do_not_satisfy_their_target(tiny):
    """Every edit changes something: the (first) reference breaks the focus constraint."""
    refs = _scene_dicts(tiny / "test_refs.npy")
    for it in _read(tiny, "test_intents.jsonl"):
        ref = refs[int(it["reference_ids"][0][len("w-te-r") :])]
        focus = [c for c in it["constraints"] if c[0] == it["focus"]][-1]
        assert not _holds(ref, focus), it["intent_id"]
        others = [c for c in it["constraints"] if c is not focus]
        if len(it["reference_ids"]) == 1:  # single-image edits keep everything else about the item
            assert all(_holds(ref, c) for c in others), it["intent_id"]


def test_negation_and_removal_are_real(tiny):
    refs = _scene_dicts(tiny / "test_refs.npy")
    corpus = _scene_dicts(tiny / "test_corpus.npy")
    seen, accessories = set(), 0
    for it in _read(tiny, "test_intents.jsonl"):
        if it["intent_category"] != "Negation":
            continue
        seen.add(it["kind"])
        ref = refs[int(it["reference_ids"][0][6:])]
        attr = it["focus"]
        if attr in A.ACCESSORIES:
            assert ref[attr] is True
            accessories += 1
        for p in it["positives"]:  # the target lacks what the reference has
            assert corpus[int(p[5:])][attr] != ref[attr], it["intent_id"]
        assert any(corpus[int(n[5:])][attr] == ref[attr] for n in it["negatives"]), it["intent_id"]
    assert seen, "tiny world has no negation intents"
    assert accessories > 0  # the accessory branch above was checked


def test_labels_and_metadata(tiny):
    intents = _read(tiny, "test_intents.jsonl")
    queries = _read(tiny, "test_queries.jsonl")
    refs = _scene_dicts(tiny / "test_refs.npy")
    assert {it["intent_category"] for it in intents} == set(CATEGORIES)
    assert {it["edit_subcategory"] for it in intents} <= set(EDIR_SUBCATEGORIES)
    assert len({it["edit_subcategory"] for it in intents}) >= 12
    assert len(queries) == 6 * len(intents)
    by_group = {}
    for q in queries:
        by_group.setdefault(q["group_id"], []).append(q)
    for it in intents:
        group = by_group[it["intent_id"]]
        assert len(group) == 6 and len({q["instruction"] for q in group}) == 6
        ref = refs[int(it["reference_ids"][0][6:])]
        expected_bucket = A.MONK_BUCKET[ref["skin_tone"]] if ref["skin_tone"] else None
        assert it["skin_tone_bucket"] == expected_bucket
        for q in group:
            m = q["meta"]
            assert m["skin_tone_bucket"] == expected_bucket
            assert m["is_single"] == (len(q["reference_ids"]) == 1)
            assert m["is_question"] == q["instruction"].endswith("?")
            if len(q["reference_ids"]) == 2:
                assert "<img1>" in q["instruction"] and "<img2>" in q["instruction"]
            else:
                assert "<img" not in q["instruction"]
    forms = {q["meta"]["paraphrase_form"] for q in queries}
    assert forms == {"keywords", "concise", "imperative", "question", "detailed", "detailed_imperative"}
    assert {q["meta"]["length_category"] for q in queries} >= {"short", "medium"}


def test_paraphrases_have_no_article_seams():
    """Template seams once read "minus the a checked pattern" and "is there a orange version"."""
    import re

    from cir_demo.world.intents import KINDS, build_intent
    from cir_demo.world.phrases import tidy_articles
    from cir_demo.world.scene import sample_scene

    assert tidy_articles("Remove the a checked pattern from the mug.") == "Remove the checked pattern from the mug."
    assert tidy_articles("Is there a orange version of this hat?") == "Is there an orange version of this hat?"
    assert tidy_articles("A orange one, a one-off, a uniform") == "An orange one, a one-off, a uniform"
    seam = re.compile(r"\b(the|a|an) (a|an|the)\b|\ba (?!one\b)[aeio]", re.IGNORECASE)
    rng = random.Random(0)
    checked = 0
    for _ in range(400):
        ref = sample_scene(rng)
        for name, kind in KINDS.items():
            if ref.domain not in kind.domains or not kind.applies(ref):
                continue
            draft = build_intent(name, ref, rng)
            for text in draft.texts if draft is not None else ():
                assert not seam.search(text), (name, text)
                checked += 1
    assert checked > 5000

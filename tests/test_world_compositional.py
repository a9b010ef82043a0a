"""The compositional split: what train never contains, counted by naive loops over the written files."""

import json

import numpy as np
import pytest

from cir_demo.world import attributes as A
from cir_demo.world.disk import generate_world
from cir_demo.world.generate import SIZES
from cir_demo.world.holdout import HOLDABLE, edit_of, held_out_edits, pool_alternatives, repair, template_pool
from cir_demo.world.intents import intent_templates
from cir_demo.world.scene import sample_scene, scene_from_row, validate_scene


@pytest.fixture(scope="module", params=["tiny", "tiny-fold1"])
def world(request, tmp_path_factory):
    """A tiny world of each held-out fold; "held": the edits that fold holds out."""
    root = generate_world(request.param, 3, tmp_path_factory.mktemp("comp") / "w", progress=False)
    read = lambda name: [json.loads(line) for line in (root / name).read_text().splitlines()]  # noqa: E731
    return {
        "held": held_out_edits(SIZES[request.param].fold),
        "manifest": json.loads((root / "manifest.json").read_text()),
        "test": read("test_intents.jsonl"),
        "compositional": read("compositional_intents.jsonl"),
        "train": read("train_intents.jsonl"),
        "captions": read("train_captions.jsonl"),
        "queries": read("compositional_queries.jsonl"),
        "train_scenes": [scene_from_row(r) for r in np.load(root / "train_scenes.npy")],
        "refs": np.load(root / "test_refs.npy"),
        "validation": read("validation_intents.jsonl"),
        "validation_scenes": [scene_from_row(r) for r in np.load(root / "validation_scenes.npy")],
        "corpus": [scene_from_row(r) for r in np.load(root / "test_corpus.npy")],
    }


def _edit(intent):
    t, attr, op, value = intent["edit"]
    return (t, attr, op, tuple(value) if isinstance(value, list) else value)


def _asked(intent):
    """The (type, attribute, value) combination an intent asks for, from its constraints alone."""
    focus = next(c for c in reversed(intent["constraints"]) if c[0] == intent["focus"])
    return edit_of(intent["edit"][0], *focus)


def test_no_compositional_edit_or_wording_occurs_in_train(world):
    train_edits = {_edit(it) for it in world["train"]}
    train_texts = {t for it in world["train"] for t in it["paraphrases"]}
    comp = world["compositional"]
    assert len(comp) >= 25
    assert not [it["intent_id"] for it in comp if _edit(it) in train_edits]
    assert not [t for it in comp for t in it["paraphrases"] if t in train_texts]
    # The edit field says what the constraints ask for.
    for it in comp + world["test"]:
        focus = next(c for c in reversed(it["constraints"]) if c[0] == it["focus"])
        assert it["edit"][1:] == focus


def test_train_images_and_captions_never_show_an_asked_for_compositional_combination(world):
    asked = {_asked(it) for it in world["compositional"]}
    assert None not in asked and asked <= world["held"]
    shown = {(s.type, attr, getattr(s, attr)) for s in world["train_scenes"] for attr in HOLDABLE if attr != "type"}
    # No held-out edit at all, not only those this world asks for: the set is the same for every
    # world seed, since models trained on one world's train split are evaluated on other worlds.
    assert not world["held"] & shown
    # Captions describe train images only (one record per train scene, in order); read as text, no
    # caption names a held-out colour on its type.
    assert [rec["image_id"] for rec in world["captions"]] == [
        f"w-tr-{i:06d}" for i in range(len(world["train_scenes"]))
    ]
    assert held_color_mentions(world["captions"], world["held"]) == []


def held_color_mentions(records, held_edits) -> list[str]:
    """The captions (read as text) that name a held-out colour on its type: the colour word followed,
    within four words, by the type's noun (singular or plural)."""
    import re

    held = [(t, v) for t, attr, v in held_edits if attr == "color"]
    patterns = [
        re.compile(rf"\b{re.escape(v)}\b(?:\W+\w+){{0,4}}?\W+{re.escape(t)}(?:s|es)?\b", re.IGNORECASE) for t, v in held
    ]
    return [text for rec in records for text in rec["captions"] if any(p.search(text) for p in patterns)]


def test_the_caption_check_reads_the_captions(world):
    (t, v) = next((t, v) for t, attr, v in sorted(world["held"]) if attr == "color")
    doctored = [*world["captions"], {"image_id": "x", "captions": [f"A close-up photo of a {v} striped {t}"]}]
    assert held_color_mentions(doctored, world["held"]) == [f"A close-up photo of a {v} striped {t}"]
    assert held_color_mentions([{"image_id": "x", "captions": [f"A {t} beside a {v} cat"]}], world["held"]) == []


def test_the_in_distribution_split_asks_for_no_held_out_edit(world):
    held = world["held"]
    assert not [it["intent_id"] for it in world["test"] if _asked(it) in held]


def test_manifest_overlaps_equal_naive_counts(world):
    m = world["manifest"]
    train_items = {tuple(getattr(s, f) for f in A.ITEM_FIELDS) for s in world["train_scenes"]}
    train_texts = {t for it in world["train"] for t in it["paraphrases"]}
    train_edits = {_edit(it) for it in world["train"]}
    for split in ("test", "compositional"):
        intents = world[split]
        rows = sorted({int(r[6:]) for it in intents for r in it["reference_ids"]})
        items = [tuple(getattr(scene_from_row(world["refs"][i]), f) for f in A.ITEM_FIELDS) for i in rows]
        got = m["held_out"]["overlaps"][split]
        assert got["query_strings_in_train"] == sum(t in train_texts for it in intents for t in it["paraphrases"])
        assert got["reference_items_in_train_images"] == sum(i in train_items for i in items)
        assert got["intent_edits_in_train_intents"] == sum(_edit(it) in train_edits for it in intents)
    assert m["held_out"]["overlaps"]["compositional"]["query_strings_in_train"] == 0
    assert m["held_out"]["overlaps"]["compositional"]["intent_edits_in_train_intents"] == 0
    assert m["held_out"]["overlaps"]["test"]["intent_edits_in_train_intents"] > 0  # in distribution
    assert m["counts"]["compositional_queries"] == 6 * m["counts"]["compositional_intents"] == len(world["queries"])


def test_splits_have_disjoint_ids_and_share_the_corpus(world):
    comp_ids = {q["query_id"] for q in world["queries"]}
    assert all(q.startswith("wn") for q in comp_ids)
    assert not {it["intent_id"] for it in world["test"]} & {it["intent_id"] for it in world["compositional"]}
    for it in world["compositional"]:
        assert all(p.startswith("w-te-") and not p.startswith("w-te-r") for p in it["positives"])


def test_held_out_wordings_are_the_last_alternatives():
    alternatives = ["a", "b", "c"]
    assert pool_alternatives(alternatives) == alternatives
    with template_pool("seen"):
        assert pool_alternatives(alternatives) == ["a", "b"]
        assert pool_alternatives(["only"]) == ["only"]
    with template_pool("held_out"):
        assert pool_alternatives(alternatives) == ["c"]
    with pytest.raises(ValueError, match="template pool"):
        with template_pool("novel"):
            pass
    # Every kind has at least one form with alternatives to hold out.
    assert all(any(isinstance(f, list) and len(f) > 1 for f in forms) for forms in intent_templates().values())


def test_repair_redraws_only_free_held_out_attributes():
    import random

    held = held_out_edits()
    rng = random.Random(5)
    repaired = 0
    for _ in range(400):
        scene = sample_scene(rng)
        fixed = ("color",)
        bad = [a for a in HOLDABLE if a != "type" and (scene.type, a, getattr(scene, a)) in held]
        out = repair(scene, held, rng, fixed)
        if "color" in bad:
            assert out is None
            continue
        validate_scene(out)
        assert not [a for a in HOLDABLE if a != "type" and (out.type, a, getattr(out, a)) in held]
        changed = {f for f in A.SCENE_FIELDS if getattr(out, f) != getattr(scene, f)}
        assert changed == set(bad)
        repaired += bool(bad)
    assert repaired > 20


def test_the_validation_split_shares_no_edit_with_either_test_split_nor_train(world):
    """The train split's compositional validation split, recounted from the files: its edits are asked
    by neither test split nor any train intent, shown by no train image, and held out of nothing else."""
    val = world["validation"]
    assert len(val) >= 10
    asked = lambda intents: {_asked(it) for it in intents}  # noqa: E731
    val_edits = asked(val)
    assert None not in val_edits
    assert not val_edits & asked(world["test"]) and not val_edits & asked(world["compositional"])
    assert not val_edits & asked(world["train"]) and not val_edits & world["held"]
    listed = {tuple(e) for e in world["manifest"]["held_out"]["validation"]["edits"]}
    assert val_edits <= listed and not listed & world["held"]
    shown = {(s.type, attr, getattr(s, attr)) for s in world["train_scenes"] for attr in HOLDABLE if attr != "type"}
    assert not listed & shown  # the train split proper never shows a validation edit
    # its own scenes and wordings: they show what it asks for, and none of its paraphrases is a train one
    val_shown = {(s.type, a, getattr(s, a)) for s in world["validation_scenes"] for a in HOLDABLE if a != "type"}
    assert val_edits & val_shown and not world["held"] & val_shown
    train_texts = {t for it in world["train"] for t in it["paraphrases"]}
    assert not [t for it in val for t in it["paraphrases"] if t in train_texts]
    test_signatures = {s.signature() for s in world["corpus"]}
    assert not [s for s in world["validation_scenes"] if s.signature() in test_signatures]
    assert all(r.startswith("w-va-") for it in val for r in it["reference_ids"])
    assert world["manifest"]["held_out"]["validation"]["overlaps"]["edits_asked_by_test"] == 0


def test_validation_positives_are_every_gallery_scene_that_satisfies_the_target(world):
    from cir_demo.world.scene import Constraint, violations

    gallery = [(f"w-tr-{i:06d}", s) for i, s in enumerate(world["train_scenes"])]
    gallery += [(f"w-va-{i:06d}", s) for i, s in enumerate(world["validation_scenes"])]
    for it in world["validation"][:10]:
        constraints = [Constraint.from_json(c) for c in it["constraints"]]
        naive = [i for i, s in gallery if not violations(s, constraints)]
        assert it["positives"] == naive  # train images too where the edit negates ("not red")


def test_fold_zero_is_the_draw_the_shipped_world_asks_and_the_folds_are_disjoint():
    """Fold 0 is unchanged: every edit the shipped world 0's compositional split asks for (read from the
    committed files) is one of it, and the set is the one first drawn (its fingerprint). Fold 1 shares
    no edit with it, holds back as many, and keeps another value to learn from on every type."""
    import hashlib
    import lzma

    from cir_demo.paths import prebuilt_root
    from cir_demo.world.holdout import _holdable_values

    path = prebuilt_root() / "world-default-s0" / "world" / "compositional_intents.jsonl.xz"
    shipped = [json.loads(line) for line in lzma.decompress(path.read_bytes()).decode().splitlines()]
    asked = {_asked(it) for it in shipped}
    fold0, fold1 = held_out_edits(0), held_out_edits(1)
    assert len(asked) > 20 and asked <= fold0 and not asked & fold1
    digest = hashlib.sha256(repr(sorted(map(repr, fold0))).encode()).hexdigest()
    assert digest[:16] == FOLD0_SHA256_16
    assert not fold0 & fold1 and len(fold1) == len(fold0)
    for t, attr, v in fold1:
        others = [w for w in _holdable_values(attr, t) if w != v]
        assert v in _holdable_values(attr, t) and (others or attr in ("hat", "bag", "glasses"))
    with pytest.raises(ValueError, match="fold"):
        held_out_edits(7)


FOLD0_SHA256_16 = "923a197e95e68a05"  # sha256 of the draw before folds existed (HOLDOUT_STREAM)

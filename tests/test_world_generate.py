"""World generation: determinism, the manifest, train/test disjointness, category coverage."""

import hashlib
import json
import shutil
from collections import Counter

import numpy as np
import pytest

from cir_demo.world import attributes as A
from cir_demo.world.disk import DATA_FILES, generate_world, manifest_matches, world_stats
from cir_demo.world.generate import SIZES, scaled_quotas
from cir_demo.world.intents import CATEGORIES, KINDS
from cir_demo.world.scene import Constraint, satisfies, table_to_scenes


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    base = tmp_path_factory.mktemp("gen")
    a = generate_world("tiny", 0, base / "a", progress=False)
    b = generate_world("tiny", 0, base / "b", progress=False)
    c = generate_world("tiny", 1, base / "c", progress=False)
    return a, b, c


def _read(root, name):
    return [json.loads(line) for line in (root / name).read_text().splitlines()]


def test_same_seed_gives_identical_bytes(worlds):
    a, b, _ = worlds
    for name in DATA_FILES + ("manifest.json",):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_different_seed_differs(worlds):
    a, _, c = worlds
    ma, mc = (json.loads((r / "manifest.json").read_text()) for r in (a, c))
    assert ma["checksum"] != mc["checksum"]
    assert (a / "test_corpus.npy").read_bytes() != (c / "test_corpus.npy").read_bytes()
    assert (a / "test_queries.jsonl").read_bytes() != (c / "test_queries.jsonl").read_bytes()


def test_manifest_checksums_cover_every_file(worlds):
    a = worlds[0]
    m = json.loads((a / "manifest.json").read_text())
    assert set(m["files"]) == set(DATA_FILES)
    for name, digest in m["files"].items():
        assert hashlib.sha256((a / name).read_bytes()).hexdigest() == digest
    assert m["seed"] == 0 and m["size"] == "tiny" and m["generator_version"]
    assert m["counts"]["test_queries"] == 6 * m["counts"]["test_intents"]
    assert manifest_matches(a, "tiny", 0)
    assert not manifest_matches(a, "tiny", 1)


def test_generate_skips_when_manifest_matches_and_redoes_when_a_file_changed(worlds, tmp_path):
    root = tmp_path / "w"
    shutil.copytree(worlds[0], root)  # a world generate_world wrote (copied: generating it again costs CPU)
    stamp = (root / "test_corpus.npy").stat().st_mtime_ns
    generate_world("tiny", 0, root, progress=False)
    assert (root / "test_corpus.npy").stat().st_mtime_ns == stamp
    (root / "test_queries.jsonl").write_text("tampered\n")
    assert not manifest_matches(root, "tiny", 0)
    generate_world("tiny", 0, root, progress=False)
    assert (root / "test_queries.jsonl").read_bytes() == (worlds[0] / "test_queries.jsonl").read_bytes()


def test_a_world_written_by_other_generator_code_is_generated_again(worlds, tmp_path, monkeypatch):
    """A generated world is a cache keyed by the generator's code: a copy whose manifest names other code
    is not reused (generated again, its manifest then naming the running code)."""
    from cir_demo.world import shipped

    root = tmp_path / "w"
    shutil.copytree(worlds[0], root)
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["generator_sha256"] == shipped.generator_sha256()
    manifest["generator_sha256"] = "0" * 64  # as another generator's code would have written it
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert not manifest_matches(root, "tiny", 0)
    stamp = (root / "test_corpus.npy").stat().st_mtime_ns
    generate_world("tiny", 0, root, progress=False)
    assert (root / "test_corpus.npy").stat().st_mtime_ns != stamp
    assert json.loads((root / "manifest.json").read_text())["generator_sha256"] == shipped.generator_sha256()


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(KeyError, match="world size"):
        generate_world("huge", 0, tmp_path, progress=False)
    with pytest.raises(ValueError, match="seed"):
        generate_world("tiny", -1, tmp_path, progress=False)


def test_train_and_test_are_disjoint(worlds):
    a = worlds[0]
    test_scenes = table_to_scenes(np.load(a / "test_corpus.npy")) + table_to_scenes(np.load(a / "test_refs.npy"))
    train_scenes = table_to_scenes(np.load(a / "train_scenes.npy"))
    test_sigs = {s.signature() for s in test_scenes}
    assert not test_sigs & {s.signature() for s in train_scenes}
    test_targets = {
        frozenset(Constraint.from_json(c) for c in it["constraints"]) for it in _read(a, "test_intents.jsonl")
    }
    train_intents = _read(a, "train_intents.jsonl")
    assert train_intents
    for it in train_intents:
        assert frozenset(Constraint.from_json(c) for c in it["constraints"]) not in test_targets
        assert all(r.startswith("w-tr-") for r in it["reference_ids"])
    test_ids = {f"w-te-{i:06d}" for i in range(len(test_scenes))}
    triplets = _read(a, "train_triplets.jsonl")
    assert triplets
    by_intent = {it["intent_id"]: it for it in train_intents}
    for t in triplets:
        assert t["target_id"].startswith("w-tr-") and t["target_id"] not in test_ids
        assert t["instruction"] in by_intent[t["intent_id"]]["paraphrases"]
        cons = [Constraint.from_json(c) for c in by_intent[t["intent_id"]]["constraints"]]
        target = train_scenes[int(t["target_id"][5:])]
        assert satisfies(target, cons)
        assert not satisfies(train_scenes[int(t["reference_ids"][0][5:])], cons)
    assert {t["intent_category"] for t in triplets} == set(CATEGORIES)


def test_train_captions_describe_their_images(worlds):
    a = worlds[0]
    train_scenes = table_to_scenes(np.load(a / "train_scenes.npy"))
    caps = _read(a, "train_captions.jsonl")
    assert len(caps) == len(train_scenes)
    for rec in caps[:200]:
        s = train_scenes[int(rec["image_id"][5:])]
        assert len(rec["captions"]) == 3
        for c in rec["captions"]:
            assert s.color in c and (s.type in c or s.type.rstrip("s") in c)


def test_skin_tones_are_sampled_independently(worlds):
    """Skin tone is uniform over Monk 1..10 and unrelated to garment colour/type."""
    scenes = table_to_scenes(np.load(worlds[0] / "train_scenes.npy"))
    people = [s for s in scenes if s.has_person]
    assert len(people) > 200
    counts = Counter(s.skin_tone for s in people)
    assert set(counts) == set(range(1, 11))
    assert all(s.skin_tone == 0 for s in scenes if not s.has_person)
    # chi-square on (bucket x garment type): no dependence well beyond chance
    buckets = sorted(set(A.MONK_BUCKET.values()))
    types = A.TYPES_BY_DOMAIN["fashion"]
    table = np.array(
        [[sum(1 for s in people if A.MONK_BUCKET[s.skin_tone] == b and s.type == t) for t in types] for b in buckets],
        float,
    )
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    chi2 = ((table - expected) ** 2 / expected).sum()
    assert chi2 < 30  # dof = 9; p(chi2 > 30) < 0.001


def test_default_quotas_give_every_category_and_subcategory_30_intents():
    quotas = scaled_quotas(SIZES["default"].test_quota_scale)
    per_cat, per_sub = Counter(), Counter()
    for k, q in quotas.items():
        assert q >= 20, k
        per_cat[KINDS[k].category] += q
        per_sub[KINDS[k].subcategory] += q
    assert min(per_cat.values()) >= 30 and min(per_sub.values()) >= 30
    assert len(per_sub) == 15
    total = sum(quotas.values())
    assert total >= 800
    assert 0.11 <= sum(q for k, q in quotas.items() if KINDS[k].n_refs == 2) / total <= 0.15


@pytest.mark.slow
def test_default_world_statistics(default_world):
    w = default_world[0]  # build_world("default", 0), built once per session (conftest.py)
    stats = world_stats(w.test_intents, len(w.test_corpus))
    assert stats["corpus_images"] >= 5000 and stats["intents"] >= 800 and stats["queries"] >= 4800
    assert 5 <= stats["positives"]["median"] <= 15 and stats["positives"]["min"] >= 1
    assert stats["negatives"]["median"] >= 10
    assert min(stats["by_category"].values()) >= 30 and min(stats["by_subcategory"].values()) >= 30
    assert 0.11 <= stats["two_image_fraction"] <= 0.15
    assert len(w.train_scenes) >= 20000
    assert max(len(i["negatives"]) for i in w.test_intents) <= 40


def test_every_intent_template_is_used_and_filled(monkeypatch):
    """The template table (world/intent_templates.json) against the builders: every entry is used, every
    alternative of every form is drawn, and no placeholder is left unfilled."""
    import random

    from cir_demo.world import intents
    from cir_demo.world.scene import sample_scene

    table = intents.intent_templates()
    drawn: set[tuple[str, int, int]] = set()  # (entry, form, alternative)
    real_texts = intents._texts

    def recording(key, rng, w, **values):
        texts = real_texts(key, rng, w, **values)
        words = {**vars(w), **values}
        for j, (form, text) in enumerate(zip(table[key], texts)):
            options = [t.format_map(words) for t in (form if isinstance(form, list) else [form])]
            drawn.add((key, j, options.index(text)))
        return texts

    monkeypatch.setattr(intents, "_texts", recording)
    rng = random.Random(7)
    for i in range(1500):
        ref = sample_scene(rng)
        for name, kind in KINDS.items():
            if ref.domain in kind.domains and kind.applies(ref):
                draft = intents.build_intent(name, ref, random.Random(i))
                assert draft is None or not any("{" in t or "}" in t for t in draft.texts), draft.texts
    expected = {
        (key, j, k)
        for key, forms in table.items()
        for j, form in enumerate(forms)
        for k in range(len(form) if isinstance(form, list) else 1)
    }
    assert drawn == expected

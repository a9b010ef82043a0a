"""Build the offline world (test benchmark + train split) in memory; `disk.py` writes it with its manifests.

Pipeline (per split, each with its own random stream):
1. intents: pick a lead kind by remaining quota, sample a reference it applies to, add 1-3
   more kinds that apply to the same reference (PinPoint gives each image 3-5 instructions);
2. planting: for each intent, a few scenes that satisfy its target (other attributes random)
   and near misses that break exactly one constraint; per reference a few "twins" (the same
   item in random surroundings, the natural near miss of every edit); then random filler;
3. judging: positives = every corpus scene that satisfies the target, negatives = every
   scene that breaks exactly one constraint (focus constraint first), computed by scanning
   the whole corpus, never by remembering what was planted.

Images are not rendered here: the renderer draws any image from its scene graph on demand.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from typing import Sequence

import numpy as np

from . import attributes as A
from .holdout import (
    FOLDS,
    draft_edit,
    draft_touches,
    edit_of,
    held_out_edits,
    offending,
    repair,
    template_pool,
    validation_edits,
)
from .intents import FORM_FLAGS, FORMS, KINDS, DEFAULT_QUOTAS, IntentDraft, build_intent, length_category
from .scene import (
    Constraint,
    Scene,
    constraint_mask,
    force_constraints,
    normalize_scene,
    sample_scene,
    scenes_to_table,
    validate_scene,
    value_violating,
    violation_counts,
    violations,
)

GENERATOR_VERSION = "world-5"  # 5: the train split's compositional validation split (its own held-out edits)
# Seeds the random streams. Kept at "world-3" when a change touches only text, so scenes, intents
# and judgments (and the world models trained on them) stay the same; change it with the sampling.
RNG_NAMESPACE = "world-4"
MAX_NEGATIVES = 40


@dataclass(frozen=True)
class SizeConfig:
    test_quota_scale: float
    train_quota_scale: float
    min_train_images: int
    n_test_captions: int
    compositional_quota_scale: float = 0.45
    validation_quota_scale: float = 1.0
    positives_per_intent: tuple[int, int] = (2, 7)
    twins_per_reference: int = 3
    filler_fraction: float = 0.05
    fold: int = 0  # which held-out edits (holdout.held_out_edits) the compositional split asks for


_BASE_SIZES = {
    "tiny": SizeConfig(
        test_quota_scale=0.05,
        train_quota_scale=0.1,
        min_train_images=600,
        n_test_captions=60,
        filler_fraction=0.2,
        compositional_quota_scale=0.05,
        validation_quota_scale=0.05,
    ),
    "default": SizeConfig(test_quota_scale=1.0, train_quota_scale=3.0, min_train_images=20000, n_test_captions=1000),
}
# A size names its fold: "default" is fold 0 (the shipped models'), "default-fold1" the same size asking
# fold 1's held-out edits, disjoint from fold 0's (holdout.py).
SIZES = {
    **_BASE_SIZES,
    **{f"{name}-fold{k}": replace(cfg, fold=k) for name, cfg in _BASE_SIZES.items() for k in FOLDS if k},
}


def _rng(seed: int, stream: str) -> random.Random:
    # String seeds go through SHA-512 in CPython: stable across runs and platforms.
    return random.Random(f"cir-world/{RNG_NAMESPACE}/{seed}/{stream}")


def scaled_quotas(scale: float) -> dict[str, int]:
    return {k: max(1, int(round(q * scale))) for k, q in DEFAULT_QUOTAS.items()}


# --------------------------------------------------------------------------- planting
def plant_positive(rng: random.Random, draft: IntentDraft) -> Scene:
    return force_constraints(rng, sample_scene(rng, domain=draft.domain), draft.constraints)


def plant_near_miss(rng: random.Random, draft: IntentDraft, target: Constraint, prefer=None) -> Scene | None:
    """A scene breaking `target` and satisfying every other constraint of the intent (None if none found)."""
    others = [c for c in draft.constraints if c is not target]
    for _ in range(20):
        base = plant_positive(rng, draft)
        try:
            value = value_violating(rng, target, base.type, prefer)
        except ValueError:  # e.g. sunglasses come in one pattern only
            return None
        if target.attr == "type":
            start = base.replace(type=value, domain=A.TYPE_DOMAIN[value])
            if start.domain != base.domain:
                continue
            try:
                scene = force_constraints(rng, start, others)
            except ValueError:
                continue
        else:
            scene = normalize_scene(base.replace(**{target.attr: value}))
        try:
            validate_scene(scene)
        except ValueError:
            continue
        if violations(scene, draft.constraints) == [target]:
            return scene
        prefer = None
    return None


def plant_twin(rng: random.Random, ref: Scene) -> Scene:
    """The reference's item (type, colour, pattern, material, shape) in random surroundings."""
    return force_constraints(
        rng, sample_scene(rng, domain=ref.domain), [Constraint(f, "eq", getattr(ref, f)) for f in A.ITEM_FIELDS]
    )


def _focus_constraint(draft: IntentDraft) -> Constraint:
    return next(c for c in reversed(draft.constraints) if c.attr == draft.focus)


def _sample_reference(rng: random.Random, kind_name: str, held: frozenset | None = None) -> Scene:
    kind = KINDS[kind_name]
    weights = {"fashion": 0.45, "home": 0.3, "accessories": 0.25}
    domains = list(kind.domains)
    for _ in range(1000):
        domain = rng.choices(domains, weights=[weights[d] for d in domains], k=1)[0]
        ref = sample_scene(rng, domain=domain)
        if held is not None:
            ref = repair(ref, held, rng)
        if kind.applies(ref):
            return ref
    raise RuntimeError(f"could not sample a reference for intent kind {kind_name!r}")


@dataclass
class PlantedSplit:
    drafts: list[IntentDraft]
    refs: list[Scene]  # every reference scene, in order
    draft_ref_index: list[tuple[int, ...]]  # per draft, indices into refs
    scenes: list[Scene]  # planted + twins + filler (unordered)


def plant_split(
    rng: random.Random,
    quotas: dict[str, int],
    cfg: SizeConfig,
    progress: bool = False,
    forbidden_targets: frozenset = frozenset(),
    held: frozenset = frozenset(),
    mode: str = "avoid",
    forbidden_texts: frozenset = frozenset(),
    repair_scenes: bool = False,
    repair_held: frozenset | None = None,
) -> PlantedSplit:
    """Intents and their scenes. `mode` "avoid" keeps intents whose edit is not in `held` (the train
    and in-distribution test splits), "require" only those whose edit is (the compositional splits);
    `repair_scenes` also redraws held-out combinations in every scene (train: no image shows one), those
    of `repair_held` instead of `held` when given."""
    remaining = {k: q for k, q in quotas.items() if q > 0}
    drafts: list[IntentDraft] = []
    draft_refs: list[tuple[int, ...]] = []
    refs: list[Scene] = []
    scenes: list[Scene] = []
    lo, hi = cfg.positives_per_intent
    require = mode == "require"
    # Kinds that rarely or never ask for a held-out edit (a colour family) give up after this many tries.
    tries = Counter()
    max_tries = {k: 200 + 60 * q for k, q in remaining.items()}
    scene_held = (held if repair_held is None else repair_held) if repair_scenes else None

    def keep(scene: Scene | None, fixed=()) -> None:
        if scene is not None and scene_held is not None:
            scene = repair(scene, scene_held, rng, fixed)
        if scene is not None:
            scenes.append(scene)

    def accept(draft: IntentDraft | None) -> bool:
        return (
            draft is not None
            and frozenset(draft.constraints) not in forbidden_targets
            and draft_touches(held, draft) == require
            and not forbidden_texts.intersection(draft.texts)
            and not (scene_held is not None and any(offending(r, scene_held) for r in draft.refs[1:]))
        )

    while remaining:
        kinds = sorted(remaining)
        lead = rng.choices(kinds, weights=[remaining[k] for k in kinds], k=1)[0]
        ref = _sample_reference(rng, lead, scene_held)
        chosen = [lead]
        others = [k for k in kinds if k != lead and ref.domain in KINDS[k].domains and KINDS[k].applies(ref)]
        for _ in range(min(len(others), rng.randint(1, 3))):
            k = rng.choices(others, weights=[remaining[o] for o in others], k=1)[0]
            others.remove(k)
            chosen.append(k)
        ref_index = None
        for kind_name in chosen:
            if kind_name not in remaining:
                continue
            # The compositional split redraws the asked-for value a few times: few draws hit a held-out edit.
            for _ in range(12 if require else 1):
                tries[kind_name] += 1
                draft = build_intent(kind_name, ref, rng)
                if accept(draft):
                    break
            else:
                if tries[kind_name] > max_tries[kind_name]:
                    del remaining[kind_name]
                continue
            if ref_index is None:
                refs.append(ref)
                ref_index = len(refs) - 1
            idx = [ref_index]
            for extra in draft.refs[1:]:
                refs.append(extra)
                idx.append(len(refs) - 1)
            drafts.append(draft)
            draft_refs.append(tuple(idx))
            remaining[kind_name] -= 1
            if remaining[kind_name] <= 0:
                del remaining[kind_name]
            fixed = {c.attr for c in draft.constraints}
            for _ in range(rng.randint(lo, hi)):
                keep(plant_positive(rng, draft), fixed)
            focus = _focus_constraint(draft)
            keep(plant_near_miss(rng, draft, focus, prefer=draft.prefer_violation), fixed)
            if rng.random() < 0.5:
                other = rng.choice([c for c in draft.constraints if c is not focus])
                keep(plant_near_miss(rng, draft, other), fixed)
        if ref_index is not None:
            for _ in range(cfg.twins_per_reference):
                keep(plant_twin(rng, ref), A.ITEM_FIELDS)
    n_filler = int(round(cfg.filler_fraction * len(scenes)))
    for _ in range(n_filler):
        keep(sample_scene(rng))
    return PlantedSplit(drafts, refs, draft_refs, scenes)


# --------------------------------------------------------------------------- judging
def judge(
    table: np.ndarray, ids: Sequence[str], draft: IntentDraft, rng: random.Random, max_negatives: int = MAX_NEGATIVES
) -> tuple[list[str], list[str]]:
    """Positives (all scenes satisfying the target, in corpus order) and near-miss negatives.

    Negatives are scenes breaking exactly one constraint: those breaking the focus
    constraint first, then the rest, each group in a seeded random order, capped.
    """
    counts = violation_counts(table, draft.constraints)
    pos = np.flatnonzero(counts == 0)
    one = counts == 1
    focus_ok = constraint_mask(table, _focus_constraint(draft))
    first = np.flatnonzero(one & ~focus_ok).tolist()
    rest = np.flatnonzero(one & focus_ok).tolist()
    rng.shuffle(first)
    rng.shuffle(rest)
    neg = (first + rest)[:max_negatives]
    return [ids[i] for i in pos], [ids[i] for i in neg]


# --------------------------------------------------------------------------- records
def corpus_id(i: int) -> str:
    return f"w-te-{i:06d}"


def ref_id(i: int) -> str:
    return f"w-te-r{i:05d}"


def train_id(i: int) -> str:
    return f"w-tr-{i:06d}"


def _intent_record(intent_id: str, draft: IntentDraft, reference_ids, positives, negatives, ref_scene: Scene) -> dict:
    return {
        "intent_id": intent_id,
        "kind": draft.kind,
        "intent_category": draft.category,
        "edit_subcategory": draft.subcategory,
        "domain": draft.domain,
        "reference_ids": list(reference_ids),
        "constraints": [c.to_json() for c in draft.constraints],
        "focus": draft.focus,
        "edit": draft_edit(draft),
        "paraphrases": list(draft.texts),
        "skin_tone_bucket": ref_scene.skin_tone_bucket,
        "skin_tone_monk": ref_scene.skin_tone or None,
        "positives": positives,
        "negatives": negatives,
    }


def query_records(intents: Sequence[dict], prefix: str = "w") -> list[dict]:
    """Six queries per intent (one per paraphrase form), ids w00001... (compositional: wn00001...),
    groups = intent ids."""
    out = []
    for gi, it in enumerate(intents):
        for fi, (form, text) in enumerate(zip(FORMS, it["paraphrases"])):
            out.append(
                {
                    "query_id": f"{prefix}{gi * len(FORMS) + fi + 1:05d}",
                    "group_id": it["intent_id"],
                    "reference_ids": it["reference_ids"],
                    "instruction": text,
                    "meta": {
                        "intent_category": it["intent_category"],
                        "edit_subcategory": it["edit_subcategory"],
                        "domain": it["domain"],
                        "skin_tone_bucket": it["skin_tone_bucket"],
                        "is_question": FORM_FLAGS[form]["is_question"],
                        "is_imperative": FORM_FLAGS[form]["is_imperative"],
                        "length_category": length_category(text),
                        "is_single": len(it["reference_ids"]) == 1,
                        "paraphrase_form": form,
                        "intent_kind": it["kind"],
                    },
                }
            )
    return out


# --------------------------------------------------------------------------- the world
def _progress(enabled: bool, msg: str) -> None:
    if enabled:
        print(f"[world] {msg}", file=sys.stderr, flush=True)


def _judged(
    planted: PlantedSplit,
    corpus_table: np.ndarray,
    corpus_ids: Sequence[str],
    ref_offset: int,
    id_prefix: str,
    judge_rng: random.Random,
) -> list[dict]:
    """Intent records of a test split, judged against the whole (shared) corpus."""
    out = []
    for i, (draft, ridx) in enumerate(zip(planted.drafts, planted.draft_ref_index)):
        pos, neg = judge(corpus_table, corpus_ids, draft, judge_rng)
        out.append(
            _intent_record(
                f"{id_prefix}{i + 1:04d}", draft, [ref_id(ref_offset + r) for r in ridx], pos, neg, draft.refs[0]
            )
        )
    return out


def _test_captions(
    cfg: SizeConfig, cap_rng: random.Random, corpus: Sequence[Scene], corpus_ids: Sequence[str]
) -> list[dict]:
    from .captions import sample_caption

    out = []
    for i in range(cfg.n_test_captions):
        src = cap_rng.randrange(len(corpus))
        text, cons = sample_caption(corpus[src], cap_rng)
        out.append(
            {
                "caption_id": f"wc{i + 1:05d}",
                "text": text,
                "constraints": [c.to_json() for c in cons],
                "source_id": corpus_ids[src],
            }
        )
    return out


def _train_records(
    tplanted: PlantedSplit,
    train_table: np.ndarray,
    train_ids: Sequence[str],
    ref_train_id: dict,
    tj_rng: random.Random,
    prefix: str = "tr-i",
) -> tuple[list[dict], list[dict]]:
    """Train intents (positives only) and up to three (reference, instruction, target) triplets each."""
    train_intents, train_triplets = [], []
    for draft, ridx in zip(tplanted.drafts, tplanted.draft_ref_index):
        if not all(r in ref_train_id for r in ridx):
            continue
        rids = [ref_train_id[r] for r in ridx]
        pos, _neg = judge(train_table, train_ids, draft, tj_rng, max_negatives=0)
        if not pos:
            continue
        iid = f"{prefix}{len(train_intents) + 1:05d}"
        rec = _intent_record(iid, draft, rids, pos, [], draft.refs[0])
        del rec["negatives"]
        train_intents.append(rec)
        picks = list(pos)
        tj_rng.shuffle(picks)
        for target in picks[:3]:
            fi = tj_rng.randrange(len(FORMS))
            train_triplets.append(
                {
                    "intent_id": iid,
                    "reference_ids": rids,
                    "instruction": draft.texts[fi],
                    "target_id": target,
                    "intent_category": draft.category,
                    "edit_subcategory": draft.subcategory,
                    "kind": draft.kind,
                    "form": FORMS[fi],
                }
            )
    return train_intents, train_triplets


@dataclass
class TestPart:
    """The world's benchmark, both test splits over one corpus, and (in memory only) what the train
    split must keep clear of: the test images' signatures, targets and compositional wordings."""

    size: str
    seed: int
    test_corpus: np.ndarray
    test_refs: np.ndarray
    test_intents: list[dict]
    test_queries: list[dict]
    test_captions: list[dict]
    compositional_intents: list[dict]
    compositional_queries: list[dict]
    held_out: frozenset
    timings: dict
    signatures: set = field(repr=False, default_factory=set)
    targets: frozenset = field(repr=False, default=frozenset())
    compositional_texts: frozenset = field(repr=False, default=frozenset())
    asked_edits: frozenset = field(repr=False, default=frozenset())  # what either test split asks for


@dataclass(kw_only=True)
class BuiltWorld(TestPart):
    """The whole world: the test part and the train split planted around it, with its compositional
    validation split (intents asking only for `validation_held_out` edits, over scenes of their own)."""

    train_scenes: np.ndarray
    train_intents: list[dict]
    train_triplets: list[dict]
    train_captions: list[dict]
    validation_held_out: frozenset = frozenset()
    validation_scenes: np.ndarray | None = None
    validation_intents: list[dict] = field(default_factory=list)


def build_test_part(size: str = "default", seed: int = 0, progress: bool = False) -> TestPart:
    """Both test splits, from their own random streams: the same whether or not a train split follows."""
    from cir_demo.utils.names import lookup

    cfg = lookup("world size", size, SIZES)
    t0 = time.perf_counter()
    timings = {}

    held = held_out_edits(cfg.fold)
    # ---- test splits: in-distribution (edits and wordings train also has) and compositional
    # (held-out edits in held-out wordings); one corpus holds both, judged exhaustively for each.
    rng = _rng(seed, "test")
    with template_pool("seen"):
        planted = plant_split(rng, scaled_quotas(cfg.test_quota_scale), cfg, progress, held=held, mode="avoid")
    crng = _rng(seed, "compositional")
    with template_pool("held_out"):
        cplanted = plant_split(
            crng, scaled_quotas(cfg.compositional_quota_scale), cfg, progress, held=held, mode="require"
        )
    all_scenes = planted.scenes + cplanted.scenes
    all_refs = planted.refs + cplanted.refs
    order = list(range(len(all_scenes)))
    rng.shuffle(order)  # corpus order must not reveal which scenes were planted for which intent
    corpus = [all_scenes[i] for i in order]
    corpus_ids = [corpus_id(i) for i in range(len(corpus))]
    corpus_table = scenes_to_table(corpus)
    refs_table = scenes_to_table(all_refs)
    timings["test_plant_s"] = time.perf_counter() - t0
    _progress(
        progress,
        f"test splits: {len(planted.drafts)} in-distribution and {len(cplanted.drafts)} compositional "
        f"intents, {len(corpus)} corpus images, {len(all_refs)} references",
    )

    test_intents = _judged(planted, corpus_table, corpus_ids, 0, "wg", _rng(seed, "test-judge"))
    test_queries = query_records(test_intents)
    comp_intents = _judged(
        cplanted, corpus_table, corpus_ids, len(planted.refs), "wn", _rng(seed, "compositional-judge")
    )
    comp_queries = query_records(comp_intents, prefix="wn")
    timings["test_judge_s"] = time.perf_counter() - t0 - timings["test_plant_s"]
    test_captions = _test_captions(cfg, _rng(seed, "test-captions"), corpus, corpus_ids)
    return TestPart(
        size,
        seed,
        corpus_table,
        refs_table,
        test_intents,
        test_queries,
        test_captions,
        comp_intents,
        comp_queries,
        held,
        timings,
        signatures={s.signature() for s in corpus} | {s.signature() for s in all_refs},
        targets=frozenset(frozenset(d.constraints) for d in planted.drafts + cplanted.drafts),
        compositional_texts=frozenset(t for d in cplanted.drafts for t in d.texts),
        asked_edits=frozenset(edit_of(*draft_edit(d)) for d in planted.drafts + cplanted.drafts) - {None},
    )


def build_world(
    size: str = "default", seed: int = 0, progress: bool = False, test: TestPart | None = None
) -> BuiltWorld:
    """The whole world: the test part (`test`, when already built) and the train split planted around it."""
    from .captions import image_captions  # local: keeps module import light

    from cir_demo.utils.names import lookup

    cfg = lookup("world size", size, SIZES)
    t0 = time.perf_counter()
    test = test or build_test_part(size, seed, progress)
    timings = dict(test.timings)
    held = test.held_out
    # Edits the train split proper keeps back for its compositional validation split: none that either
    # test split asks for, so choices made on it never looked at a test intent.
    val_held = validation_edits(held, test.asked_edits)
    proper_held = held | val_held

    # ---- train split: its own stream; scenes and targets disjoint from the test split
    t1 = time.perf_counter()
    rng = _rng(seed, "train")
    with template_pool("seen"):
        tplanted = plant_split(
            rng,
            scaled_quotas(cfg.train_quota_scale),
            cfg,
            progress,
            forbidden_targets=test.targets,
            held=proper_held,
            mode="avoid",
            forbidden_texts=test.compositional_texts,
            repair_scenes=True,
        )
    # Top up with random scenes to the minimum size, drop anything seen in the test split, shuffle.
    extra = max(0, cfg.min_train_images - len(tplanted.scenes) - len(tplanted.refs))
    pool = [(s, r) for r, s in enumerate(tplanted.refs)] + [(s, None) for s in tplanted.scenes]
    pool += [(repair(sample_scene(rng), proper_held, rng), None) for _ in range(extra)]
    pool = [(s, r) for s, r in pool if s.signature() not in test.signatures]
    rng.shuffle(pool)
    train_scenes = [s for s, _ in pool]
    train_ids = [train_id(i) for i in range(len(train_scenes))]
    ref_train_id = {r: train_ids[i] for i, (_, r) in enumerate(pool) if r is not None}
    train_table = scenes_to_table(train_scenes)
    _progress(progress, f"train split: {len(tplanted.drafts)} intents, {len(train_scenes)} images")

    train_intents, train_triplets = _train_records(
        tplanted, train_table, train_ids, ref_train_id, _rng(seed, "train-judge")
    )
    cap_rng = _rng(seed, "train-captions")
    train_captions = [
        {"image_id": iid, "captions": image_captions(s, cap_rng)} for iid, s in zip(train_ids, train_scenes)
    ]
    timings["train_s"] = time.perf_counter() - t1
    val_table, val_intents = _validation_split(
        cfg, seed, test, val_held, train_table, train_ids, train_intents, progress
    )
    timings["total_s"] = time.perf_counter() - t0
    return BuiltWorld(
        **{**{f.name: getattr(test, f.name) for f in fields(TestPart)}, "timings": timings},
        train_scenes=train_table,
        train_intents=train_intents,
        train_triplets=train_triplets,
        train_captions=train_captions,
        validation_held_out=val_held,
        validation_scenes=val_table,
        validation_intents=val_intents,
    )


def validation_id(i: int) -> str:
    return f"w-va-{i:06d}"


def _validation_split(cfg, seed, test: TestPart, val_held, train_table, train_ids, train_intents, progress):
    """The train split's compositional validation split, from its own stream: intents asking only for
    `val_held` edits, worded with the train templates but no paraphrase a train intent uses, over scenes
    of their own (references, planted positives and near misses; none seen in the test splits), judged
    over the train images and those scenes together. Its scenes may show the validation edits; the
    test-held-out combinations stay redrawn, as in every train scene."""
    vrng = _rng(seed, "validation")
    train_texts = frozenset(t for it in train_intents for t in it["paraphrases"])
    with template_pool("seen"):
        vplanted = plant_split(
            vrng,
            scaled_quotas(cfg.validation_quota_scale),
            cfg,
            progress,
            forbidden_targets=test.targets,
            held=val_held,
            mode="require",
            forbidden_texts=test.compositional_texts | train_texts,
            repair_scenes=True,
            repair_held=test.held_out,
        )
    pool = [(s, r) for r, s in enumerate(vplanted.refs)] + [(s, None) for s in vplanted.scenes]
    pool = [(s, r) for s, r in pool if s.signature() not in test.signatures]
    vrng.shuffle(pool)
    val_table = scenes_to_table([s for s, _ in pool])
    val_ids = [validation_id(i) for i in range(len(pool))]
    ref_val_id = {r: val_ids[i] for i, (_, r) in enumerate(pool) if r is not None}
    gallery = np.concatenate([train_table, val_table])
    gallery_ids = list(train_ids) + val_ids
    intents, _ = _train_records(vplanted, gallery, gallery_ids, ref_val_id, _rng(seed, "validation-judge"), "va-i")
    _progress(progress, f"validation split: {len(intents)} intents, {len(val_ids)} images of its own")
    return val_table, intents

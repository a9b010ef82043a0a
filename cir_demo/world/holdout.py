"""The compositional hold-out: edits and wordings that no train intent, caption or image contains.

An *edit* is the attribute value an instruction asks for on an item type ("make it red" on a
coat: `("coat", "color", "red")`). The held-out edits are drawn once per *fold*, the same for every
world seed of that fold: for every attribute an instruction can change, about a third of the item
types keep one value back (CLEVR-CoGenT's swapped colour-shape conditions, on every attribute). The
folds' sets are disjoint: fold 0 is the shipped models', and its edits informed design choices (the
judge's ranking rule among them); fold 1's were first asked of models trained on fold 1's train split.
One set for all worlds of a fold because the shipped models, trained on one world's train split, are evaluated on other
worlds' test splits: a held-out edit must be held out of every train split. Train images never show a held-out
combination (so no train caption names it), no train intent asks for one, and the compositional
test split asks for nothing else. The in-distribution test split asks for none of them either.

Wordings: wherever `intent_templates.json` offers a form several alternative templates, the last
one is held out: only the compositional split uses it.

The train split holds out edits of its own for a *compositional validation split* (`validation_edits`):
drawn per world among the edits neither test split asks for, so a model's choices can be made on new
compositions without looking at either test split.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import random
from typing import Iterable, Iterator

from . import attributes as A

# Attributes whose values an instruction asks for, and the values that may be held out (never the
# "nothing there" values: a train set without any plain-background scenes would be another world).
_PERSON_ONLY = ("pose", "hat", "bag", "glasses")


def _holdable_values(attr: str, type_name: str) -> tuple:
    if attr in ("pattern", "material", "shape"):
        return A.ALLOWED[type_name][attr + "s"]
    if attr in ("hat", "bag", "glasses"):
        return (True,)
    if attr == "count":
        return (2, 3)
    if attr == "secondary":
        return A.SECONDARIES[1:]
    if attr == "relation":
        return ("left", "right")
    if attr == "pose":
        return A.POSES[1:]
    if attr == "type":
        return tuple(t for t in A.TYPES_BY_DOMAIN[A.TYPE_DOMAIN[type_name]] if t != type_name)
    return A.CATEGORICAL[attr]


HOLDABLE = (
    "color",
    "pattern",
    "material",
    "shape",
    "type",
    "style",
    "view",
    "place",
    "time",
    "weather",
    "secondary",
    "relation",
    "count",
    "pose",
    "hat",
    "bag",
    "glasses",
)
TYPE_FRACTION = 1 / 3


HOLDOUT_STREAM = "cir-world/holdout/0"  # fold 0's draw, the shipped models' (see the module docstring)
FOLDS = (0, 1)  # the folds a world size may name (generate.SIZES: "default" is fold 0, "default-fold1" fold 1)


@functools.lru_cache(maxsize=None)
def held_out_edits(fold: int = 0) -> frozenset[tuple]:
    """The (item type, attribute, value) triples held out of training in every world of `fold`.

    Fold 0 is the draw the shipped models were trained around. Fold k > 0 is drawn from its own stream
    among the edits no lower fold holds out, so the folds are disjoint: a model trained on fold k's train
    split, which shows the other folds' edits, meets fold k's as new."""
    if fold not in FOLDS:
        raise ValueError(f"held-out fold must be one of {', '.join(map(str, FOLDS))}, got {fold!r}")
    taken = frozenset().union(*(held_out_edits(k) for k in range(fold)))
    rng = random.Random(HOLDOUT_STREAM if fold == 0 else f"cir-world/holdout/fold/{fold}")
    held = set()
    for attr in HOLDABLE:
        types = [t for t in A.TYPES if attr not in _PERSON_ONLY or A.TYPE_DOMAIN[t] == "fashion"]
        # A type keeps a value back only where it has another one left to learn from.
        types = [t for t in types if len(_holdable_values(attr, t)) >= 2 or attr in ("hat", "bag", "glasses")]
        n = max(1, round(TYPE_FRACTION * len(types)))  # the same number in every fold
        free = {t: [v for v in _holdable_values(attr, t) if (t, attr, v) not in taken] for t in types}
        types = [t for t in types if free[t]]
        for t in sorted(rng.sample(types, min(n, len(types)))):
            held.add((t, attr, rng.choice(free[t])))
    return frozenset(held)


VALIDATION_STREAM = "cir-world/holdout/validation/0"
VALIDATION_TYPE_FRACTION = 1 / 3


def validation_edits(held: frozenset, asked: frozenset) -> frozenset[tuple]:
    """The (item type, attribute, value) triples the train split proper never shows, for its
    compositional validation split: for every attribute, about a third of the item types keep back one
    value that is neither held out of training (`held`) nor asked for by a test split (`asked`), only
    where the type has another value left to learn from."""
    rng = random.Random(VALIDATION_STREAM)
    out = set()
    for attr in HOLDABLE:
        types = [t for t in A.TYPES if attr not in _PERSON_ONLY or A.TYPE_DOMAIN[t] == "fashion"]
        choices = {}
        for t in types:
            values = [v for v in _holdable_values(attr, t) if (t, attr, v) not in held]
            free = [v for v in values if (t, attr, v) not in asked]
            if free and (len(values) >= 2 or attr in ("hat", "bag", "glasses")):
                choices[t] = free
        eligible = sorted(choices)
        if not eligible:
            continue
        for t in sorted(rng.sample(eligible, max(1, round(VALIDATION_TYPE_FRACTION * len(eligible))))):
            out.add((t, attr, rng.choice(choices[t])))
    return frozenset(out)


def edit_of(ref_type: str, focus: str, op: str, value) -> tuple | None:
    """The held-out-able edit an intent's focus constraint asks for (None for a set of values)."""
    if op == "in":
        return None  # "a warmer colour" asks for a family, which train sees on every type
    if focus in ("hat", "bag", "glasses"):
        return (ref_type, focus, True)  # adding and removing an accessory are the same combination
    return (ref_type, focus, value)


def draft_edit(draft) -> list:
    """[item type, focus attribute, op, value]: what an intent asks for, as its record stores it."""
    attr, op, value = next(c for c in reversed(draft.constraints) if c.attr == draft.focus).to_json()
    return [draft.refs[0].type, attr, op, value]


def draft_touches(held: frozenset, draft) -> bool:
    return touches(held, *draft_edit(draft))


def touches(held: frozenset, ref_type: str, focus: str, op: str, value) -> bool:
    edit = edit_of(ref_type, focus, op, value)
    return edit is not None and edit in held


def offending(scene, held: frozenset) -> list[str]:
    """The attributes of `scene` whose value on its type is held out."""
    return [attr for attr in HOLDABLE if attr != "type" and (scene.type, attr, getattr(scene, attr)) in held]


def repair(scene, held: frozenset, rng: random.Random, fixed: Iterable[str] = ()):
    """`scene` with every held-out combination redrawn among the type's other values; None when a
    held-out value sits in an attribute listed in `fixed` (a constraint the scene must keep)."""
    bad = offending(scene, held)
    if not bad:
        return scene
    fixed = set(fixed)
    changes = {}
    for attr in bad:
        if attr in fixed:
            return None
        current = getattr(scene, attr)
        if attr in ("hat", "bag", "glasses"):
            options = [False]
        else:
            options = [
                v for v in _holdable_values(attr, scene.type) if v != current and (scene.type, attr, v) not in held
            ]
            if attr == "count":
                options.append(1)
        if not options:
            return None
        changes[attr] = rng.choice(options)
    return scene.replace(**changes)


# Which alternatives of a template form a split may draw: all of them (outside world generation),
# all but the held-out last one (train and the in-distribution test split), or only that one.
_TEMPLATE_POOL: contextvars.ContextVar[str] = contextvars.ContextVar("template_pool", default="all")
TEMPLATE_POOLS = ("all", "seen", "held_out")


@contextlib.contextmanager
def template_pool(pool: str) -> Iterator[None]:
    if pool not in TEMPLATE_POOLS:
        raise ValueError(f"template pool must be one of {', '.join(TEMPLATE_POOLS)}, got {pool!r}")
    token = _TEMPLATE_POOL.set(pool)
    try:
        yield
    finally:
        _TEMPLATE_POOL.reset(token)


def pool_alternatives(alternatives: list) -> list:
    pool = _TEMPLATE_POOL.get()
    if len(alternatives) < 2 or pool == "all":
        return alternatives
    return alternatives[:-1] if pool == "seen" else alternatives[-1:]


def split_overlaps(intents: list[dict], train_intents: list[dict], train_table, ref_table, held: frozenset) -> dict:
    """What a test split shares with train: its query strings among train paraphrases, its reference
    items (type, colour, pattern, material, shape) among train images, its edits among train intents'
    edits, and its held-out edits among train images."""
    from .scene import scene_from_row

    train_texts = {t for it in train_intents for t in it["paraphrases"]}
    train_edits = {tuple(map(_hashable, it["edit"])) for it in train_intents}
    train_items = {tuple(int(row[f]) for f in A.ITEM_FIELDS) for row in train_table}
    train_combos = {(t, attr, v) for row in train_table for t, attr, v in _combos(scene_from_row(row))}
    texts = [t for it in intents for t in it["paraphrases"]]
    ref_rows = sorted({int(r[6:]) for it in intents for r in it["reference_ids"]})
    items = [tuple(int(ref_table[i][f]) for f in A.ITEM_FIELDS) for i in ref_rows]
    edits = [tuple(map(_hashable, it["edit"])) for it in intents]
    asked = {edit_of(*e) for e in edits} - {None}
    return {
        "query_strings": len(texts),
        "query_strings_in_train": sum(t in train_texts for t in texts),
        "reference_items": len(items),
        "reference_items_in_train_images": sum(i in train_items for i in items),
        "intents": len(edits),
        "intent_edits_in_train_intents": sum(e in train_edits for e in edits),
        "held_out_edits_asked": len(asked & held),
        "held_out_edits_in_train_images": len(asked & held & train_combos),
    }


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def _combos(scene) -> Iterator[tuple]:
    for attr in HOLDABLE:
        if attr != "type":
            yield scene.type, attr, getattr(scene, attr)

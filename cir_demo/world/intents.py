"""Intents: what a query asks for, as constraints over scene graphs, with six paraphrases.

An intent kind (e.g. `swap_color`) knows which PinPoint intent category and EDIR edit
subcategory it belongs to, which reference scenes it applies to, and how to turn a
reference into a target (a tuple of `Constraint`) plus six instructions that share it.

"This dress" means the item's identity: type, colour, pattern, material and shape
(`ITEM_FIELDS`). An edit changes, negates or adds exactly the attribute it names and keeps
the identity; the place, the person, the time and so on stay free unless the edit is about them.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from . import attributes as A
from . import phrases as P
from .holdout import pool_alternatives
from .scene import Constraint, Scene, sample_scene

CATEGORIES = ("Swap", "Negation", "Composition", "Context Fit", "Complement", "Explore")
EDIR_SUBCATEGORIES = (
    "color",
    "material",
    "shape",
    "texture",
    "addition",
    "remove",
    "replace",
    "count",
    "spatial",
    "action",
    "viewpoint",
    "style",
    "time",
    "weather",
    "complex",
)

# The six paraphrase forms of every intent, in query order, with their PinPoint-style flags.
FORMS = ("keywords", "concise", "imperative", "question", "detailed", "detailed_imperative")
FORM_FLAGS = {
    "keywords": dict(is_question=False, is_imperative=False),
    "concise": dict(is_question=False, is_imperative=False),
    "imperative": dict(is_question=False, is_imperative=True),
    "question": dict(is_question=True, is_imperative=False),
    "detailed": dict(is_question=False, is_imperative=False),
    "detailed_imperative": dict(is_question=False, is_imperative=True),
}


def length_category(text: str) -> str:
    """short (<= 6 words), medium (7-15) or long (16+): PinPoint's token-count bounds."""
    n = len(text.split())
    return "short" if n <= 6 else ("medium" if n <= 15 else "long")


@dataclass(frozen=True)
class IntentDraft:
    """A built intent before judging: references, target and the six instructions."""

    kind: str
    category: str
    subcategory: str
    domain: str
    refs: tuple[Scene, ...]
    constraints: tuple[Constraint, ...]
    focus: str  # the attribute the instruction changes, negates or adds
    texts: tuple[str, ...]  # one per FORMS entry
    prefer_violation: object = None  # the reference's own value of the focus attribute (the ideal near miss)


@dataclass(frozen=True)
class Kind:
    name: str
    category: str
    subcategory: str
    applies: Callable[[Scene], bool]
    build: Callable[..., IntentDraft | None]
    domains: tuple[str, ...] = A.DOMAINS
    n_refs: int = 1


def core(ref: Scene, exclude: Sequence[str] = ()) -> list[Constraint]:
    """Equality constraints keeping the reference item's identity, minus `exclude`."""
    return [Constraint(f, "eq", getattr(ref, f)) for f in A.ITEM_FIELDS if f not in exclude]


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


_TEMPLATES_FILE = Path(__file__).with_name("intent_templates.json")


@lru_cache(maxsize=1)
def intent_templates() -> dict[str, list]:
    """The instruction templates (`intent_templates.json`): per intent kind (or `kind/variant`, where the
    sentences differ in form), one entry per FORMS entry: a template, or a list of templates of which one
    is drawn at random. Placeholders name the reference's words (`_Words`) and the builder's values."""
    with _TEMPLATES_FILE.open(encoding="utf-8") as fh:
        table = json.load(fh)
    for key, forms in table.items():
        if len(forms) != len(FORMS):
            raise ValueError(f"{_TEMPLATES_FILE}: {key!r} has {len(forms)} templates, expected {len(FORMS)}")
    return table


def _texts(key: str, rng: random.Random, w: "_Words", **values) -> tuple[str, ...]:
    """The six instructions of template entry `key`, with the reference's words and `values` filled in;
    a list of alternatives draws one with `rng`, in form order."""
    words = {**vars(w), **values}
    return tuple(
        rng.choice([t.format_map(words) for t in pool_alternatives(form)])
        if isinstance(form, list)
        else form.format_map(words)
        for form in intent_templates()[key]
    )


def _draft(kind: "Kind", ref_or_refs, constraints, focus, texts, prefer=None) -> IntentDraft:
    refs = tuple(ref_or_refs) if isinstance(ref_or_refs, (list, tuple)) else (ref_or_refs,)
    assert len(texts) == len(FORMS)
    return IntentDraft(
        kind.name,
        kind.category,
        kind.subcategory,
        refs[0].domain,
        refs,
        tuple(constraints),
        focus,
        tuple(_cap(P.tidy_articles(t.strip())) for t in texts),
        prefer,
    )


class _Words:
    """Reference-derived words used by the templates (placeholders of the same names)."""

    def __init__(self, ref: Scene):
        t = ref.type
        self.t = t
        self.N = P.noun(t)
        self.THIS = P.this(t)
        self.IT = P.it(t)
        plural = t in P.PLURAL_NOUNS
        self.DOES = "do" if plural else "does"
        self.this = "these" if plural else "this"
        self.ITSELF = "themselves" if plural else "itself"
        self.ITS = "their" if plural else "its"
        self.IT_IS = "they are" if plural else "it is"
        self.PRONOUN = "they" if plural else "it"
        self.ONE = "pair" if plural else "one"
        self.full = P.item_phrase(t, ref.color, ref.pattern, None, None)
        self.FULL_OR_PAIR = "pair" if plural else self.full
        self.person = ref.domain == "fashion"
        self.MATERIAL_WORD = "fabric" if self.person else "finish"
        self.LENGTH_WORD = "length" if self.person else "shape"
        # Who/what the scene is about, for edits on the whole picture.
        self.SUBJ = f"the person in {self.THIS}" if self.person else self.THIS
        self.LOOK = "this look" if self.person else self.THIS
        self.domain = ref.domain


# --------------------------------------------------------------------------- swap
def _swap_color(kind, ref, rng, **_):
    new = rng.choice([c for c in A.COLORS if c != ref.color])
    texts = _texts("swap_color", rng, _Words(ref), new=new, old=ref.color, keep=P.keep_phrase(ref.domain, "color"))
    return _draft(kind, ref, core(ref, ["color"]) + [Constraint("color", "eq", new)], "color", texts, ref.color)


def _swap_material(kind, ref, rng, **_):
    new = rng.choice([m for m in A.ALLOWED[ref.type]["materials"] if m != ref.material])
    texts = _texts(
        "swap_material",
        rng,
        _Words(ref),
        adj=P.MATERIAL_ADJ[new],
        phr=P.MATERIAL_PHRASE[new],
        old_adj=P.MATERIAL_ADJ[ref.material],
        old_phr=P.MATERIAL_PHRASE[ref.material],
        keep=P.keep_phrase(ref.domain, "material"),
    )
    return _draft(
        kind, ref, core(ref, ["material"]) + [Constraint("material", "eq", new)], "material", texts, ref.material
    )


def _swap_shape(kind, ref, rng, **_):
    new = next(s for s in A.ALLOWED[ref.type]["shapes"] if s != ref.shape)
    texts = _texts(
        "swap_shape", rng, _Words(ref), new=new, old=ref.shape, color=ref.color, keep=P.keep_phrase(ref.domain, "shape")
    )
    return _draft(kind, ref, core(ref, ["shape"]) + [Constraint("shape", "eq", new)], "shape", texts, ref.shape)


def _swap_pattern(kind, ref, rng, **_):
    new = rng.choice([p for p in A.ALLOWED[ref.type]["patterns"] if p != ref.pattern])
    key = "swap_pattern/plain" if new == "plain" else "swap_pattern"
    texts = _texts(
        key,
        rng,
        _Words(ref),
        adj=P.PATTERN_ADJ[new],
        phr=P.PATTERN_PHRASE[new],
        old_adj=P.PATTERN_ADJ[ref.pattern],
        old_phr=P.PATTERN_PHRASE[ref.pattern],
        keep=P.keep_phrase(ref.domain, "pattern"),
    )
    return _draft(kind, ref, core(ref, ["pattern"]) + [Constraint("pattern", "eq", new)], "pattern", texts, ref.pattern)


def _replace_candidates(ref: Scene) -> list[str]:
    return [
        t
        for t in A.TYPES_BY_DOMAIN[ref.domain]
        if t != ref.type and ref.pattern in A.ALLOWED[t]["patterns"] and ref.material in A.ALLOWED[t]["materials"]
    ]


def _swap_type(kind, ref, rng, **_):
    new = rng.choice(_replace_candidates(ref))
    new_n = P.noun(new)
    texts = _texts(
        "swap_type",
        rng,
        _Words(ref),
        new_n=new_n,
        a_new=P.article(new_n),
        color=ref.color,
        keep=P.keep_phrase(ref.domain, ()),
    )
    return _draft(kind, ref, [Constraint("type", "eq", new)] + core(ref, ["type"]), "type", texts, ref.type)


def _swap_style(kind, ref, rng, **_):
    new = rng.choice([s for s in A.STYLES if s != ref.style])
    texts = _texts(
        "swap_style",
        rng,
        _Words(ref),
        phr=P.STYLE_PHRASE[new],
        short=P.STYLE_SHORT[new],
        old_phr=P.STYLE_PHRASE[ref.style],
    )
    return _draft(kind, ref, core(ref) + [Constraint("style", "eq", new)], "style", texts, ref.style)


def _swap_view(kind, ref, rng, **_):
    new = "wide" if ref.view == "close-up" else "close-up"
    texts = _texts(f"swap_view/{new}", rng, _Words(ref))
    return _draft(kind, ref, core(ref) + [Constraint("view", "eq", new)], "view", texts, ref.view)


# --------------------------------------------------------------------------- negation
def _neg_color(kind, ref, rng, **_):
    old = ref.color
    texts = _texts("neg_color", rng, _Words(ref), old=old, keep=P.keep_phrase(ref.domain, "color"))
    return _draft(kind, ref, core(ref, ["color"]) + [Constraint("color", "ne", old)], "color", texts, old)


def _neg_material(kind, ref, rng, **_):
    texts = _texts(
        "neg_material",
        rng,
        _Words(ref),
        old=P.MATERIAL_ADJ[ref.material],
        old_phr=P.MATERIAL_PHRASE[ref.material],
        color=ref.color,
    )
    return _draft(
        kind,
        ref,
        core(ref, ["material"]) + [Constraint("material", "ne", ref.material)],
        "material",
        texts,
        ref.material,
    )


def _neg_pattern(kind, ref, rng, **_):
    texts = _texts(
        "neg_pattern",
        rng,
        _Words(ref),
        old_adj=P.PATTERN_ADJ[ref.pattern],
        old_phr=P.PATTERN_PHRASE[ref.pattern],
        color=ref.color,
    )
    return _draft(
        kind, ref, core(ref, ["pattern"]) + [Constraint("pattern", "ne", ref.pattern)], "pattern", texts, ref.pattern
    )


def _worn(ref: Scene) -> list[str]:
    return [a for a in A.ACCESSORIES if getattr(ref, a)]


def _remove_acc(kind, ref, rng, **_):
    acc = rng.choice(_worn(ref))
    texts = _texts(
        "remove_accessory",
        rng,
        _Words(ref),
        an=P.ACCESSORY_NOUN[acc],
        short=P.ACCESSORY_SHORT[acc],
        a="" if acc == "glasses" else "a ",
    )
    return _draft(kind, ref, core(ref) + [Constraint(acc, "eq", False)], acc, texts, True)


def _remove_sec(kind, ref, rng, **_):
    sec = ref.secondary
    texts = _texts("remove_object", rng, _Words(ref), sn=P.SECONDARY_NOUN[sec], short=P.SECONDARY_SHORT[sec])
    return _draft(kind, ref, core(ref) + [Constraint("secondary", "ne", sec)], "secondary", texts, sec)


# --------------------------------------------------------------------------- composition
def _donor(rng: random.Random, pred: Callable[[Scene], bool], domain: str | None = None) -> Scene | None:
    for _ in range(400):
        s = sample_scene(rng, domain=domain)
        if pred(s):
            return s
    return None


def _compose(kind, ref, rng, donor: Scene | None, attr: str, keep_identity_but: Sequence[str] = (), **values):
    """A two-image intent: the item of <img1> with the `attr` of the donor (<img2>): its value, or for an
    accessory, wearing it (the reference does not); None without a donor."""
    if donor is None:
        return None
    texts = _texts(kind.name, rng, _Words(ref), dn=P.noun(donor.type), **values)
    value = True if attr in A.ACCESSORIES else getattr(donor, attr)
    prefer = False if attr in A.ACCESSORIES else getattr(ref, attr)
    return _draft(
        kind, (ref, donor), core(ref, keep_identity_but) + [Constraint(attr, "eq", value)], attr, texts, prefer
    )


def _comp_color(kind, ref, rng, **_):
    d = _donor(rng, lambda s: s.color != ref.color)
    return _compose(kind, ref, rng, d, "color", ["color"], keep=P.keep_phrase(ref.domain, "color"))


def _comp_pattern(kind, ref, rng, **_):
    pats = A.ALLOWED[ref.type]["patterns"]
    d = _donor(rng, lambda s: s.pattern != ref.pattern and s.pattern != "plain" and s.pattern in pats)
    return _compose(kind, ref, rng, d, "pattern", ["pattern"])


def _comp_place(kind, ref, rng, **_):
    return _compose(kind, ref, rng, _donor(rng, lambda s: s.place != ref.place), "place")


def _comp_style(kind, ref, rng, **_):
    return _compose(kind, ref, rng, _donor(rng, lambda s: s.style != ref.style), "style")


def _comp_acc(kind, ref, rng, **_):
    missing = [a for a in A.ACCESSORIES if not getattr(ref, a)]
    acc = rng.choice(missing)
    # A donor wearing exactly that one accessory, so "the accessory of <img2>" is unambiguous.
    d = _donor(rng, lambda s: getattr(s, acc) and len(_worn(s)) == 1, domain="fashion")
    return _compose(kind, ref, rng, d, acc)


# --------------------------------------------------------------------------- context fit
def _ctx(attr: str, phrase: dict, short: dict):
    def build(kind, ref, rng, **_):
        new = rng.choice([v for v in A.CATEGORICAL[attr] if v != getattr(ref, attr)])
        texts = _texts(
            "context",
            rng,
            _Words(ref),
            phr=phrase[new],
            sh=short[new],
            verb="put" if attr == "place" else "picture",
            keep=P.keep_phrase(ref.domain, ()),
        )
        return _draft(kind, ref, core(ref) + [Constraint(attr, "eq", new)], attr, texts, getattr(ref, attr))

    return build


# --------------------------------------------------------------------------- complement
def _add_acc(kind, ref, rng, **_):
    acc = rng.choice([a for a in A.ACCESSORIES if not getattr(ref, a)])
    an = P.ACCESSORY_NOUN[acc]
    texts = _texts(
        "add_accessory", rng, _Words(ref), short=P.ACCESSORY_SHORT[acc], a_an=an if acc == "glasses" else P.article(an)
    )
    return _draft(kind, ref, core(ref) + [Constraint(acc, "eq", True)], acc, texts, False)


def _add_sec(kind, ref, rng, **_):
    sec = rng.choice(A.SECONDARIES[1:])
    texts = _texts("add_object", rng, _Words(ref), sn=P.SECONDARY_NOUN[sec], short=P.SECONDARY_SHORT[sec])
    return _draft(kind, ref, core(ref) + [Constraint("secondary", "eq", sec)], "secondary", texts, ref.secondary)


# --------------------------------------------------------------------------- explore
def _count(kind, ref, rng, **_):
    new = rng.choice([c for c in A.COUNTS if c != ref.count])
    w = _Words(ref)
    key = f"explore_count/{'people' if w.person else 'objects'}/{'many' if new > 1 else 'one'}"
    texts = _texts(key, rng, w, num=P.COUNT_WORD[new], nouns=P.noun(ref.type, plural=new > 1))
    return _draft(kind, ref, core(ref) + [Constraint("count", "eq", new)], "count", texts, ref.count)


def _relation(kind, ref, rng, **_):
    new = "left" if ref.relation == "right" else "right"
    texts = _texts(
        "explore_spatial",
        rng,
        _Words(ref),
        new=new,
        old=ref.relation,
        sn=P.SECONDARY_NOUN[ref.secondary],
        short=P.SECONDARY_SHORT[ref.secondary],
    )
    cons = core(ref) + [Constraint("secondary", "eq", ref.secondary), Constraint("relation", "eq", new)]
    return _draft(kind, ref, cons, "relation", texts, ref.relation)


def _action(kind, ref, rng, **_):
    new = rng.choice([p for p in A.POSES[1:] if p != ref.pose])
    sh = P.POSE_SHORT[new]
    texts = _texts(
        "explore_action",
        rng,
        _Words(ref),
        phr=P.POSE_PHRASE[new],
        sh=sh,
        do=sh if new != "sitting" else "sit down",
        old_phr=P.POSE_PHRASE[ref.pose],
    )
    return _draft(kind, ref, core(ref) + [Constraint("pose", "eq", new)], "pose", texts, ref.pose)


def _family(kind, ref, rng, **_):
    old_fam = A.COLOR_FAMILY_OF[ref.color]
    fam = rng.choice([f for f in A.COLOR_FAMILIES if f != old_fam])
    members = A.COLOR_FAMILIES[fam]
    texts = _texts(
        "explore_color_family",
        rng,
        _Words(ref),
        fam=fam,
        phr=P.FAMILY_PHRASE[fam],
        listed=", ".join(members[:-1]) + " or " + members[-1],
        keep=P.keep_phrase(ref.domain, "color"),
    )
    return _draft(kind, ref, core(ref, ["color"]) + [Constraint("color", "in", members)], "color", texts, ref.color)


# --------------------------------------------------------------------------- registry
def _always(_):
    return True


def _fashion(s: Scene) -> bool:
    return s.domain == "fashion"


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("swap_color", "Swap", "color", _always, _swap_color),
        Kind("swap_material", "Swap", "material", lambda s: len(A.ALLOWED[s.type]["materials"]) > 1, _swap_material),
        Kind("swap_shape", "Swap", "shape", _always, _swap_shape),
        Kind("swap_pattern", "Swap", "texture", lambda s: len(A.ALLOWED[s.type]["patterns"]) > 1, _swap_pattern),
        Kind("swap_type", "Swap", "replace", lambda s: bool(_replace_candidates(s)), _swap_type),
        Kind("swap_style", "Swap", "style", _always, _swap_style),
        Kind("swap_view", "Swap", "viewpoint", _always, _swap_view),
        Kind("neg_color", "Negation", "color", _always, _neg_color),
        Kind("neg_material", "Negation", "material", _always, _neg_material),
        Kind("neg_pattern", "Negation", "texture", lambda s: s.pattern != "plain", _neg_pattern),
        Kind(
            "remove_accessory",
            "Negation",
            "remove",
            lambda s: s.domain == "fashion" and bool(_worn(s)),
            _remove_acc,
            ("fashion",),
        ),
        Kind("remove_object", "Negation", "remove", lambda s: s.secondary != "none", _remove_sec),
        Kind("compose_color", "Composition", "complex", _always, _comp_color, n_refs=2),
        Kind(
            "compose_pattern",
            "Composition",
            "complex",
            lambda s: len(A.ALLOWED[s.type]["patterns"]) > 2,
            _comp_pattern,
            n_refs=2,
        ),
        Kind("compose_place", "Composition", "complex", _always, _comp_place, n_refs=2),
        Kind("compose_style", "Composition", "complex", _always, _comp_style, n_refs=2),
        Kind(
            "compose_accessory",
            "Composition",
            "complex",
            lambda s: s.domain == "fashion" and len(_worn(s)) < 3,
            _comp_acc,
            ("fashion",),
            n_refs=2,
        ),
        Kind("context_place", "Context Fit", "spatial", _always, _ctx("place", P.PLACE_PHRASE, P.PLACE_SHORT)),
        Kind("context_time", "Context Fit", "time", _always, _ctx("time", P.TIME_PHRASE, P.TIME_SHORT)),
        Kind("context_weather", "Context Fit", "weather", _always, _ctx("weather", P.WEATHER_PHRASE, P.WEATHER_SHORT)),
        Kind(
            "add_accessory",
            "Complement",
            "addition",
            lambda s: s.domain == "fashion" and len(_worn(s)) < 3,
            _add_acc,
            ("fashion",),
        ),
        Kind("add_object", "Complement", "addition", lambda s: s.secondary == "none", _add_sec),
        Kind("explore_count", "Explore", "count", _always, _count),
        Kind("explore_spatial", "Explore", "spatial", lambda s: s.secondary != "none", _relation),
        Kind("explore_action", "Explore", "action", _fashion, _action, ("fashion",)),
        Kind("explore_color_family", "Explore", "color", _always, _family),
    )
}

# Intents per kind in the default world (>= 30 per kind, so every category and
# subcategory has enough for a per-category number; composition ~13% of all).
DEFAULT_QUOTAS = {
    "swap_color": 40,
    "swap_material": 36,
    "swap_shape": 40,
    "swap_pattern": 36,
    "swap_type": 40,
    "swap_style": 40,
    "swap_view": 40,
    "neg_color": 40,
    "neg_material": 32,
    "neg_pattern": 36,
    "remove_accessory": 36,
    "remove_object": 32,
    "compose_color": 26,
    "compose_pattern": 22,
    "compose_place": 24,
    "compose_style": 24,
    "compose_accessory": 24,
    "context_place": 40,
    "context_time": 40,
    "context_weather": 40,
    "add_accessory": 44,
    "add_object": 40,
    "explore_count": 40,
    "explore_spatial": 40,
    "explore_action": 40,
    "explore_color_family": 36,
}


def build_intent(kind_name: str, ref: Scene, rng: random.Random) -> IntentDraft | None:
    kind = KINDS[kind_name]
    if ref.domain not in kind.domains or not kind.applies(ref):
        raise ValueError(f"intent kind {kind_name!r} does not apply to reference {ref}")
    return kind.build(kind, ref, rng)

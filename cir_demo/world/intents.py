"""Intents: what a query asks for, as constraints over scene graphs, with six paraphrases.

An intent kind (e.g. `swap_color`) knows which PinPoint intent category and EDIR edit
subcategory it belongs to, which reference scenes it applies to, and how to turn a
reference into a target (a tuple of `Constraint`) plus six instructions that share it.

"This dress" means the item's identity: type, colour, pattern, material and shape
(`ITEM_FIELDS`). An edit changes, negates or adds exactly the attribute it names and keeps
the identity; the place, the person, the time and so on stay free unless the edit is about them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

from . import attributes as A
from . import phrases as P
from .scene import Constraint, Scene, sample_scene

CATEGORIES = ("Swap", "Negation", "Composition", "Context Fit", "Complement", "Explore")
EDIR_SUBCATEGORIES = ("color", "material", "shape", "texture", "addition", "remove", "replace", "count",
                      "spatial", "action", "viewpoint", "style", "time", "weather", "complex")

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


def _pick(rng: random.Random, *options: str) -> str:
    return rng.choice(options)


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def _draft(kind: "Kind", ref_or_refs, constraints, focus, texts, prefer=None) -> IntentDraft:
    refs = tuple(ref_or_refs) if isinstance(ref_or_refs, (list, tuple)) else (ref_or_refs,)
    assert len(texts) == len(FORMS)
    return IntentDraft(kind.name, kind.category, kind.subcategory, refs[0].domain, refs,
                       tuple(constraints), focus, tuple(_cap(P.tidy_articles(t.strip())) for t in texts), prefer)


class _Words:
    """Reference-derived words used by the templates."""

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
        self.full = P.item_phrase(t, ref.color, ref.pattern, None, None)
        self.person = ref.domain == "fashion"
        # Who/what the scene is about, for edits on the whole picture.
        self.SUBJ = f"the person in {self.THIS}" if self.person else self.THIS
        self.LOOK = "this look" if self.person else self.THIS
        self.domain = ref.domain


# --------------------------------------------------------------------------- swap
def _swap_color(kind, ref, rng, **_):
    new = rng.choice([c for c in A.COLORS if c != ref.color])
    w = _Words(ref)
    keep = P.keep_phrase(ref.domain, "color")
    texts = (
        _pick(rng, f"{w.N} {new}", f"{new} {w.N}"),
        _pick(rng, f"same {w.N} but {new}", f"{w.THIS}, but {new}", f"this {'one' if w.t not in P.PLURAL_NOUNS else 'pair'} in {new}"),
        _pick(rng, f"show me {w.THIS} in {new}.", f"make {w.IT} {new}.", f"change the colour to {new}."),
        _pick(rng, f"can you find {w.THIS} in {new}?", f"do you have {w.THIS} in {new}?", f"is there a {new} version of {w.THIS}?"),
        _pick(rng, f"I want the {new} version of {w.THIS}, keeping {keep}.",
              f"I'm looking for {w.THIS} in {new} instead of {ref.color}, with {keep}."),
        _pick(rng, f"find {w.THIS} exactly as {w.IT_IS}, only with the colour changed from {ref.color} to {new}.",
              f"swap the {ref.color} for {new} but keep everything else about the {w.N}."),
    )
    return _draft(kind, ref, core(ref, ["color"]) + [Constraint("color", "eq", new)], "color", texts, ref.color)


def _swap_material(kind, ref, rng, **_):
    new = rng.choice([m for m in A.ALLOWED[ref.type]["materials"] if m != ref.material])
    w = _Words(ref)
    keep = P.keep_phrase(ref.domain, "material")
    adj, phr = P.MATERIAL_ADJ[new], P.MATERIAL_PHRASE[new]
    texts = (
        _pick(rng, f"{w.N} {adj}", f"{adj} {w.N}"),
        _pick(rng, f"same {w.N}, {adj} instead", f"{w.THIS} but {adj}"),
        _pick(rng, f"show me {w.THIS} with {phr}.", f"make {w.IT} {adj}."),
        _pick(rng, f"is there a {adj} version of {w.THIS}?", f"can I get {w.THIS} with {phr}?"),
        f"I'd like {w.THIS} with {phr} rather than {P.MATERIAL_PHRASE[ref.material]}, keeping {keep}.",
        _pick(rng, f"find the same {w.N} in the same colour, but give it {phr}.",
              f"change the material look of the {w.N} from {P.MATERIAL_ADJ[ref.material]} to {adj}, nothing else."),
    )
    return _draft(kind, ref, core(ref, ["material"]) + [Constraint("material", "eq", new)], "material", texts, ref.material)


def _swap_shape(kind, ref, rng, **_):
    new = next(s for s in A.ALLOWED[ref.type]["shapes"] if s != ref.shape)
    w = _Words(ref)
    keep = P.keep_phrase(ref.domain, "shape")
    what = "length" if w.person else "shape"
    texts = (
        _pick(rng, f"{w.N} {new}", f"{new} {w.N}"),
        _pick(rng, f"same {w.N} but {new}", f"a {new} one like this"),
        _pick(rng, f"show me a {new} version of {w.THIS}.", f"make the {w.N} {new}."),
        _pick(rng, f"do you have {w.THIS} in a {new} {what}?", f"is there a {new} version of {w.THIS}?"),
        f"I want {w.THIS} with a {new} {what} instead of {ref.shape}, keeping {keep}.",
        f"find the {ref.color} {w.N} again, but change its {what} from {ref.shape} to {new}.",
    )
    return _draft(kind, ref, core(ref, ["shape"]) + [Constraint("shape", "eq", new)], "shape", texts, ref.shape)


def _swap_pattern(kind, ref, rng, **_):
    new = rng.choice([p for p in A.ALLOWED[ref.type]["patterns"] if p != ref.pattern])
    w = _Words(ref)
    keep = P.keep_phrase(ref.domain, "pattern")
    adj, phr = P.PATTERN_ADJ[new], P.PATTERN_PHRASE[new]
    with_it = "in plain fabric with no pattern" if new == "plain" else f"with {phr}"
    texts = (
        _pick(rng, f"{w.N} {adj}", f"{adj} {w.N}"),
        _pick(rng, f"same {w.N} but {adj}", f"{w.THIS}, {adj} version"),
        _pick(rng, f"show me {w.THIS} {with_it}.", f"give {w.IT} {phr}." if new != "plain" else f"make {w.IT} plain."),
        f"can you find {w.THIS} {with_it}?",
        f"I'd like {w.THIS} {with_it} instead of {P.PATTERN_PHRASE[ref.pattern]}, keeping {keep}.",
        f"find the same {w.N} but replace the {P.PATTERN_ADJ[ref.pattern]} surface with a {adj} one.",
    )
    return _draft(kind, ref, core(ref, ["pattern"]) + [Constraint("pattern", "eq", new)], "pattern", texts, ref.pattern)


def _replace_candidates(ref: Scene) -> list[str]:
    return [t for t in A.TYPES_BY_DOMAIN[ref.domain] if t != ref.type
            and ref.pattern in A.ALLOWED[t]["patterns"] and ref.material in A.ALLOWED[t]["materials"]]


def _swap_type(kind, ref, rng, **_):
    new = rng.choice(_replace_candidates(ref))
    w = _Words(ref)
    keep = P.keep_phrase(ref.domain, ())
    new_n = P.noun(new)
    a_new = P.article(new_n)
    texts = (
        _pick(rng, f"{ref.color} {new_n} instead", f"{new_n} same {'fabric' if w.person else 'finish'}"),
        _pick(rng, f"{a_new} instead of the {w.N}", f"same look, but {a_new}"),
        _pick(rng, f"swap the {w.N} for {a_new}.", f"replace the {w.N} with {a_new} in the same style."),
        f"could you show me {a_new} made like {w.THIS}?",
        f"I want {a_new} instead of the {w.N}, with {keep}.",
        f"find {a_new} in place of the {w.full}, keeping its colour, pattern, {'fabric and length' if w.person else 'finish and shape'}.",
    )
    return _draft(kind, ref, [Constraint("type", "eq", new)] + core(ref, ["type"]), "type", texts, ref.type)


def _swap_style(kind, ref, rng, **_):
    new = rng.choice([s for s in A.STYLES if s != ref.style])
    w = _Words(ref)
    phr, short = P.STYLE_PHRASE[new], P.STYLE_SHORT[new]
    texts = (
        _pick(rng, f"{w.N} {short}", f"{short} of {w.THIS}"),
        _pick(rng, f"same {w.N}, as {phr}", f"{w.THIS} as {phr}"),
        _pick(rng, f"show {w.THIS} as {phr}.", f"turn this into {phr}."),
        f"can you find {phr} of {w.THIS}?",
        f"I'm after {phr} of the {w.full}, the {w.N} {w.ITSELF} unchanged.",
        f"render the same {w.N} in a {short} style instead of as {P.STYLE_PHRASE[ref.style]}.",
    )
    return _draft(kind, ref, core(ref) + [Constraint("style", "eq", new)], "style", texts, ref.style)


def _swap_view(kind, ref, rng, **_):
    new = "wide" if ref.view == "close-up" else "close-up"
    w = _Words(ref)
    if new == "close-up":
        texts = (
            f"{w.N} close-up",
            _pick(rng, f"closer view of {w.THIS}", f"same {w.N}, zoomed in"),
            _pick(rng, f"zoom in on {w.THIS}.", f"show me a close-up of {w.THIS}."),
            f"do you have a close-up shot of {w.THIS}?",
            f"I want a close-up picture where the {w.full} fills the frame.",
            f"get closer so the same {w.N} is shown up close instead of in a wide shot.",
        )
    else:
        texts = (
            f"{w.N} wide shot",
            _pick(rng, f"wider view of {w.THIS}", f"same {w.N}, zoomed out"),
            _pick(rng, f"zoom out from {w.THIS}.", f"show {w.THIS} from further away."),
            f"can you find a wide shot of {w.THIS}?",
            f"I want a wide picture of the {w.full} with more of the surroundings visible.",
            f"step back and show the same {w.N} in a wide shot instead of a close-up.",
        )
    return _draft(kind, ref, core(ref) + [Constraint("view", "eq", new)], "view", texts, ref.view)


# --------------------------------------------------------------------------- negation
def _neg_color(kind, ref, rng, **_):
    w = _Words(ref)
    old = ref.color
    keep = P.keep_phrase(ref.domain, "color")
    texts = (
        _pick(rng, f"{w.N} not {old}", f"{w.N}, no {old}"),
        _pick(rng, f"same {w.N} but not {old}", f"{w.THIS} in any colour except {old}"),
        _pick(rng, f"show me {w.THIS} in a colour other than {old}.", f"find {w.THIS}, but not in {old}."),
        f"can you find {w.THIS} in something other than {old}?",
        f"I like {w.THIS} but not in {old}; any other colour is fine as long as it has {keep}.",
        f"show the same {w.N} and exclude every {old} one.",
    )
    return _draft(kind, ref, core(ref, ["color"]) + [Constraint("color", "ne", old)], "color", texts, old)


def _neg_material(kind, ref, rng, **_):
    w = _Words(ref)
    old = P.MATERIAL_ADJ[ref.material]
    texts = (
        _pick(rng, f"{w.N} not {old}", f"non-{old} {w.N}"),
        f"same {w.N} but not {old}",
        _pick(rng, f"show me {w.THIS} without the {old} look.", f"find {w.THIS} in anything but a {old} finish."),
        f"is there a version of {w.THIS} that isn't {old}?",
        f"I want {w.this} {ref.color} {w.N} with a different material look; {w.IT_IS.split()[0]} must not be {old}.",
        f"keep the {w.N} the same but avoid {P.MATERIAL_PHRASE[ref.material]}.",
    )
    return _draft(kind, ref, core(ref, ["material"]) + [Constraint("material", "ne", ref.material)], "material", texts, ref.material)


def _neg_pattern(kind, ref, rng, **_):
    w = _Words(ref)
    old_adj, old_phr = P.PATTERN_ADJ[ref.pattern], P.PATTERN_PHRASE[ref.pattern]
    texts = (
        _pick(rng, f"{w.N} no {old_phr}", f"{w.N} without {old_phr}"),
        _pick(rng, f"same {w.N} without the {old_phr}", f"{w.THIS}, minus the {old_phr}"),
        _pick(rng, f"show me {w.THIS} without {old_phr}.", f"remove the {old_phr} from the {w.N}."),
        f"do you have {w.THIS} without {old_phr}?",
        f"I'd like the same {ref.color} {w.N}, but it should not be {old_adj}.",
        f"find {w.THIS} in a version that has no {old_phr}, everything else the same.",
    )
    return _draft(kind, ref, core(ref, ["pattern"]) + [Constraint("pattern", "ne", ref.pattern)], "pattern", texts, ref.pattern)


def _worn(ref: Scene) -> list[str]:
    return [a for a in A.ACCESSORIES if getattr(ref, a)]


def _remove_acc(kind, ref, rng, **_):
    acc = rng.choice(_worn(ref))
    w = _Words(ref)
    an, short = P.ACCESSORY_NOUN[acc], P.ACCESSORY_SHORT[acc]
    texts = (
        _pick(rng, f"{w.N} no {short}", f"{w.N} without {short}"),
        _pick(rng, f"same look without the {an}", f"this outfit, no {short}"),
        _pick(rng, f"remove the {an}.", f"take away the {an}."),
        f"can you show {w.THIS} without the {an}?",
        f"I like the {w.full} but want the person not to have any {an}.",
        f"show the same {w.N} on someone who isn't wearing {'' if acc == 'glasses' else 'a '}{an}.",
    )
    return _draft(kind, ref, core(ref) + [Constraint(acc, "eq", False)], acc, texts, True)


def _remove_sec(kind, ref, rng, **_):
    w = _Words(ref)
    sec = ref.secondary
    sn, short = P.SECONDARY_NOUN[sec], P.SECONDARY_SHORT[sec]
    texts = (
        _pick(rng, f"{w.N} no {short}", f"{w.N} without {short}"),
        _pick(rng, f"same {w.N}, no {short}", f"{w.THIS} without the {short}"),
        _pick(rng, f"remove the {sn}.", f"get rid of the {sn} next to the {w.N}."),
        f"can I see {w.THIS} without the {sn}?",
        f"I want the {w.full} with no {sn} anywhere in the picture.",
        f"show the same {w.N}, but leave out the {sn} beside {w.IT}.",
    )
    return _draft(kind, ref, core(ref) + [Constraint("secondary", "ne", sec)], "secondary", texts, sec)


# --------------------------------------------------------------------------- composition
def _donor(rng: random.Random, pred: Callable[[Scene], bool], domain: str | None = None) -> Scene | None:
    for _ in range(400):
        s = sample_scene(rng, domain=domain)
        if pred(s):
            return s
    return None


def _comp_color(kind, ref, rng, **_):
    d = _donor(rng, lambda s: s.color != ref.color)
    if d is None:
        return None
    w = _Words(ref)
    keep = P.keep_phrase(ref.domain, "color")
    dn = P.noun(d.type)
    texts = (
        _pick(rng, f"<img1> {w.N} <img2> colour", f"<img1> in <img2> colour"),
        f"the {w.N} of <img1> in the colour of <img2>",
        _pick(rng, f"show me the {w.N} from <img1> in the colour of the {dn} in <img2>.",
              f"recolour the {w.N} in <img1> to match <img2>."),
        f"can you find the {w.N} from <img1> in the same colour as <img2>?",
        f"I want the {w.N} shown in <img1>, with {keep}, but in the colour of the {dn} in <img2>.",
        f"take the {w.N} from <img1> and give it the colour of the {dn} from <img2>.",
    )
    return _draft(kind, (ref, d), core(ref, ["color"]) + [Constraint("color", "eq", d.color)], "color", texts, ref.color)


def _comp_pattern(kind, ref, rng, **_):
    pats = A.ALLOWED[ref.type]["patterns"]
    d = _donor(rng, lambda s: s.pattern != ref.pattern and s.pattern != "plain" and s.pattern in pats)
    if d is None:
        return None
    w = _Words(ref)
    dn = P.noun(d.type)
    texts = (
        _pick(rng, f"<img1> {w.N} <img2> pattern", f"<img1> with <img2> pattern"),
        f"the {w.N} of <img1> with the pattern of <img2>",
        _pick(rng, f"put the pattern of the {dn} in <img2> on the {w.N} from <img1>.",
              f"show me the {w.N} from <img1> with the pattern from <img2>."),
        f"is there a version of the {w.N} in <img1> with the pattern of <img2>?",
        f"I'd like the {w.N} from <img1> in its colour and {'fabric' if w.person else 'finish'}, but patterned like the {dn} in <img2>.",
        f"combine the {w.N} of <img1> with the surface pattern seen on the {dn} of <img2>.",
    )
    return _draft(kind, (ref, d), core(ref, ["pattern"]) + [Constraint("pattern", "eq", d.pattern)], "pattern", texts, ref.pattern)


def _comp_place(kind, ref, rng, **_):
    d = _donor(rng, lambda s: s.place != ref.place)
    if d is None:
        return None
    w = _Words(ref)
    texts = (
        _pick(rng, f"<img1> {w.N} in <img2> setting", f"<img1> at <img2> place"),
        f"the {w.N} of <img1> in the setting of <img2>",
        _pick(rng, f"put the {w.N} from <img1> in the kind of place shown in <img2>.",
              f"show the {w.N} from <img1> in the surroundings of <img2>."),
        f"can you find the {w.N} of <img1> in a place like <img2>?",
        f"I want the exact {w.N} from <img1>, but pictured in the same kind of location as <img2>.",
        f"move the {w.N} of <img1> into the setting of <img2>, keeping the {w.N} {w.ITSELF} unchanged.",
    )
    return _draft(kind, (ref, d), core(ref) + [Constraint("place", "eq", d.place)], "place", texts, ref.place)


def _comp_style(kind, ref, rng, **_):
    d = _donor(rng, lambda s: s.style != ref.style)
    if d is None:
        return None
    w = _Words(ref)
    texts = (
        _pick(rng, f"<img1> {w.N} <img2> style", f"<img1> drawn like <img2>"),
        f"the {w.N} of <img1> in the art style of <img2>",
        _pick(rng, f"show the {w.N} from <img1> in the drawing style of <img2>.",
              f"restyle <img1> to look like <img2>."),
        f"can you find the {w.N} from <img1> rendered the way <img2> is?",
        f"I want the same {w.N} as in <img1>, but pictured in the visual style of <img2>.",
        f"render the {w.N} of <img1> with the art style of <img2>, nothing else about the {w.N} changed.",
    )
    return _draft(kind, (ref, d), core(ref) + [Constraint("style", "eq", d.style)], "style", texts, ref.style)


def _comp_acc(kind, ref, rng, **_):
    missing = [a for a in A.ACCESSORIES if not getattr(ref, a)]
    acc = rng.choice(missing)
    # A donor wearing exactly that one accessory, so "the accessory of <img2>" is unambiguous.
    d = _donor(rng, lambda s: getattr(s, acc) and len(_worn(s)) == 1, domain="fashion")
    if d is None:
        return None
    w = _Words(ref)
    texts = (
        _pick(rng, f"<img1> outfit + <img2> accessory", f"<img1> {w.N} with <img2> accessory"),
        f"the outfit of <img1> with the accessory from <img2>",
        _pick(rng, f"add the accessory worn in <img2> to the look in <img1>.",
              f"show the {w.N} from <img1> worn with the accessory in <img2>."),
        f"can you find the {w.N} of <img1> paired with the accessory from <img2>?",
        f"I want the {w.full} from <img1>, styled with the same kind of accessory the person in <img2> wears.",
        f"complete the outfit of <img1> with the accessory seen in <img2>.",
    )
    return _draft(kind, (ref, d), core(ref) + [Constraint(acc, "eq", True)], acc, texts, False)


# --------------------------------------------------------------------------- context fit
def _ctx(attr: str, phrase: dict, short: dict):
    def build(kind, ref, rng, **_):
        new = rng.choice([v for v in A.CATEGORICAL[attr] if v != getattr(ref, attr)])
        w = _Words(ref)
        phr, sh = phrase[new], short[new]
        texts = (
            _pick(rng, f"{w.N} {sh}", f"{sh} {w.N}"),
            _pick(rng, f"same {w.N} {phr}", f"{w.THIS} {phr}"),
            _pick(rng, f"show {w.THIS} {phr}.", f"put {w.THIS} {phr}." if attr == "place" else f"picture {w.THIS} {phr}."),
            f"can you find {w.THIS} {phr}?",
            f"I want to see the {w.full} {phr}, with {P.keep_phrase(ref.domain, ())}.",
            f"find the same {w.N} but with the scene set {phr} instead.",
        )
        return _draft(kind, ref, core(ref) + [Constraint(attr, "eq", new)], attr, texts, getattr(ref, attr))
    return build


# --------------------------------------------------------------------------- complement
def _add_acc(kind, ref, rng, **_):
    acc = rng.choice([a for a in A.ACCESSORIES if not getattr(ref, a)])
    w = _Words(ref)
    an, short = P.ACCESSORY_NOUN[acc], P.ACCESSORY_SHORT[acc]
    a_an = an if acc == "glasses" else P.article(an)
    texts = (
        _pick(rng, f"{w.N} + {short}", f"{w.N} with {short}"),
        _pick(rng, f"same look plus {a_an}", f"this outfit with {a_an}"),
        _pick(rng, f"add {a_an}.", f"complete this look with {a_an}."),
        f"what would {w.THIS} look like with {a_an}?",
        f"I want the same {w.full}, finished off with {a_an} to complete the outfit.",
        f"style {w.THIS} with {a_an} as well, keeping the outfit itself unchanged.",
    )
    return _draft(kind, ref, core(ref) + [Constraint(acc, "eq", True)], acc, texts, False)


def _add_sec(kind, ref, rng, **_):
    sec = rng.choice(A.SECONDARIES[1:])
    w = _Words(ref)
    sn, short = P.SECONDARY_NOUN[sec], P.SECONDARY_SHORT[sec]
    texts = (
        _pick(rng, f"{w.N} + {short}", f"{w.N} with {short}"),
        _pick(rng, f"same {w.N} with a {short} next to {w.IT}", f"{w.THIS} plus a {short}"),
        _pick(rng, f"add a {sn} beside {w.IT}.", f"place a {sn} next to the {w.N}."),
        f"how about {w.THIS} with a {sn} beside {w.IT}?",
        f"I'd like the {w.full} pictured together with a {sn} next to {w.IT}.",
        f"show the same {w.N} and put a {sn} on one side of {w.IT}.",
    )
    return _draft(kind, ref, core(ref) + [Constraint("secondary", "eq", sec)], "secondary", texts, ref.secondary)


# --------------------------------------------------------------------------- explore
def _count(kind, ref, rng, **_):
    new = rng.choice([c for c in A.COUNTS if c != ref.count])
    w = _Words(ref)
    num = P.COUNT_WORD[new]
    if w.person:
        group = "just one person" if new == 1 else f"{num} people"
        texts = (
            f"{w.N} {num} people" if new > 1 else f"{w.N} one person",
            f"{group} in {w.THIS}",
            _pick(rng, f"show {group} wearing {w.THIS}.", f"make it {group} in matching {P.noun(ref.type, plural=new > 1)}."),
            f"can you find {group} all wearing {w.THIS}?" if new > 1 else f"can you find {w.THIS} on just one person?",
            f"I want a picture with exactly {num} {'person' if new == 1 else 'people'} dressed in the {w.full}.",
            f"show exactly {num} {'person' if new == 1 else 'people'} wearing the same {w.N}, no more and no fewer.",
        )
    else:
        many = P.noun(ref.type, plural=new > 1)
        texts = (
            f"{num} {many}",
            _pick(rng, f"{num} of these" if new > 1 else "just one of these", f"same {w.N}, {num} of them" if new > 1 else f"a single {w.N} like this"),
            f"show {num} of {w.THIS} side by side." if new > 1 else f"show just one {w.N} like this.",
            f"can you find {'exactly ' + num + ' of these' if new > 1 else 'a single one of these'}?",
            f"I want a picture with exactly {num} {P.noun(ref.type, plural=new > 1)} identical to this {w.full if w.t not in P.PLURAL_NOUNS else 'pair'}.",
            f"find the same {w.N} but with exactly {num} of {'them' if new > 1 else 'it'} in the picture.",
        )
    return _draft(kind, ref, core(ref) + [Constraint("count", "eq", new)], "count", texts, ref.count)


def _relation(kind, ref, rng, **_):
    new = "left" if ref.relation == "right" else "right"
    w = _Words(ref)
    sn, short = P.SECONDARY_NOUN[ref.secondary], P.SECONDARY_SHORT[ref.secondary]
    texts = (
        f"{short} on the {new}",
        _pick(rng, f"same scene, {short} on the {new} side", f"{short} to the {new} of the {w.N} instead"),
        _pick(rng, f"move the {sn} to the {new}.", f"put the {sn} on the other side."),
        f"can you find it with the {sn} on the {new} side of the {w.N}?",
        f"I want the same {w.full} with the {sn} on the {new} side of the picture instead of the {ref.relation}.",
        f"swap sides so the {sn} is on the {new} of the {w.N}.",
    )
    cons = core(ref) + [Constraint("secondary", "eq", ref.secondary), Constraint("relation", "eq", new)]
    return _draft(kind, ref, cons, "relation", texts, ref.relation)


def _action(kind, ref, rng, **_):
    new = rng.choice([p for p in A.POSES[1:] if p != ref.pose])
    w = _Words(ref)
    phr, sh = P.POSE_PHRASE[new], P.POSE_SHORT[new]
    texts = (
        _pick(rng, f"{w.N} {sh}", f"{sh} in {w.N}"),
        _pick(rng, f"same outfit but {sh}", f"{w.THIS}, person {sh}"),
        _pick(rng, f"show the person {phr}.", f"make them {sh if new != 'sitting' else 'sit down'}."),
        f"can you find someone {phr} in {w.THIS}?",
        f"I want a person wearing the same {w.full} who is {phr} instead of {P.POSE_PHRASE[ref.pose]}.",
        f"show someone in this exact {w.N} who is {phr}.",
    )
    return _draft(kind, ref, core(ref) + [Constraint("pose", "eq", new)], "pose", texts, ref.pose)


def _family(kind, ref, rng, **_):
    old_fam = A.COLOR_FAMILY_OF[ref.color]
    fam = rng.choice([f for f in A.COLOR_FAMILIES if f != old_fam])
    members = A.COLOR_FAMILIES[fam]
    w = _Words(ref)
    listed = ", ".join(members[:-1]) + " or " + members[-1]
    phr = P.FAMILY_PHRASE[fam]
    texts = (
        _pick(rng, f"{w.N} {fam} colour", f"{fam}-toned {w.N}"),
        _pick(rng, f"same {w.N} in {phr}", f"{w.THIS}, {fam} tones"),
        _pick(rng, f"show me {w.THIS} in {phr}.", f"explore {fam} colours for {w.THIS}."),
        f"what {w.DOES} {w.THIS} look like in {phr}?",
        f"I want to explore {w.THIS} in {phr} ({listed}), with {P.keep_phrase(ref.domain, 'color')}.",
        f"find the same {w.N} in any {fam} colour, that is {listed}.",
    )
    return _draft(kind, ref, core(ref, ["color"]) + [Constraint("color", "in", members)], "color", texts, ref.color)


# --------------------------------------------------------------------------- registry
def _always(_):
    return True


def _fashion(s: Scene) -> bool:
    return s.domain == "fashion"


KINDS: dict[str, Kind] = {k.name: k for k in (
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
    Kind("remove_accessory", "Negation", "remove", lambda s: s.domain == "fashion" and bool(_worn(s)), _remove_acc, ("fashion",)),
    Kind("remove_object", "Negation", "remove", lambda s: s.secondary != "none", _remove_sec),
    Kind("compose_color", "Composition", "complex", _always, _comp_color, n_refs=2),
    Kind("compose_pattern", "Composition", "complex", lambda s: len(A.ALLOWED[s.type]["patterns"]) > 2, _comp_pattern, n_refs=2),
    Kind("compose_place", "Composition", "complex", _always, _comp_place, n_refs=2),
    Kind("compose_style", "Composition", "complex", _always, _comp_style, n_refs=2),
    Kind("compose_accessory", "Composition", "complex", lambda s: s.domain == "fashion" and len(_worn(s)) < 3, _comp_acc, ("fashion",), n_refs=2),
    Kind("context_place", "Context Fit", "spatial", _always, _ctx("place", P.PLACE_PHRASE, P.PLACE_SHORT)),
    Kind("context_time", "Context Fit", "time", _always, _ctx("time", P.TIME_PHRASE, P.TIME_SHORT)),
    Kind("context_weather", "Context Fit", "weather", _always, _ctx("weather", P.WEATHER_PHRASE, P.WEATHER_SHORT)),
    Kind("add_accessory", "Complement", "addition", lambda s: s.domain == "fashion" and len(_worn(s)) < 3, _add_acc, ("fashion",)),
    Kind("add_object", "Complement", "addition", lambda s: s.secondary == "none", _add_sec),
    Kind("explore_count", "Explore", "count", _always, _count),
    Kind("explore_spatial", "Explore", "spatial", lambda s: s.secondary != "none", _relation),
    Kind("explore_action", "Explore", "action", _fashion, _action, ("fashion",)),
    Kind("explore_color_family", "Explore", "color", _always, _family),
)}

# Intents per kind in the default world (>= 30 per kind, so every category and
# subcategory has enough for a per-category number; composition ~13% of all).
DEFAULT_QUOTAS = {
    "swap_color": 40, "swap_material": 36, "swap_shape": 40, "swap_pattern": 36, "swap_type": 40,
    "swap_style": 40, "swap_view": 40,
    "neg_color": 40, "neg_material": 32, "neg_pattern": 36, "remove_accessory": 36, "remove_object": 32,
    "compose_color": 26, "compose_pattern": 22, "compose_place": 24, "compose_style": 24, "compose_accessory": 24,
    "context_place": 40, "context_time": 40, "context_weather": 40,
    "add_accessory": 44, "add_object": 40,
    "explore_count": 40, "explore_spatial": 40, "explore_action": 40, "explore_color_family": 36,
}


def build_intent(kind_name: str, ref: Scene, rng: random.Random) -> IntentDraft | None:
    kind = KINDS[kind_name]
    if ref.domain not in kind.domains or not kind.applies(ref):
        raise ValueError(f"intent kind {kind_name!r} does not apply to reference {ref}")
    return kind.build(kind, ref, rng)

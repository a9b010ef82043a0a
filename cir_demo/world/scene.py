"""Scene graphs, constraints over them, and scene sampling.

A `Scene` is one image's full description (names, not codes). A `Constraint`
is one condition on one attribute (`eq`, `ne` or `in`); an intent's target is a
tuple of constraints and a scene is a positive when it satisfies all of them.

Scenes are stored as a structured NumPy array of attribute codes (`scenes_to_table`),
so judging hundreds of intents against thousands of scenes is a few vector
comparisons per constraint (`constraint_mask`, `violation_counts`).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from . import attributes as A

SCENE_DTYPE = np.dtype([(f, np.uint32 if f == "variant" else np.int16) for f in A.SCENE_FIELDS])


@dataclass(frozen=True)
class Scene:
    """One image's scene graph. People (fashion domain) wear `type`; other domains show it as an object.

    `count` copies of the subject stand side by side; `secondary` (a plant, a box or a cat)
    stands to the `relation` side of them. Accessories, pose and skin tone apply to people only.
    `variant` seeds layout jitter and nothing a query may ask about.
    """

    domain: str
    type: str
    color: str
    pattern: str
    material: str
    shape: str
    count: int
    secondary: str
    relation: str
    hat: bool
    bag: bool
    glasses: bool
    pose: str
    skin_tone: int  # Monk 1..10; 0 when no person
    view: str
    style: str
    place: str
    time: str
    weather: str
    hair: str
    variant: int

    @property
    def has_person(self) -> bool:
        return self.domain == "fashion"

    @property
    def skin_tone_bucket(self) -> str | None:
        return A.skin_tone_bucket(self.skin_tone)

    def replace(self, **changes) -> "Scene":
        return dataclasses.replace(self, **changes)

    def signature(self) -> tuple:
        """Everything visible about the scene except layout jitter (train/test disjointness key)."""
        return tuple(getattr(self, f) for f in A.SCENE_FIELDS if f != "variant")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def validate_scene(scene: Scene) -> None:
    """Raise ValueError naming the first inconsistent attribute of `scene`."""
    for f in A.SCENE_FIELDS:
        A.encode(f, getattr(scene, f))
    if A.TYPE_DOMAIN[scene.type] != scene.domain:
        raise ValueError(f"scene: type {scene.type!r} is not in domain {scene.domain!r}")
    for attr in ("pattern", "material", "shape"):
        if getattr(scene, attr) not in A.ALLOWED[scene.type][attr + "s"]:
            raise ValueError(f"scene: {attr} {getattr(scene, attr)!r} is not allowed for a {scene.type}")
    if scene.count not in A.COUNTS:
        raise ValueError(f"scene: count must be one of {A.COUNTS}, got {scene.count}")
    if (scene.secondary == "none") != (scene.relation == "none"):
        raise ValueError("scene: relation must be 'none' exactly when there is no secondary object")
    person = scene.domain == "fashion"
    if person != (scene.pose != "none") or person != (scene.skin_tone != 0) or person != (scene.hair != "none"):
        raise ValueError("scene: pose, skin tone and hair are set exactly for people (fashion domain)")
    if not person and (scene.hat or scene.bag or scene.glasses):
        raise ValueError("scene: only people wear accessories")
    if person and not 1 <= scene.skin_tone <= 10:
        raise ValueError(f"scene: skin tone must be Monk 1..10, got {scene.skin_tone}")


# --------------------------------------------------------------------------- constraints
@dataclass(frozen=True)
class Constraint:
    """`attr op value`: op is 'eq', 'ne' or 'in' (value a tuple for 'in')."""

    attr: str
    op: str
    value: Any

    def __post_init__(self):
        if self.attr not in A.CONSTRAINABLE:
            raise ValueError(
                f"constraint: attribute {self.attr!r} cannot be constrained; known: {', '.join(A.CONSTRAINABLE)}"
            )
        if self.op not in ("eq", "ne", "in"):
            raise ValueError(f"constraint on {self.attr!r}: op must be eq, ne or in, got {self.op!r}")
        if self.op == "in":
            object.__setattr__(self, "value", tuple(self.value))
            for v in self.value:
                A.encode(self.attr, v)
        else:
            A.encode(self.attr, self.value)

    def holds(self, scene: Scene) -> bool:
        v = getattr(scene, self.attr)
        if self.op == "eq":
            return v == self.value
        if self.op == "ne":
            return v != self.value
        return v in self.value

    def to_json(self) -> list:
        return [self.attr, self.op, list(self.value) if self.op == "in" else self.value]

    @classmethod
    def from_json(cls, obj: Sequence) -> "Constraint":
        if not isinstance(obj, (list, tuple)) or len(obj) != 3:
            raise ValueError(f"constraint must be [attr, op, value], got {obj!r}")
        return cls(obj[0], obj[1], tuple(obj[2]) if obj[1] == "in" else obj[2])

    def __str__(self) -> str:
        sym = {"eq": "=", "ne": "!=", "in": "in"}[self.op]
        return f"{self.attr} {sym} {self.value}"


def satisfies(scene: Scene, constraints: Iterable[Constraint]) -> bool:
    return all(c.holds(scene) for c in constraints)


def violations(scene: Scene, constraints: Iterable[Constraint]) -> list[Constraint]:
    return [c for c in constraints if not c.holds(scene)]


# --------------------------------------------------------------------------- tables
def scenes_to_table(scenes: Sequence[Scene]) -> np.ndarray:
    table = np.zeros(len(scenes), dtype=SCENE_DTYPE)
    for f in A.SCENE_FIELDS:
        table[f] = [A.encode(f, getattr(s, f)) for s in scenes]
    return table


def scene_from_row(row) -> Scene:
    return Scene(**{f: A.decode(f, row[f]) for f in A.SCENE_FIELDS})


def table_to_scenes(table: np.ndarray) -> list[Scene]:
    cols = {f: table[f].tolist() for f in A.SCENE_FIELDS}
    out = []
    for i in range(len(table)):
        out.append(Scene(**{f: A.decode(f, cols[f][i]) for f in A.SCENE_FIELDS}))
    return out


def constraint_mask(table: np.ndarray, c: Constraint) -> np.ndarray:
    col = table[c.attr]
    if c.op == "eq":
        return col == A.encode(c.attr, c.value)
    if c.op == "ne":
        return col != A.encode(c.attr, c.value)
    return np.isin(col, [A.encode(c.attr, v) for v in c.value])


def violation_counts(table: np.ndarray, constraints: Sequence[Constraint]) -> np.ndarray:
    """Per scene, how many constraints it breaks (0 = positive, 1 = near miss)."""
    out = np.zeros(len(table), dtype=np.int16)
    for c in constraints:
        out += ~constraint_mask(table, c)
    return out


# --------------------------------------------------------------------------- sampling
def _weighted(rng: random.Random, values: Sequence, weights: Sequence[float]):
    return rng.choices(values, weights=weights, k=1)[0]


_PATTERN_WEIGHTS = {"plain": 0.4, "striped": 0.2, "dotted": 0.2, "checked": 0.2}
_MATERIAL_WEIGHTS = {"matte": 0.4, "glossy": 0.2, "metallic": 0.2, "knitted": 0.2}


def sample_item_attrs(rng: random.Random, type_name: str) -> dict:
    """Colour, pattern, material and shape for a subject of `type_name`."""
    allowed = A.ALLOWED[type_name]
    pats, mats = allowed["patterns"], allowed["materials"]
    return dict(
        color=rng.choice(A.COLORS),
        pattern=_weighted(rng, pats, [_PATTERN_WEIGHTS[p] for p in pats]),
        material=_weighted(rng, mats, [_MATERIAL_WEIGHTS[m] for m in mats]),
        shape=rng.choice(allowed["shapes"]),
    )


def sample_scene(rng: random.Random, domain: str | None = None, type_name: str | None = None) -> Scene:
    """A random scene; skin tone is drawn uniformly and independently of everything else."""
    if type_name is not None:
        domain = A.TYPE_DOMAIN[type_name]
    if domain is None:
        domain = _weighted(rng, A.DOMAINS, [0.45, 0.3, 0.25])
    if type_name is None:
        type_name = rng.choice(A.TYPES_BY_DOMAIN[domain])
    secondary = _weighted(rng, A.SECONDARIES, [0.5, 1 / 6, 1 / 6, 1 / 6])
    person = domain == "fashion"
    return Scene(
        domain=domain,
        type=type_name,
        **sample_item_attrs(rng, type_name),
        count=_weighted(rng, A.COUNTS, [0.6, 0.25, 0.15]),
        secondary=secondary,
        relation="none" if secondary == "none" else rng.choice(("left", "right")),
        hat=person and rng.random() < 0.3,
        bag=person and rng.random() < 0.3,
        glasses=person and rng.random() < 0.3,
        pose=rng.choice(A.POSES[1:]) if person else "none",
        skin_tone=rng.randint(1, 10) if person else 0,
        view=_weighted(rng, A.VIEWS, [0.6, 0.4]),
        style=_weighted(rng, A.STYLES, [0.5, 0.2, 0.3]),
        place=rng.choice(A.PLACES),
        time=_weighted(rng, A.TIMES, [0.2, 0.4, 0.2, 0.2]),
        weather=_weighted(rng, A.WEATHERS, [0.55, 0.15, 0.15, 0.15]),
        hair=rng.choice(A.HAIRS[1:]) if person else "none",
        variant=rng.getrandbits(31),
    )


def normalize_scene(scene: Scene) -> Scene:
    """Repair the couplings between attributes after a forced change (domain follows type, ...)."""
    changes: dict[str, Any] = {}
    domain = A.TYPE_DOMAIN[scene.type]
    if domain != scene.domain:
        changes["domain"] = domain
    if scene.secondary == "none" and scene.relation != "none":
        changes["relation"] = "none"
    if scene.secondary != "none" and scene.relation == "none":
        changes["relation"] = "left" if scene.variant % 2 else "right"
    return scene.replace(**changes) if changes else scene


def _choose_other(rng: random.Random, options: Sequence, exclude: Iterable) -> Any:
    exclude = set(exclude)
    rest = [o for o in options if o not in exclude]
    if not rest:
        raise ValueError(f"no value left among {list(options)} after excluding {sorted(map(str, exclude))}")
    return rng.choice(rest)


def value_satisfying(rng: random.Random, c: Constraint, type_name: str | None) -> Any:
    options = A.allowed_values(c.attr, type_name if c.attr in ("pattern", "material", "shape") else None)
    if c.op == "eq":
        return c.value
    if c.op == "ne":
        return _choose_other(rng, options, [c.value] + (["none"] if c.attr in ("relation", "pose") else []))
    if c.attr in ("relation", "pose"):
        options = [v for v in options if v != "none"]
    return rng.choice([v for v in options if v in c.value])


def value_violating(rng: random.Random, c: Constraint, type_name: str | None, prefer=None) -> Any:
    """A value of `c.attr` that breaks `c` (`prefer` when it does; for a type, one of the same domain)."""
    options = A.allowed_values(c.attr, type_name if c.attr in ("pattern", "material", "shape") else None)
    if c.op == "ne":
        return c.value
    bad = [v for v in options if (v != c.value if c.op == "eq" else v not in c.value)]
    if c.attr in ("relation", "pose"):  # 'none' there means "no such thing", not another value
        bad = [v for v in bad if v != "none"] or bad
    if prefer is not None and prefer in bad:
        return prefer
    if c.attr == "type" and type_name is not None:
        bad = [v for v in bad if A.TYPE_DOMAIN[v] == A.TYPE_DOMAIN[type_name]] or bad
    if not bad:
        raise ValueError(f"constraint {c} cannot be violated within {list(options)}")
    return rng.choice(bad)


def force_constraints(rng: random.Random, base: Scene, constraints: Sequence[Constraint]) -> Scene:
    """`base` changed as little as possible so that it satisfies every constraint.

    The type is set first (it decides the domain and the allowed item attributes), then
    attributes that the new type does not allow are redrawn, then each constraint is applied.
    """
    scene = base
    type_c = [c for c in constraints if c.attr == "type"]
    if type_c and not type_c[0].holds(scene):
        new_type = value_satisfying(rng, type_c[0], None)
        fresh = sample_scene(rng, type_name=new_type)
        if A.TYPE_DOMAIN[new_type] == scene.domain:
            scene = scene.replace(type=new_type)
        else:  # a new domain: people attributes appear or vanish
            keep = {
                f: getattr(scene, f)
                for f in ("count", "secondary", "relation", "view", "style", "place", "time", "weather", "variant")
            }
            scene = fresh.replace(**keep)
    for attr in ("pattern", "material", "shape"):
        if getattr(scene, attr) not in A.ALLOWED[scene.type][attr + "s"]:
            scene = scene.replace(**{attr: rng.choice(A.ALLOWED[scene.type][attr + "s"])})
    for c in constraints:
        if c.attr == "type" or c.holds(scene):
            continue
        scene = scene.replace(**{c.attr: value_satisfying(rng, c, scene.type)})
    scene = normalize_scene(scene)
    if not satisfies(scene, constraints):
        raise ValueError(f"could not satisfy {[str(c) for c in constraints]} starting from {base}")
    validate_scene(scene)
    return scene

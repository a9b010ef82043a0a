"""Vocabularies of the offline world: every attribute a scene graph can carry.

Each categorical attribute is a tuple of names; a scene stores the index of its
value (its *code*). Everything here is plain data: no NumPy, no I/O, so the
vocabularies can be imported anywhere for free.
"""

from __future__ import annotations

from typing import Mapping

DOMAINS = ("fashion", "home", "accessories")

# Subject types, grouped by domain. Fashion subjects are people wearing the garment.
TYPES_BY_DOMAIN: Mapping[str, tuple[str, ...]] = {
    "fashion": ("t-shirt", "dress", "coat", "hoodie"),
    "home": ("vase", "lamp", "chair", "cushion", "mug"),
    "accessories": ("handbag", "hat", "sunglasses", "watch"),
}
TYPES = tuple(t for d in DOMAINS for t in TYPES_BY_DOMAIN[d])
TYPE_DOMAIN = {t: d for d, ts in TYPES_BY_DOMAIN.items() for t in ts}

COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
# Chosen for hue separation at 160 px, not for realism.
COLOR_RGB = {
    "red": (214, 40, 40),
    "orange": (245, 130, 20),
    "yellow": (250, 206, 30),
    "green": (46, 160, 67),
    "blue": (33, 100, 220),
    "purple": (128, 60, 180),
    "pink": (245, 130, 190),
    "brown": (130, 78, 40),
    "black": (34, 34, 38),
    "white": (246, 246, 242),
}
COLOR_FAMILIES = {
    "warm": ("red", "orange", "yellow", "pink"),
    "cool": ("green", "blue", "purple"),
    "neutral": ("brown", "black", "white"),
}
COLOR_FAMILY_OF = {c: fam for fam, cs in COLOR_FAMILIES.items() for c in cs}

PATTERNS = ("plain", "striped", "dotted", "checked")
MATERIALS = ("matte", "glossy", "metallic", "knitted")
# Garments vary in length, objects in outline; one field, two values per type.
SHAPES = ("short", "long", "round", "square")
COUNTS = (1, 2, 3)
SECONDARIES = ("none", "plant", "box", "cat")
RELATIONS = ("none", "left", "right")
ACCESSORIES = ("hat", "bag", "glasses")
POSES = ("none", "standing", "sitting", "waving", "running")
VIEWS = ("wide", "close-up")
STYLES = ("photo", "sketch", "flat")
PLACES = ("room", "beach", "city", "garden")
TIMES = ("morning", "day", "sunset", "night")
WEATHERS = ("clear", "rainy", "snowy", "foggy")
HAIRS = ("none", "black", "brown", "blonde", "auburn", "gray")

_ALL_PATTERNS = PATTERNS
_GARMENT = dict(patterns=_ALL_PATTERNS, materials=("matte", "glossy", "metallic", "knitted"), shapes=("short", "long"))
# What each type can be: a knitted watch or a dotted pair of sunglasses would not read.
ALLOWED: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "t-shirt": _GARMENT,
    "dress": _GARMENT,
    "coat": _GARMENT,
    "hoodie": _GARMENT,
    "vase": dict(patterns=_ALL_PATTERNS, materials=("matte", "glossy", "metallic"), shapes=("round", "square")),
    "lamp": dict(patterns=_ALL_PATTERNS, materials=("matte", "glossy", "metallic"), shapes=("round", "square")),
    "chair": dict(
        patterns=_ALL_PATTERNS, materials=("matte", "glossy", "metallic", "knitted"), shapes=("round", "square")
    ),
    "cushion": dict(patterns=_ALL_PATTERNS, materials=("matte", "glossy", "knitted"), shapes=("round", "square")),
    "mug": dict(patterns=_ALL_PATTERNS, materials=("matte", "glossy", "metallic"), shapes=("round", "square")),
    "handbag": dict(
        patterns=_ALL_PATTERNS, materials=("matte", "glossy", "metallic", "knitted"), shapes=("round", "square")
    ),
    "hat": dict(patterns=_ALL_PATTERNS, materials=("matte", "glossy", "knitted"), shapes=("round", "square")),
    "sunglasses": dict(patterns=("plain",), materials=("matte", "glossy", "metallic"), shapes=("round", "square")),
    "watch": dict(patterns=("plain", "striped"), materials=("matte", "glossy", "metallic"), shapes=("round", "square")),
}

# Monk Skin Tone scale, official swatches (index 1..10).
MONK_RGB = {
    1: (246, 237, 228),
    2: (243, 231, 219),
    3: (247, 234, 208),
    4: (234, 218, 186),
    5: (215, 189, 150),
    6: (160, 126, 86),
    7: (130, 92, 67),
    8: (96, 65, 52),
    9: (58, 49, 42),
    10: (41, 36, 32),
}
# Monk tone -> PinPoint's four buckets (3 / 2 / 2 / 3 tones; the PinPoint paper names the
# buckets but not the cut points, so this split is our documented choice).
MONK_BUCKET = {
    1: "LIGHTEST",
    2: "LIGHTEST",
    3: "LIGHTEST",
    4: "SECOND_LIGHTEST",
    5: "SECOND_LIGHTEST",
    6: "SECOND_DARKEST",
    7: "SECOND_DARKEST",
    8: "DARKEST",
    9: "DARKEST",
    10: "DARKEST",
}


def skin_tone_bucket(monk: int | None) -> str | None:
    """PinPoint bucket of a Monk tone (1..10); None when the image shows no person (0/None)."""
    if not monk:
        return None
    try:
        return MONK_BUCKET[int(monk)]
    except KeyError:
        raise ValueError(f"skin tone must be a Monk value 1..10 or 0/None, got {monk!r}") from None


# Categorical attributes of a scene and their vocabularies (the order of SCENE_FIELDS is the
# on-disk column order). Integer and boolean attributes map to themselves.
CATEGORICAL: Mapping[str, tuple] = {
    "domain": DOMAINS,
    "type": TYPES,
    "color": COLORS,
    "pattern": PATTERNS,
    "material": MATERIALS,
    "shape": SHAPES,
    "secondary": SECONDARIES,
    "relation": RELATIONS,
    "pose": POSES,
    "view": VIEWS,
    "style": STYLES,
    "place": PLACES,
    "time": TIMES,
    "weather": WEATHERS,
    "hair": HAIRS,
}
BOOLEAN_FIELDS = ("hat", "bag", "glasses")
INTEGER_FIELDS = ("count", "skin_tone", "variant")
SCENE_FIELDS = (
    "domain",
    "type",
    "color",
    "pattern",
    "material",
    "shape",
    "count",
    "secondary",
    "relation",
    "hat",
    "bag",
    "glasses",
    "pose",
    "skin_tone",
    "view",
    "style",
    "place",
    "time",
    "weather",
    "hair",
    "variant",
)
# Attributes that intents may constrain (skin tone, hair and layout jitter never are).
CONSTRAINABLE = tuple(f for f in SCENE_FIELDS if f not in ("skin_tone", "hair", "variant", "domain"))
# The identity of "this item": what "the same dress" keeps.
ITEM_FIELDS = ("type", "color", "pattern", "material", "shape")


def encode(attr: str, value) -> int:
    """Code of `value` for attribute `attr` (a clear error for unknown names)."""
    if attr in CATEGORICAL:
        vocab = CATEGORICAL[attr]
        try:
            return vocab.index(value)
        except ValueError:
            raise ValueError(
                f"attribute {attr!r}: unknown value {value!r}; known: {', '.join(map(str, vocab))}"
            ) from None
    if attr in BOOLEAN_FIELDS:
        if not isinstance(value, (bool, int)) or value not in (0, 1):
            raise ValueError(f"attribute {attr!r}: expected a boolean, got {value!r}")
        return int(value)
    if attr in INTEGER_FIELDS:
        return int(value)
    raise ValueError(f"unknown scene attribute {attr!r}; known: {', '.join(SCENE_FIELDS)}")


def decode(attr: str, code: int):
    if attr in CATEGORICAL:
        return CATEGORICAL[attr][int(code)]
    if attr in BOOLEAN_FIELDS:
        return bool(code)
    return int(code)


def allowed_values(attr: str, type_name: str | None = None) -> tuple:
    """Values `attr` may take (for a subject of `type_name` where that matters)."""
    if type_name is not None and attr in ("pattern", "material", "shape"):
        return ALLOWED[type_name][attr + "s"]
    if attr in CATEGORICAL:
        return CATEGORICAL[attr]
    if attr in BOOLEAN_FIELDS:
        return (False, True)
    if attr == "count":
        return COUNTS
    raise ValueError(f"attribute {attr!r} has no finite vocabulary")

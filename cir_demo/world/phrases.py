"""Words for scene attributes: nouns, adjectives and phrases shared by intents and captions."""

from __future__ import annotations

import re

from . import attributes as A

PLURAL_NOUNS = {"sunglasses"}
PATTERN_ADJ = {"plain": "plain", "striped": "striped", "dotted": "polka-dot", "checked": "checked"}
PATTERN_PHRASE = {"plain": "no pattern", "striped": "stripes", "dotted": "polka dots", "checked": "a checked pattern"}
MATERIAL_ADJ = {"matte": "matte", "glossy": "glossy", "metallic": "metallic", "knitted": "knitted"}
MATERIAL_PHRASE = {
    "matte": "a matte finish",
    "glossy": "a glossy finish",
    "metallic": "a metallic finish",
    "knitted": "a knitted texture",
}
STYLE_PHRASE = {"photo": "a photo", "sketch": "a pencil sketch", "flat": "a flat cartoon illustration"}
STYLE_SHORT = {"photo": "photo", "sketch": "sketch", "flat": "flat cartoon"}
VIEW_PHRASE = {"close-up": "a close-up", "wide": "a wide shot"}
PLACE_PHRASE = {
    "room": "in a room indoors",
    "beach": "at the beach",
    "city": "on a city street",
    "garden": "in a garden",
}
PLACE_SHORT = {"room": "indoors", "beach": "beach", "city": "city", "garden": "garden"}
TIME_PHRASE = {
    "morning": "in the early morning",
    "day": "in broad daylight",
    "sunset": "at sunset",
    "night": "at night",
}
TIME_SHORT = {"morning": "morning", "day": "daytime", "sunset": "sunset", "night": "night"}
WEATHER_PHRASE = {"clear": "under a clear sky", "rainy": "in the rain", "snowy": "in the snow", "foggy": "in thick fog"}
WEATHER_SHORT = {"clear": "clear sky", "rainy": "rain", "snowy": "snow", "foggy": "fog"}
POSE_PHRASE = {"standing": "standing still", "sitting": "sitting down", "waving": "waving", "running": "running"}
POSE_SHORT = {"standing": "standing", "sitting": "sitting", "waving": "waving", "running": "running"}
COUNT_WORD = {1: "one", 2: "two", 3: "three"}
SECONDARY_NOUN = {"plant": "potted plant", "box": "cardboard box", "cat": "cat"}
SECONDARY_SHORT = {"plant": "plant", "box": "box", "cat": "cat"}
ACCESSORY_NOUN = {"hat": "hat", "bag": "shoulder bag", "glasses": "glasses"}
ACCESSORY_SHORT = {"hat": "hat", "bag": "bag", "glasses": "glasses"}
FAMILY_PHRASE = {"warm": "a warm colour", "cool": "a cool colour", "neutral": "a neutral colour"}


def noun(type_name: str, plural: bool = False) -> str:
    if type_name in PLURAL_NOUNS:
        return "pairs of sunglasses" if plural else "sunglasses"
    if not plural:
        return type_name
    return {"watch": "watches", "dress": "dresses", "glasses": "glasses"}.get(type_name, type_name + "s")


def this(type_name: str) -> str:
    return f"these {type_name}" if type_name in PLURAL_NOUNS else f"this {type_name}"


def it(type_name: str) -> str:
    return "them" if type_name in PLURAL_NOUNS else "it"


def article(phrase: str) -> str:
    """'a'/'an' + phrase, or the phrase alone for plural nouns."""
    last = phrase.split()[-1]
    if last in PLURAL_NOUNS:
        return f"a pair of {phrase}"
    return ("an " if phrase[0].lower() in "aeiou" else "a ") + phrase


_DOUBLE_ARTICLE = re.compile(r"\b(the|a|an) (?:a|an) ", re.IGNORECASE)
_A_BEFORE_VOWEL = re.compile(r"\b([Aa]) (?=[aeio])(?!one\b)")  # "a uniform", "a one-off" stay


def tidy_articles(text: str) -> str:
    """Template seams: "the a checked pattern" -> "the checked pattern", "a orange" -> "an orange"."""
    text = _DOUBLE_ARTICLE.sub(lambda m: m.group(1) + " ", text)
    return _A_BEFORE_VOWEL.sub(lambda m: m.group(1) + "n ", text)


def shape_adj(type_name: str, shape: str) -> str:
    if A.TYPE_DOMAIN[type_name] == "fashion":
        return shape  # short / long
    return {"round": "round", "square": "square"}[shape]


def item_phrase(
    type_name: str,
    color: str | None = None,
    pattern: str | None = None,
    material: str | None = None,
    shape: str | None = None,
    plural: bool = False,
    say_plain: bool = False,
) -> str:
    """'long red striped knitted dress' from whichever parts are given."""
    words = []
    if shape:
        words.append(shape_adj(type_name, shape))
    if color:
        words.append(color)
    if pattern and (pattern != "plain" or say_plain):
        words.append(PATTERN_ADJ[pattern])
    if material:
        words.append(MATERIAL_ADJ[material])
    words.append(noun(type_name, plural))
    return " ".join(words)


def keep_phrase(domain: str, changed: str | tuple[str, ...]) -> str:
    """'the same cut, fabric and pattern': the item fields an edit leaves alone."""
    changed = (changed,) if isinstance(changed, str) else changed
    names = {
        "fashion": {"shape": "length", "material": "fabric"},
        "home": {"shape": "shape", "material": "finish"},
        "accessories": {"shape": "shape", "material": "finish"},
    }[domain]
    parts = []
    for attr in ("color", "pattern", "material", "shape"):
        if attr in changed:
            continue
        parts.append({"color": "colour", "pattern": "pattern"}.get(attr) or names[attr])
    if len(parts) == 1:
        return f"the same {parts[0]}"
    return "the same " + ", ".join(parts[:-1]) + " and " + parts[-1]

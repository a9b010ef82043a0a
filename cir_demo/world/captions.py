"""Captions generated from scene graphs, and caption matching for text-to-image evaluation.

`describe(scene, mention)` says exactly the attributes in `mention` (and a count above one,
which English cannot leave out); `caption_constraints(scene, mention)` is the matching set
of equality constraints, so a caption's hits are all images whose scene satisfies them
(`caption_matches`).
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence

from . import attributes as A
from . import phrases as P
from .scene import Constraint, Scene, satisfies

CONTEXT_ATTRS = (
    "pattern",
    "material",
    "shape",
    "count",
    "pose",
    "accessories",
    "secondary",
    "relation",
    "place",
    "time",
    "weather",
    "view",
    "style",
)


def _join(words: Sequence[str]) -> str:
    words = list(words)
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def describe(scene: Scene, mention: Iterable[str]) -> str:
    mention = set(mention) | {"type"}
    n = scene.count
    say_count = n > 1 or "count" in mention
    item = P.item_phrase(
        scene.type,
        scene.color if "color" in mention else None,
        scene.pattern if "pattern" in mention else None,
        scene.material if "material" in mention else None,
        scene.shape if "shape" in mention else None,
        plural=n > 1,
        say_plain=True,
    )
    if scene.has_person:
        who = ("a single person" if "count" in mention else "a person") if n == 1 else f"{P.COUNT_WORD[n]} people"
        subject = f"{who} in {P.article(item) if n == 1 else item}"
        worn = [a for a in A.ACCESSORIES if getattr(scene, a)] if "accessories" in mention else []
        if worn:
            subject += " wearing " + _join(
                [P.ACCESSORY_NOUN[a] if a == "glasses" else P.article(P.ACCESSORY_NOUN[a]) for a in worn]
            )
        if "pose" in mention:
            subject += ", " + P.POSE_PHRASE[scene.pose]
    else:
        if n == 1:
            subject = ("a single " + item) if "count" in mention else P.article(item)
        else:
            subject = f"{P.COUNT_WORD[n]} {item}"
    if "secondary" in mention and scene.secondary != "none":
        sn = P.SECONDARY_NOUN[scene.secondary]
        subject += (
            f" with {P.article(sn)} on the {scene.relation}" if "relation" in mention else f" next to {P.article(sn)}"
        )
    where = []
    if "place" in mention:
        where.append(P.PLACE_PHRASE[scene.place])
    if "time" in mention:
        where.append(P.TIME_PHRASE[scene.time])
    if "weather" in mention:
        where.append(P.WEATHER_PHRASE[scene.weather])
    text = subject + (" " + " ".join(where) if where else "")
    frame = []
    if "view" in mention:
        frame.append("close-up" if scene.view == "close-up" else "wide")
    if "style" in mention:
        frame.append({"photo": "photo", "sketch": "pencil sketch", "flat": "flat illustration"}[scene.style])
    if frame:
        noun = frame[-1] if "style" in mention else "shot"
        adj = frame[0] if "view" in mention else ""
        head = f"{adj} {noun}".strip()
        text = f"{P.article(head)} of {text}"
    return text[0].upper() + text[1:]


def caption_constraints(scene: Scene, mention: Iterable[str]) -> tuple[Constraint, ...]:
    mention = set(mention) | {"type"}
    out = [Constraint("type", "eq", scene.type)]
    for attr in ("color", "pattern", "material", "shape", "place", "time", "weather", "view", "style"):
        if attr in mention:
            out.append(Constraint(attr, "eq", getattr(scene, attr)))
    if scene.count > 1 or "count" in mention:
        out.append(Constraint("count", "eq", scene.count))
    if scene.has_person:
        if "accessories" in mention:
            out += [Constraint(a, "eq", True) for a in A.ACCESSORIES if getattr(scene, a)]
        if "pose" in mention:
            out.append(Constraint("pose", "eq", scene.pose))
    if "secondary" in mention and scene.secondary != "none":
        out.append(Constraint("secondary", "eq", scene.secondary))
        if "relation" in mention:
            out.append(Constraint("relation", "eq", scene.relation))
    return tuple(out)


def caption_matches(scene: Scene, caption_constraints: Iterable[Constraint]) -> bool:
    """True when `scene` shows what the caption says (every caption constraint holds)."""
    return satisfies(scene, caption_constraints)


def _context_pool(scene: Scene) -> list[str]:
    pool = ["material", "shape", "place", "time", "weather", "view", "style", "count"]
    if A.ALLOWED[scene.type]["patterns"] != ("plain",):
        pool.append("pattern")
    if scene.has_person:
        pool.append("pose")
        if scene.hat or scene.bag or scene.glasses:
            pool.append("accessories")
    if scene.secondary != "none":
        pool += ["secondary", "relation"]
    return pool


def sample_caption(
    scene: Scene, rng: random.Random, n_extra: tuple[int, int] = (1, 3)
) -> tuple[str, tuple[Constraint, ...]]:
    """A held-out style caption of `scene`: type and colour plus a few random attributes."""
    pool = _context_pool(scene)
    mention = {"type", "color"} | set(rng.sample(pool, min(len(pool), rng.randint(*n_extra))))
    if "relation" in mention:
        mention.add("secondary")
    return describe(scene, mention), caption_constraints(scene, mention)


def image_captions(scene: Scene, rng: random.Random) -> list[str]:
    """Three captions per training image: short, medium and fully detailed."""
    pool = _context_pool(scene)
    medium = {"color", "pattern"} | set(rng.sample(pool, min(len(pool), 2)))
    if "relation" in medium:
        medium.add("secondary")
    detailed = set(pool) | {"color", "pattern", "accessories", "secondary", "relation"}
    return [describe(scene, {"color"}), describe(scene, medium), describe(scene, detailed)]

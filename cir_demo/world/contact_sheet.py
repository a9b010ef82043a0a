"""A contact sheet: sample queries per category with their references, positives and negatives.

One row per sampled intent: the reference image(s), the instruction (one paraphrase, the
intent's kind and its constraints), a few positives (green) and a few explicit negatives
(red), each negative labelled with the one constraint it breaks. Meant for judging the
rendering and the judgments by eye.
"""

from __future__ import annotations

import random
import textwrap
from pathlib import Path
from typing import Sequence

from PIL import Image, ImageDraw, ImageFont

from .scene import Constraint, violations

TILE = 160
LABEL_H = 30
PAD = 6
TEXT_W = 300
GREEN, RED, BLUE = (40, 150, 60), (200, 40, 40), (40, 90, 200)


def _font(size: int):
    for name in ("DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "Arial.ttf"):
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default()


def _constraint_text(c: Constraint) -> str:
    v = "/".join(map(str, c.value)) if c.op == "in" else str(c.value)
    return f"{c.attr}{'=' if c.op == 'eq' else ('≠' if c.op == 'ne' else '∈')}{v}"


def sample_intents(intents: Sequence[dict], per_group: int, group_by: str, seed: int = 0) -> list[dict]:
    """`per_group` intents of each category/subcategory/kind (seeded), grouped in first-seen order."""
    key = {"category": "intent_category", "subcategory": "edit_subcategory", "kind": "kind"}.get(group_by)
    if key is None:
        raise ValueError(f"group_by must be category, subcategory or kind, got {group_by!r}")
    groups: dict[str, list[dict]] = {}
    for it in intents:
        groups.setdefault(it[key], []).append(it)
    rng = random.Random(seed)
    out = []
    for name in sorted(groups):
        members = groups[name]
        out += rng.sample(members, min(per_group, len(members)))
    return out


def draw_contact_sheet(
    out_png,
    size: str = "default",
    seed: int = 0,
    root=None,
    per_group: int = 1,
    group_by: str = "kind",
    n_pos: int = 3,
    n_neg: int = 3,
    sample_seed: int = 0,
    paraphrase: int | None = None,
) -> Path:
    """Draw the sheet to `out_png` and return its path."""
    from cir_demo.utils.io import atomic_path

    from .loader import intent_constraints, load_intents, open_world, render_image

    world = open_world(root, size, seed, progress=True)
    intents = load_intents(world.root, split="test")
    rows = sample_intents(intents, per_group, group_by, sample_seed)
    rng = random.Random(sample_seed)
    n_cols = 2 + n_pos + n_neg
    width = PAD + n_cols * (TILE + PAD) + TEXT_W + PAD
    row_h = TILE + LABEL_H + 2 * PAD
    sheet = Image.new("RGB", (width, 40 + len(rows) * row_h), (250, 250, 250))
    d = ImageDraw.Draw(sheet)
    f_title, f_text, f_small = _font(18), _font(14), _font(11)
    d.text(
        (PAD, 10),
        f"offline world {world.manifest['size']} seed {world.manifest['seed']}: "
        f"reference(s) | instruction | positives (green) | negatives (red, with the constraint each breaks)",
        fill=(20, 20, 20),
        font=f_title,
    )

    def tile(image_id: str, x: int, y: int, colour, label: str):
        sheet.paste(render_image(image_id, world=world), (x, y))
        d.rectangle((x - 2, y - 2, x + TILE + 1, y + TILE + 1), outline=colour, width=3)
        for i, line in enumerate(textwrap.wrap(label, 26)[:2]):
            d.text((x, y + TILE + 3 + 13 * i), line, fill=colour, font=f_small)

    for r, it in enumerate(rows):
        y = 40 + r * row_h + PAD
        x = PAD
        cons = intent_constraints(it)
        for k in range(2):
            if k < len(it["reference_ids"]):
                tile(
                    it["reference_ids"][k], x, y, BLUE, f"<img{k + 1}>" if len(it["reference_ids"]) > 1 else "reference"
                )
            x += TILE + PAD
        p_idx = paraphrase if paraphrase is not None else rng.randrange(len(it["paraphrases"]))
        text = it["paraphrases"][p_idx]
        d.text(
            (x, y), f"{it['intent_category']} / {it['edit_subcategory']} ({it['kind']})", fill=(20, 20, 20), font=f_text
        )
        lines = textwrap.wrap(f"\u201c{text}\u201d", 36)[:5]
        for i, line in enumerate(lines):
            d.text((x, y + 20 + 17 * i), line, fill=(10, 10, 120), font=f_text)
        yy = y + 24 + 17 * len(lines)
        for line in textwrap.wrap("target: " + ", ".join(_constraint_text(c) for c in cons), 44)[:4]:
            d.text((x, yy), line, fill=(90, 90, 90), font=f_small)
            yy += 13
        d.text(
            (x, yy + 2),
            f"{len(it['positives'])} positives, {len(it['negatives'])} negatives",
            fill=(90, 90, 90),
            font=f_small,
        )
        x += TEXT_W
        for pid in it["positives"][:n_pos]:
            tile(pid, x, y, GREEN, "positive")
            x += TILE + PAD
        x += (n_pos - min(n_pos, len(it["positives"]))) * (TILE + PAD)
        for nid in it["negatives"][:n_neg]:
            scene = world.scene(nid)
            broken = violations(scene, cons)
            tile(
                nid,
                x,
                y,
                RED,
                "; ".join(
                    f"{c.attr} is {getattr(scene, c.attr)}, want {_constraint_text(c)[len(c.attr) :]}" for c in broken
                ),
            )
            x += TILE + PAD
    out_png = Path(out_png)
    with atomic_path(out_png) as tmp:
        sheet.save(tmp, format="PNG")
    return out_png

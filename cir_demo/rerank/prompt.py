"""The reranker prompt: one template, rendered into text and image segments.

Every backend sends the same segments in the same order (system text, then
the user turn: reference image 1, [reference image 2], the instruction, the
candidate image, the question). Everything before the candidate image is the
same for every candidate of a query, so a backend can encode it once (prefix
KV cache) and an OpenAI-compatible server with prefix caching reuses it too.

The exact template text is part of the reranker spec (and so of the score
cache key): changing one character re-scores.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Literal

# The paper's question ("Given the query image and the instruction: {T}, is the
# candidate image relevant? Answer with 'yes' or 'no' only."), extended to
# label one or two reference images and the candidate explicitly. The question
# comes before the candidate image (the layout of Qwen3-Reranker: the document
# last), so the part that differs per candidate is only its image and the end
# of the chat turn; everything else is the cached prefix.
# The system text is a judging rubric aimed at PinPoint's failure mode (hard
# negatives: images that resemble the reference but miss the requested change).
# It sits in the cached prefix, so its length costs once per query, not per candidate.
DEFAULT_SYSTEM = (
    "You judge the results of a composed image search. The user shows one or two reference images "
    "and writes an instruction that says how the image they want differs from the reference image, "
    "or how it combines the two reference images. You see one candidate image from the search results "
    "and decide whether it is what the user asked for.\n"
    "Answer {yes} only when all of these hold:\n"
    "- the candidate shows every change the instruction asks for (for example a new colour, material, "
    "pattern, object, setting, style or viewpoint);\n"
    "- what the instruction does not ask to change stays as in the reference image: the kind of object, "
    "its shape and its main details;\n"
    "- with two reference images, the candidate combines them in the way the instruction says.\n"
    "Answer {no} when a requested change is missing, only partly made or contradicted, when the candidate "
    "shows a different kind of object, or when it merely looks like the reference image without the "
    "requested change. A near copy of the reference image that ignores the instruction is a wrong answer. "
    "When unsure, answer {no}."
)
DEFAULT_REFERENCE_LINE = "Reference image {n}: {image}"
DEFAULT_USER = (
    "{references}\n"
    "Instruction: {instruction}\n"
    "Given the reference image(s) and the instruction, is the candidate image relevant? "
    "Answer with '{yes}' or '{no}' only.\n"
    "Candidate image: {candidate}"
)

# `<img1>` / `<img2>` in a PinPoint instruction name the first / second reference image.
_MARKER_RE = re.compile(r"<img([12])>", re.IGNORECASE)

Segment = tuple[Literal["text", "image"], str]  # ("text", text) or ("image", "ref1" | "ref2" | "candidate")


@dataclass(frozen=True)
class PromptTemplate:
    """`system` may hold `{yes}`, `{no}`; `user` holds `{references}`, `{instruction}`,
    `{candidate}` (once each), `{yes}`, `{no}`;
    `reference_line` (one per reference image) holds `{n}` and `{image}`;
    `marker_text` is what `<imgN>` in an instruction becomes (holds `{n}`)."""

    system: str = DEFAULT_SYSTEM
    user: str = DEFAULT_USER
    reference_line: str = DEFAULT_REFERENCE_LINE
    marker_text: str = "reference image {n}"

    def __post_init__(self):
        for name, needed in (
            ("user", ("{references}", "{instruction}", "{candidate}")),
            ("reference_line", ("{n}", "{image}")),
            ("marker_text", ("{n}",)),
        ):
            text = getattr(self, name)
            for placeholder in needed:
                if text.count(placeholder) != 1:
                    raise ValueError(
                        f"prompt template field {name!r} must contain {placeholder} exactly once, got {text!r}"
                    )
        if self.user.index("{references}") > self.user.index("{candidate}"):
            raise ValueError("prompt template field 'user': {references} must come before {candidate}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PromptTemplate":
        unknown = set(d) - {"system", "user", "reference_line", "marker_text"}
        if unknown:
            raise ValueError(f"prompt template: unknown fields {sorted(unknown)}")
        return cls(**d)


def map_image_markers(instruction: str, n_references: int, marker_text: str = "reference image {n}") -> str:
    """Replace `<img1>`/`<img2>` with the labels the prompt gives the reference images.

    A marker naming a reference image the query does not have is an error (the
    official script would silently send a prompt about a missing image).
    """

    def repl(m: re.Match) -> str:
        n = int(m.group(1))
        if n > n_references:
            raise ValueError(
                f"instruction {instruction!r} mentions <img{n}> but the query has {n_references} reference image(s)"
            )
        return marker_text.format(n=n)

    return _MARKER_RE.sub(repl, instruction)


_SLOT_RE = re.compile(r"(\{image\}|\{candidate\})")


def render_segments(
    template: PromptTemplate, instruction: str, n_references: int, yes: str, no: str
) -> tuple[str, list[Segment]]:
    """Return (system text, user segments). The user segments hold exactly
    `n_references` reference images followed by one candidate image, last image."""
    if n_references not in (1, 2):
        raise ValueError(f"a rerank request needs 1 or 2 reference images, got {n_references}")
    instruction = map_image_markers(instruction.strip(), n_references, template.marker_text)
    # Reference lines keep their `{image}` slot; the other fields are filled now.
    ref_lines = "\n".join(template.reference_line.replace("{n}", str(n)) for n in range(1, n_references + 1))
    # Fill fields by plain replacement (not str.format) so braces in an
    # instruction are sent as written.
    user = template.user
    for key, value in (("{yes}", yes), ("{no}", no), ("{references}", ref_lines)):
        user = user.replace(key, value)
    head, tail = user.split("{instruction}")
    parts = _SLOT_RE.split(head) + [instruction] + _SLOT_RE.split(tail)
    # Rejoin the instruction with the text around it, keeping image slots apart.
    segments: list[Segment] = []
    n_ref_seen = 0
    buffer = ""
    for i, part in enumerate(parts):
        if part in ("{image}", "{candidate}") and not _is_instruction_index(i, head):
            if buffer:
                segments.append(("text", buffer))
                buffer = ""
            if part == "{image}":
                n_ref_seen += 1
                segments.append(("image", f"ref{n_ref_seen}"))
            else:
                segments.append(("image", "candidate"))
        else:
            buffer += part
    if buffer:
        segments.append(("text", buffer))
    images = [s[1] for s in segments if s[0] == "image"]
    expected = [f"ref{n}" for n in range(1, n_references + 1)] + ["candidate"]
    if images != expected:
        raise ValueError(f"prompt template places images as {images}, expected {expected}")
    system = template.system.replace("{yes}", yes).replace("{no}", no)
    return system, segments


def _is_instruction_index(i: int, head: str) -> bool:
    # The instruction is inserted as one element right after the split head;
    # it is never an image slot even if a user typed "{image}" in it.
    return i == len(_SLOT_RE.split(head))


def render_display_text(template: PromptTemplate, instruction: str, n_references: int, yes: str, no: str) -> str:
    """The exact prompt as text, images shown as `<image: ref1>` etc. (for the app and results files)."""
    system, segments = render_segments(template, instruction, n_references, yes, no)
    user = "".join(text if kind == "text" else f"<image: {text}>" for kind, text in segments)
    return f"[system]\n{system}\n[user]\n{user}"

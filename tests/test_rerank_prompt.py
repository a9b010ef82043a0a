"""The reranker prompt template: image order, <imgN> markers, exact text."""

from __future__ import annotations

import pytest

from cir_demo.rerank.prompt import PromptTemplate, map_image_markers, render_display_text, render_segments


def images_of(segments):
    return [v for k, v in segments if k == "image"]


def text_of(segments):
    return "".join(v if k == "text" else f"[{v}]" for k, v in segments)


def test_single_reference_segments_are_exact():
    system, segs = render_segments(PromptTemplate(), "make it blue", 1, "yes", "no")
    assert system == PromptTemplate().system.replace("{yes}", "yes").replace("{no}", "no")
    assert "Answer yes only when" in system and "{" not in system
    assert images_of(segs) == ["ref1", "candidate"]
    assert text_of(segs) == (
        "Reference image 1: [ref1]\nInstruction: make it blue\n"
        "Given the reference image(s) and the instruction, is the candidate image relevant? "
        "Answer with 'yes' or 'no' only.\nCandidate image: [candidate]"
    )


def test_two_references_both_sent_and_markers_mapped():
    system, segs = render_segments(PromptTemplate(), "the shape of <img1> in the colour of <IMG2>", 2, "True", "False")
    assert "Answer True only when" in system and "answer False." in system
    assert images_of(segs) == ["ref1", "ref2", "candidate"]
    text = text_of(segs)
    assert "Reference image 1: [ref1]\nReference image 2: [ref2]\n" in text
    assert "the shape of reference image 1 in the colour of reference image 2" in text
    assert "'True' or 'False'" in text


def test_marker_for_missing_reference_is_an_error():
    with pytest.raises(ValueError, match=r"mentions <img2> but the query has 1"):
        map_image_markers("like <img2>", 1)
    assert map_image_markers("like <img1>", 1) == "like reference image 1"


def test_braces_and_slot_names_in_instruction_are_sent_verbatim():
    _, segs = render_segments(PromptTemplate(), "a {candidate} {image} {yes}", 1, "yes", "no")
    assert images_of(segs) == ["ref1", "candidate"]
    assert "Instruction: a {candidate} {image} {yes}\n" in text_of(segs)


def test_display_text_shows_images_and_system():
    text = render_display_text(PromptTemplate(), "x", 2, "yes", "no")
    assert text.startswith("[system]\n")
    assert text.count("<image: ") == 3 and text.index("<image: ref2>") < text.index("<image: candidate>")


def test_template_validation():
    with pytest.raises(ValueError, match="exactly once"):
        PromptTemplate(user="{references} {candidate}")
    with pytest.raises(ValueError, match="must come before"):
        PromptTemplate(user="{candidate} {references} {instruction}")
    with pytest.raises(ValueError, match="unknown fields"):
        PromptTemplate.from_dict({"sistem": "x"})
    with pytest.raises(ValueError, match="1 or 2 reference"):
        render_segments(PromptTemplate(), "x", 3, "yes", "no")
    custom = PromptTemplate(user="{references} then {candidate}. {instruction}?")
    assert PromptTemplate.from_dict(custom.to_dict()) == custom
    _, segs = render_segments(custom, "why", 1, "yes", "no")
    assert text_of(segs) == "Reference image 1: [ref1] then [candidate]. why?"

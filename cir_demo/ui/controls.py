"""Numeric controls that forgive typing: a value outside the range is clamped (and snapped to
the step) instead of failing the whole event with gradio's red "Error" badges, and the page
applies a value on Enter in the number box and on the slider's keys, not only on Tab.

Gradio's slider sends `release` on blur of its number box and on pointer-up of its range;
`CONTROLS_JS` (run once on page load) turns Enter into a blur and a key release on the range
into a pointer-up, so every way of setting a value reaches the same `release` handler.
Gradio also sends `release` on a pointer-up in the number box, i.e. when a visitor clicks into it
to type: that sent the old value, and its answer overwrote what was typed meanwhile; the script
stops that pointer-up (the blur that follows the typing applies the new value).
"""

from __future__ import annotations

import math

import gradio as gr

CSS_CLASS = "cir-num"  # marks the sliders the page script handles


def clamp(value, lo: float, hi: float, step: float | None = None, default: float | None = None) -> int | float:
    """`value` within [lo, hi], on the step grid from lo; not a number -> `default` (else lo)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if math.isnan(x):
        x = lo if default is None else default
    x = min(max(x, lo), hi)
    if step:
        x = min(lo + round((x - lo) / step) * step, hi)
    return int(x) if float(x).is_integer() else x


def number_slider(minimum: float, maximum: float, **kwargs) -> gr.Slider:
    """A `gr.Slider` whose out-of-range input is clamped rather than refused, and that the page
    script applies on Enter and on keys. (The clamp replaces the instance's `preprocess`: a
    subclass of a gradio component makes gradio write a .pyi file next to its source.)"""
    slider = gr.Slider(minimum, maximum, elem_classes=[CSS_CLASS], **kwargs)
    default = slider.value

    def preprocess(payload):
        return clamp(payload, slider.minimum, slider.maximum, slider.step, default)

    slider.preprocess = preprocess
    return slider


CONTROLS_JS = f"""
() => {{
    if (window.cirControls) {{ return; }}
    window.cirControls = true;
    const KEYS = ["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "PageUp", "PageDown", "Home", "End"];
    document.addEventListener("keydown", (e) => {{
        const t = e.target;
        if (e.key === "Enter" && t && t.type === "number" && t.closest && t.closest(".{CSS_CLASS}")) {{
            e.preventDefault();
            t.blur();  // gradio applies the number on blur
        }}
    }}, true);
    document.addEventListener("pointerup", (e) => {{
        const t = e.target;
        if (t && t.type === "number" && t.closest && t.closest(".{CSS_CLASS}")) {{
            e.stopPropagation();  // clicking into the box to type is not a release
        }}
    }}, true);
    document.addEventListener("keyup", (e) => {{
        const t = e.target;
        if (KEYS.includes(e.key) && t && t.type === "range" && t.closest && t.closest(".{CSS_CLASS}")) {{
            t.dispatchEvent(new PointerEvent("pointerup", {{bubbles: true}}));  // as if released by the mouse
        }}
    }}, true);
}}
"""

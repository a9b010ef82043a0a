"""Keep a session's copy of the page from growing with every event (gradio 6.31).

When a callback updates a component's properties (`gr.update(choices=...)`), gradio stores a new
instance of the component in the session, and that instance gets a fresh block id. When a later
event reads the component as an input, gradio's `preprocess_data` files the session's instance
under that fresh id as well, as if it were a block of the page. A component that is both read and
re-configured by an event (the paraphrase radio on every query view) therefore adds one component
and one config dict to the session per event, for as long as the session lives, so the server's
memory grows under steady load (docs/benchmarks.md, "Load test and memory"). The page has no such block,
so after preprocessing every id that is not one of the page's own is dropped from the session;
the session's entry under the component's real id (what later events and deep links use) stays.
"""

from __future__ import annotations

import functools

import gradio as gr


def drop_stray_blocks(state, page_ids) -> int:
    """Remove the session's blocks (and their configs) whose id is not one of the page's; returns
    how many were removed."""
    blocks = state.blocks_config.blocks
    stray = [key for key in blocks if key not in page_ids]
    for key in stray:
        del blocks[key]
        state.config_values.pop(key, None)
    return len(stray)


def bound_session_copies(demo: gr.Blocks) -> gr.Blocks:
    """Make every event of `demo` (built, not yet launched) drop the stray session blocks."""
    page_ids = frozenset(demo.default_config.blocks)
    preprocess = demo.preprocess_data

    @functools.wraps(preprocess)
    async def preprocess_data(block_fn, inputs, state, *args, **kwargs):
        try:
            return await preprocess(block_fn, inputs, state, *args, **kwargs)
        finally:
            if state is not None:
                drop_stray_blocks(state, page_ids)

    demo.preprocess_data = preprocess_data
    return demo

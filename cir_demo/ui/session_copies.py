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

A session also keeps, for gradio's deep links (`gr.DeepLinkButton`, which this app does not offer), a
config dict of every component of the page, built when the session starts and rebuilt (twice, each
with the component's JSON schema) for each component an event updates: on gradio's event loop, which
every visitor shares, that was a third of its work under load (docs/benchmarks.md). `LeanSession` builds
those dicts only when a deep link asks for them (`components`), from the session's latest components.
"""

from __future__ import annotations

import datetime
import functools

import gradio as gr
from gradio.state_holder import SessionState, StateHolder


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


class _PageOnly:
    """What `SessionState.__init__` reads of the Blocks, with no block to copy a config of."""

    def __init__(self, blocks: gr.Blocks):
        self.default_config = blocks.default_config
        self.blocks: dict = {}


class LeanSession(SessionState):
    """A session's state without the config copies (`config_values`) gradio keeps up to date on every event
    for deep links; `components` builds them when asked, from the session's components."""

    def __init__(self, blocks: gr.Blocks):
        super().__init__(_PageOnly(blocks))
        self._page_ids = frozenset(blocks.blocks)

    def __setitem__(self, key: int, value) -> None:
        block = self.blocks_config.blocks.get(key)
        if isinstance(block, gr.State):
            self._state_ttl[key] = (block.time_to_live, datetime.datetime.now())
            self.state_data[key] = value
        else:
            self.blocks_config.blocks[key] = value

    def _update_config(self, key: int) -> None:
        pass

    def _update_value_in_config(self, key: int, value) -> None:
        pass

    @property
    def components(self):
        blocks = self.blocks_config.blocks
        for key in [k for k in blocks if k in self._page_ids]:
            config = self.blocks_config.config_for_block(key, [], blocks[key])
            if config:
                yield config


class LeanSessions(StateHolder):
    """gradio's sessions by session hash, each a `LeanSession`."""

    def __getitem__(self, session_id: str) -> SessionState:
        if session_id not in self.session_data:
            self.session_data[session_id] = LeanSession(self.blocks)
        return super().__getitem__(session_id)


def lean_sessions(demo: gr.Blocks) -> None:
    """Make the launched `demo`'s sessions `LeanSession`s (those begun before keep gradio's own)."""
    holder = getattr(getattr(demo, "server_app", None), "state_holder", None)
    if type(holder) is StateHolder:
        holder.__class__ = LeanSessions

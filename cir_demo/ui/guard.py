"""Turn exceptions in callbacks into messages on the page; the app keeps running."""

from __future__ import annotations

import functools
import html
import inspect
import logging
from typing import Callable

import gradio as gr

from cir_demo.errors import user_message
from cir_demo.explorer import ServiceError
from cir_demo.explorer.public_text import hide_paths

log = logging.getLogger("cir_demo.ui")


def error_message(action: str, exc: BaseException) -> str:
    """The text a user sees: service errors and the errors the command line shows as one line
    (`cir_demo.errors.user_message`: the same words in both places) as written, anything else with its
    type; no server path (`hide_paths`)."""
    known = str(exc) if isinstance(exc, ServiceError) else user_message(exc)
    if known is not None:
        text = f"{action}: {known}"
    else:
        text = f"{action} failed ({type(exc).__name__}: {exc}). The app is still running; try another query or setting."
    return html.escape(hide_paths(text), quote=False)  # gradio renders the message as HTML


def guarded(action: str) -> Callable:
    """Decorator: a ServiceError or any other exception becomes a `gr.Error` with a clear message
    (gradio shows it and leaves the outputs as they were). Signatures are kept, so
    `gr.SelectData` / `gr.Request` / `gr.Progress` injection still works."""

    def visible(exc: Exception) -> gr.Error:
        if not isinstance(exc, ServiceError) and user_message(exc) is None:  # a bug: keep the traceback in the log
            log.exception("%s", action)
        return gr.Error(error_message(action, exc), print_exception=False)

    def wrap(fn: Callable) -> Callable:
        if inspect.isasyncgenfunction(fn):

            @functools.wraps(fn)
            async def agen(*args, **kwargs):
                try:
                    async for item in fn(*args, **kwargs):
                        yield item
                except gr.Error:
                    raise
                except Exception as exc:
                    raise visible(exc) from exc

            return agen

        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen(*args, **kwargs):
                try:
                    yield from fn(*args, **kwargs)
                except gr.Error:
                    raise
                except Exception as exc:
                    raise visible(exc) from exc

            return gen

        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:
                raise visible(exc) from exc

        return call

    return wrap

"""Name lookup with a "did you mean" answer for unknown names, and "module:attribute" references
(how registration tables name code that is imported only when used)."""

from __future__ import annotations

import difflib
import importlib
from typing import Iterable


class UnknownNameError(KeyError):
    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        msg = f"unknown {kind} {name!r}.{hint} Known: {', '.join(known) or '(none)'}."
        super().__init__(msg)
        self.kind, self.name, self.suggestions = kind, name, close

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


def lookup(kind: str, name: str, table: dict):
    try:
        return table[name]
    except KeyError:
        raise UnknownNameError(kind, name, table.keys()) from None


def resolve_ref(ref: str, what: str):
    """The attribute a "package.module:attribute" reference names, imported now; `what` names the
    table row in errors."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{what}: {ref!r} must look like 'package.module:attribute'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"{what}: {module_name} has no {attr}") from None

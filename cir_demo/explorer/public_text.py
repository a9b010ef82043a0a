"""Text a visitor reads names no server path: the data folders, the committed weights and any
other absolute path in a status line, a warning or an error become what they are ("the cache
folder", "the weights of world-cir", "a server file"). The server's log keeps the paths.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# an absolute POSIX path, not inside a URL, a word or markup ("1/4", "it/s", "http://a/b", "</script>",
# "<root>/img_raw/" are left)
_ABSOLUTE = re.compile(r"(?<![\w.:/~<>-])(?:/[\w.~-][^\s/'\"`()<>,;|]*)+/?")
_REST = r"(?:/[^\s'\"`()<>,;|]*)?"  # the rest of a path below a folder


def _named_folders() -> list[tuple[str, str]]:
    """(absolute folder, what a visitor reads) for the server's folders, the most specific first."""
    from cir_demo import paths

    named = []
    for what, get in (
        ("the cache folder", paths.cache_dir),
        ("the indexes folder", paths.indexes_dir),
        ("the runs folder", paths.runs_dir),
        ("the data folder", paths.data_root),
        ("the app folder", lambda: Path(paths.__file__).resolve().parent.parent),
    ):
        try:
            folder = Path(get()).absolute()
        except Exception:  # noqa: BLE001 - a data folder variable naming a file: nothing to hide
            continue
        named += [(str(folder), what), (str(folder.resolve()), what)]
    return sorted(set(named), key=lambda pair: len(pair[0]), reverse=True)


def _assets_prefixes() -> list[str]:
    from cir_demo import paths

    assets = Path(paths.assets_dir()).absolute()
    return sorted({str(assets), str(assets.resolve())}, key=len, reverse=True)


def hide_paths(text: str) -> str:
    """`text` with every server path replaced by what it is."""
    if not text or "/" not in text:
        return text
    for prefix in _assets_prefixes():  # the committed weights: by the model they belong to
        text = re.sub(re.escape(prefix) + r"/([\w.-]+)" + _REST, lambda m: f"the weights of {m.group(1)}", text)
    for folder, what in _named_folders():
        text = re.sub(re.escape(folder) + _REST, what, text)
    return _ABSOLUTE.sub(_server_file, text)


def _server_file(match: re.Match) -> str:
    """ "a server file" for a path of this machine: two components or more, or one that exists here (a lone
    "/failures" or "/img_raw/" is an endpoint's or a layout's name, not a path of the server)."""
    path = match.group(0)
    if path.rstrip("/").count("/") > 1 or os.path.lexists(path):
        return "a server file"
    return path


QUOTE_CHARS = 100  # an input quoted in an error is cut to this many characters
MAX_ERROR_CHARS = 2000  # an error line is never longer (a long list of valid names is cut too)


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def cut_inputs(text: str, inputs) -> str:
    """Error `text` with each string of `inputs` (a request's arguments) longer than QUOTE_CHARS quoted by its
    first QUOTE_CHARS characters only (a 1 MB id in is not 1 MB out), at most MAX_ERROR_CHARS in all."""
    for value in sorted({v for v in _strings(inputs) if len(v) > QUOTE_CHARS}, key=len, reverse=True):
        for form in dict.fromkeys((value, repr(value)[1:-1])):
            if len(form) > QUOTE_CHARS:
                text = text.replace(form, form[:QUOTE_CHARS] + "…")
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"

"""Text a visitor reads names no server path: the data folders, the committed weights and any
other absolute path in a status line, a warning or an error become what they are ("the cache
folder", "the weights of world-cir", "a server file"). The server's log keeps the paths.
"""

from __future__ import annotations

import re
from pathlib import Path

# an absolute POSIX path, not inside a URL or a word ("1/4", "it/s", "http://a/b" are left)
_ABSOLUTE = re.compile(r"(?<![\w.:/~-])(?:/[\w.~-][^\s/'\"`()<>,;|]*)+/?")
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
    return _ABSOLUTE.sub("a server file", text)

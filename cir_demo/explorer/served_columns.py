"""`ServedColumns`: which columns an app serves: its retrievers, fixed at start, and the results files
visitors (or API clients) upload, each kept for the visitor who sent it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

from cir_demo.explorer.config import MAX_COLUMNS, ServiceError, retriever_modality


class ServedColumns:
    """The app's retrievers and the uploaded results files, with each column's modality (image, text,
    composed, file). Every request naming columns is checked here, so an upload is served to its owner's
    session only as long as it is kept."""

    max_uploaded_runs = 16  # results files one visitor (or API client) keeps at once (its oldest is dropped)
    max_upload_owners = 64  # visitors whose uploads are kept at once (the longest idle one's are dropped)

    def __init__(self, benchmark, engine, retriever_names: Sequence[str]):
        from cir_demo.retrievers.registry import get_config

        self.benchmark = benchmark
        self.engine = engine
        self.retriever_names = list(retriever_names)
        self.modality = {n: retriever_modality(get_config(n)) for n in self.retriever_names}
        self.uploaded: dict[str, str] = {}  # column name -> the uploaded file's name (add_file_run)
        self._owners: dict[str, list[str]] = {}  # owner -> its columns, oldest first; last active owner last
        self._lock = threading.RLock()

    def check(self, names: Sequence[str] | None) -> list[str]:
        """The requested columns (default: the first four), validated; every caller (links,
        checkboxes, uploads) goes through here, so a name asked for twice is one column."""
        names = list(dict.fromkeys(self.retriever_names[:MAX_COLUMNS] if names is None else names))
        unknown = [n for n in names if n not in self.retriever_names and n not in self.uploaded]
        if unknown:
            raise ServiceError(
                f"unknown retriever(s) {', '.join(unknown)}; this app serves: "
                f"{', '.join(self.retriever_names) or 'none'}"
            )
        if len(names) > MAX_COLUMNS:
            raise ServiceError(f"at most {MAX_COLUMNS} columns side by side; {len(names)} retrievers selected")
        return names

    def file_runs(self) -> list[str]:
        """The columns served from `--runs` results files, in column order."""
        return [n for n in self.retriever_names if hasattr(self.engine.retriever(n), "rankings")]

    def add_file_run(self, path: str | Path, name: str, owner: str = "") -> tuple[str, list[str]]:
        """A results file uploaded in the page or the API, read onto the benchmark as `--eval` reads it, as a
        column of `owner` (a visitor's session; ServiceError: one line naming the file). Its column is named
        `<name>-<first 6 hex of its sha256>`, so visitors' files never collide; returns (that name, notes).
        Each owner keeps its own `max_uploaded_runs` newest files: another's uploads never evict them."""
        from cir_demo.explorer.own_runs import RunFile, column_stem, load_run, register_runs
        from cir_demo.utils.io import sha256_file

        try:
            digest = sha256_file(path)[:6]
        except OSError as exc:
            raise ServiceError(f"{Path(path).name}: cannot be read ({exc.strerror or exc})") from None
        column = f"{column_stem(name)}-{digest}"
        retriever, notes = load_run(self.benchmark, path, column)
        with self._lock:
            register_runs([RunFile(column, str(path))])
            self.engine.add_retriever(retriever)
            self.uploaded[column] = Path(path).name
            self.modality[column] = "file"
            mine = [c for c in self._owners.pop(owner, []) if c != column] + [column]
            self._owners[owner] = mine[-self.max_uploaded_runs :]  # re-inserted: the last active owner
            dropped = mine[: -self.max_uploaded_runs]
            while len(self._owners) > self.max_upload_owners:
                dropped += self._owners.pop(next(iter(self._owners)))
            kept = {c for columns in self._owners.values() for c in columns}
            for old in dict.fromkeys(dropped):
                if old not in kept:  # the same file uploaded by another owner is the same column: kept for them
                    self.engine.drop_retriever(old)
                    self.uploaded.pop(old, None)
                    self.modality.pop(old, None)
        return column, notes

    def uploads_of(self, owner: str = "") -> list[str]:
        """The columns `owner` uploaded that are still served, oldest first."""
        with self._lock:
            return list(self._owners.get(owner, ()))

"""On-disk reranker score cache (SQLite, standard library).

Key: (reranker spec hash, instruction text, reference ids in order, candidate id).
Toggling the reranker in the app or re-running an evaluation reads scores
from here instead of paying for the model again.

Safe for one writer (and any number of readers, WAL mode); every `put_many` /
`put_queries` is one transaction, so an interrupted run leaves whole batches or nothing.
Scores flagged as errors are never stored: a timeout may succeed next time.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

from cir_demo.rerank.base import CandidateScore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS scores (
    spec_hash TEXT NOT NULL,
    instruction TEXT NOT NULL,
    reference_ids TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    p_yes REAL,
    logit_yes REAL,
    logit_no REAL,
    flag TEXT,
    created REAL NOT NULL,
    p_near REAL,
    PRIMARY KEY (spec_hash, instruction, reference_ids, candidate_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS specs (
    spec_hash TEXT PRIMARY KEY,
    spec_json TEXT NOT NULL,
    created REAL NOT NULL
);
"""

_MAX_VARS = 500  # SQLite's bound-parameter limit is 999 on old builds


def default_cache_path() -> Path:
    from cir_demo.paths import cache_dir

    return cache_dir() / "rerank" / "scores.sqlite"


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """Caches written before P(near) existed get its column (empty: those backends had no such answer)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(scores)")}
    if "p_near" not in columns:
        db.execute("ALTER TABLE scores ADD COLUMN p_near REAL")


_INSERT = (
    "INSERT OR REPLACE INTO scores (spec_hash, instruction, reference_ids, candidate_id, p_yes, logit_yes, "
    "logit_no, flag, created, p_near) VALUES (?,?,?,?,?,?,?,?,?,?)"
)


def _refs_key(reference_ids: Sequence[str]) -> str:
    return json.dumps([str(r) for r in reference_ids])


class ScoreCache:
    """Reranker scores on disk. Use as a context manager or call `close()`.

    The cache is an optimisation, so it never stops a run: a damaged database file is moved
    aside (`<name>.damaged-<time>`) and started afresh; where the folder cannot be written,
    scores are kept in memory for this process. Either way `warning` says so (one line,
    also printed once to stderr).
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_cache_path()
        self.warning: str | None = None
        self.in_memory = False
        self._lock = threading.Lock()  # the database connection
        self._memory_lock = threading.Lock()  # the held rows and the counters
        self._writes: queue.Queue | None = None  # rows the writer thread stores, once a spec is held
        self.hits = 0
        self.misses = 0
        # spec hash -> {(instruction, reference ids key): {candidate id: stored row}}: see `hold`
        self._held: dict[str, dict[tuple[str, str], dict[str, tuple]]] = {}
        try:
            self._db = self._open(self.path)
        except sqlite3.DatabaseError as exc:
            if self._is_damaged(exc) and self._move_aside():
                try:
                    self._db = self._open(self.path)
                    self._warn(f"was damaged ({exc}); moved it aside and started a new one")
                    return
                except (OSError, sqlite3.Error) as exc2:
                    exc = exc2
            self._fall_back(exc)
        except OSError as exc:
            self._fall_back(exc)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), check_same_thread=False, timeout=30.0)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a commit is still atomic and the file never corrupt, but it is not synced
            # to disk each time (a power cut may drop the last scores; a cache can afford that, and an
            # eval commits once per chunk of queries)
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            _add_missing_columns(db)
            db.commit()
            db.execute("SELECT COUNT(*) FROM specs").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    @staticmethod
    def _is_damaged(exc: Exception) -> bool:
        text = str(exc).lower()
        return "not a database" in text or "malformed" in text or "corrupt" in text

    def _move_aside(self) -> bool:
        try:
            self.path.rename(self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}"))
            for extra in ("-wal", "-shm"):
                Path(f"{self.path}{extra}").unlink(missing_ok=True)
            return True
        except OSError:
            return False

    def _fall_back(self, exc: Exception) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.executescript(_SCHEMA)
        self.in_memory = True
        self._warn(f"cannot be used ({exc}); keeping reranker scores in memory for this run")

    def _warn(self, what: str) -> None:
        import sys

        self.warning = f"warning: reranker score cache {self.path} {what}"
        print(self.warning, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ reads
    def hold(self, spec_hash: str) -> None:
        """Serve `spec_hash`'s scores from memory from now on: the rows stored now are read once, and those
        this object stores later are kept too. For a run that reranks the same queries once per retriever
        (`--eval`): ~38,000 lookups, most of them hits, then cost no query. From the first hold, stored
        rows are written to disk by a thread of their own, each batch still in one transaction, so the
        run goes on meanwhile (`flush` waits for them; reads from disk and `close` do). Rows another
        process stores meanwhile are not seen (a miss: scored again, as without a cache)."""
        with self._memory_lock:
            if spec_hash in self._held:
                return
        self.flush()
        held: dict[tuple[str, str], dict[str, tuple]] = {}
        with self._lock:
            for instruction, refs, cid, *row in self._db.execute(
                "SELECT instruction, reference_ids, candidate_id, p_yes, logit_yes, logit_no, flag, p_near FROM scores "
                "WHERE spec_hash=?",
                (spec_hash,),
            ):
                held.setdefault((instruction, refs), {})[cid] = tuple(row)
        with self._memory_lock:
            self._held[spec_hash] = held
            if self._writes is None:
                self._writes = queue.Queue()
                threading.Thread(
                    target=self._write_behind, args=(self._writes,), name="score-cache", daemon=True
                ).start()

    def _write_behind(self, writes: queue.Queue) -> None:
        while (rows := writes.get()) is not None:
            try:
                self._store(rows)
            except Exception as exc:  # a cache never stops a run: these scores are computed again next time
                self._warn(f"could not store {len(rows)} scores ({exc})")
            finally:
                writes.task_done()
        writes.task_done()

    def flush(self) -> None:
        """Wait until every row stored so far is on disk (rows of a held spec are written behind)."""
        if self._writes is not None:
            self._writes.join()

    def get_many(
        self, spec_hash: str, instruction: str, reference_ids: Sequence[str], candidate_ids: Sequence[str]
    ) -> dict[str, CandidateScore]:
        """Cached scores for those of `candidate_ids` that are present: {candidate_id: CandidateScore}."""
        refs = _refs_key(reference_ids)
        wanted = list(dict.fromkeys(str(c) for c in candidate_ids))
        found: dict[str, CandidateScore] = {}
        with self._memory_lock:
            held = self._held.get(spec_hash)
            if held is not None:
                rows = held.get((instruction, refs), {})
                for cid in wanted:
                    row = rows.get(cid)
                    if row is not None:
                        found[cid] = CandidateScore(cid, *row)
                self.hits += len(found)
                self.misses += len(wanted) - len(found)
                return found
        self.flush()
        with self._lock:
            for start in range(0, len(wanted), _MAX_VARS):
                chunk = wanted[start : start + _MAX_VARS]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    "SELECT candidate_id, p_yes, logit_yes, logit_no, flag, p_near FROM scores "
                    f"WHERE spec_hash=? AND instruction=? AND reference_ids=? AND candidate_id IN ({marks})",
                    (spec_hash, instruction, refs, *chunk),
                ).fetchall()
                for cid, p, ly, ln, flag, p_near in rows:
                    found[cid] = CandidateScore(cid, p, ly, ln, flag, p_near)
        with self._memory_lock:
            self.hits += len(found)
            self.misses += len(wanted) - len(found)
        return found

    # ------------------------------------------------------------------ writes
    def put_many(
        self, spec_hash: str, instruction: str, reference_ids: Sequence[str], scores: Iterable[CandidateScore]
    ) -> int:
        """Store scores (replacing older ones with the same key); error-flagged scores are skipped. Returns the count stored."""
        return self.put_queries(spec_hash, [(instruction, reference_ids, scores)])

    def put_queries(
        self, spec_hash: str, entries: Iterable[tuple[str, Sequence[str], Iterable[CandidateScore]]]
    ) -> int:
        """`put_many` for several queries, given as (instruction, reference_ids, scores), in one transaction
        (all of them stored, or none). Returns the count stored."""
        now = time.time()
        rows = [
            (spec_hash, instruction, refs, s.candidate_id, s.p_yes, s.logit_yes, s.logit_no, s.flag, now, s.p_near)
            for instruction, reference_ids, scores in entries
            for refs in (_refs_key(reference_ids),)
            for s in scores
            if not s.is_error
        ]
        if not rows:
            return 0
        with self._memory_lock:
            held = self._held.get(spec_hash)
            for _, instruction, refs, cid, p, ly, ln, flag, _, p_near in rows if held is not None else ():
                held.setdefault((instruction, refs), {})[cid] = (p, ly, ln, flag, p_near)
            writes = self._writes
        if writes is not None:
            writes.put(rows)
        else:
            self._store(rows)
        return len(rows)

    def _store(self, rows: list) -> None:
        """Rows into the database, in one transaction."""
        with self._lock:
            try:
                with self._db:
                    self._db.executemany(_INSERT, rows)
            except sqlite3.OperationalError as exc:  # disk full, folder made read-only meanwhile
                self._db.close()
                self._fall_back(exc)
                with self._db:
                    self._db.executemany(_INSERT, rows)

    def register_spec(self, spec_hash: str, spec: dict) -> None:
        """Keep the full spec beside its hash so the cache can be read without the code that made it."""
        row = (spec_hash, json.dumps(spec, sort_keys=True, ensure_ascii=False), time.time())
        with self._lock:
            try:
                with self._db:
                    self._db.execute("INSERT OR IGNORE INTO specs VALUES (?,?,?)", row)
            except sqlite3.OperationalError as exc:
                self._db.close()
                self._fall_back(exc)
                with self._db:
                    self._db.execute("INSERT OR IGNORE INTO specs VALUES (?,?,?)", row)

    def spec(self, spec_hash: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT spec_json FROM specs WHERE spec_hash=?", (spec_hash,)).fetchone()
        return json.loads(row[0]) if row else None

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM scores").fetchone()[0])

    def close(self) -> None:
        """Every row written (`flush`), then the database closed."""
        if self._writes is not None:
            self._writes.put(None)
            self._writes.join()
            self._writes = None
        with self._lock:
            self._db.close()

    def __enter__(self) -> "ScoreCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

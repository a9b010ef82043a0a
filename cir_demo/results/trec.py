"""TREC run files: one line per retrieved image, `qid Q0 docid rank score tag`, whitespace separated.

The format trec_eval, ir_datasets and pyserini use (`.trec`, `.run`, `.txt`).
As trec_eval does, we order each query's lines by score descending, equal
scores by image id descending, and ignore the rank column (counted and
warned about when it disagrees with that order). The second column is not
checked (trec_eval ignores it too). An image listed twice for one query is an
error (trec_eval refuses such a run as well). Blank lines are skipped.
"""

from __future__ import annotations

import math
from pathlib import Path

from cir_demo.results.parsed import Entry, Issues, ParsedResults, rank_scores, short, trec_order

NAME = "trec"
SHAPE = '"<query> Q0 <image> <rank> <score> <tag>" per line'
SUFFIXES = (".trec", ".run", ".txt")


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _score(text: str) -> float | None:
    value = _float(text)
    return value if value is not None and math.isfinite(value) else None


def fits_line(line: str) -> bool:
    """Its shape: six fields with a number in the score column (NaN or inf is this format's fault,
    said by `read_text`)."""
    parts = line.split()
    return len(parts) == 6 and _float(parts[4]) is not None and parts[3].lstrip("-").isdigit()


def render(rows: list[tuple[str, list[str], list[float] | None]], tag: str = "cir_demo") -> str:
    """A written file: one line per (query key, image) with its rank and score (n - r without scores)."""
    lines = []
    for key, ids, scores in rows:
        scores = scores if scores is not None else rank_scores(len(ids))
        lines += [f"{key} Q0 {i} {r} {v:.6g} {tag}" for r, (i, v) in enumerate(zip(ids, scores), start=1)]
    return "\n".join(lines) + ("\n" if lines else "")


def read_text(path: Path, text: str) -> ParsedResults:
    issues = Issues(path, NAME)
    rows: dict[str, list[tuple[str, float, int]]] = {}
    first_line: dict[str, int] = {}
    seen: dict[tuple[str, str], int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        loc = f"line {lineno}"
        if len(parts) != 6:
            issues.error(loc, None, f"expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}: {short(line)}")
            continue
        qid, _, doc, rank, score = parts[:5]
        value = _score(score)
        if value is None:
            issues.error(
                loc, "score", f"the score of image {doc!r} for query {qid!r} must be a finite number, got {score!r}"
            )
            continue
        if not rank.lstrip("-").isdigit():
            issues.error(loc, "rank", f"rank must be an integer, got {rank!r}")
            continue
        if (qid, doc) in seen:
            issues.error(
                loc, "docid", f"image {doc!r} is listed twice for query {qid!r} (first on line {seen[qid, doc]})"
            )
            continue
        seen[qid, doc] = lineno
        first_line.setdefault(qid, lineno)
        rows.setdefault(qid, []).append((doc, value, int(rank)))
        if len(issues.errors) > 200:
            break
    issues.raise_if_any()
    out: list[Entry] = []
    rank_disagrees = 0
    for qid, lines in rows.items():
        ids, scores = trec_order([d for d, _, _ in lines], [s for _, s, _ in lines])
        by_rank = [d for d, _, _ in sorted(lines, key=lambda r: r[2])]
        rank_disagrees += by_rank != ids
        out.append(Entry(qid, ids, scores, f"line {first_line[qid]}"))
    notes = []
    if rank_disagrees:
        notes.append(
            f"{rank_disagrees} queries have a rank column that disagrees with their score order; "
            "ranked by score, as trec_eval does"
        )
    return ParsedResults(NAME, out, None, notes)

"""The README's and docs' results tables, drawn from the committed record CSVs (docs/results/record*.csv,
written by `python -m cir_demo record`), so no result is copied by hand.

A table lives between two markers in a Markdown file:

    <!-- table: KIND CSV [RETRIEVER] (python -m cir_demo docs tables) -->
    ...
    <!-- end table -->

KIND: `summary` (per retriever: mean first stage -> reranked, and on how many worlds the interval
excludes 0), `effects` (per effect and retriever: k of n worlds, the losing way in brackets) or
`per-world` (one retriever, each world's difference with its 95% interval). CSV: a path from the
repository root. `python -m cir_demo docs tables` rewrites every marked region of README.md and
docs/*.md; `--check` only says which differ (tests/test_record_tables.py runs it on the repository).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path
from statistics import fmean

from cir_demo.harness.seed_record import CSV_FIELDS, JUDGE_EFFECTS

BEGIN = re.compile(r"<!-- table: (?P<spec>[^>]*?) \(python -m cir_demo docs tables\) -->\n")
END = "<!-- end table -->"
KINDS = ("summary", "effects", "per-world")
SPLITS = ("test", "compositional")
MEASURE_NAMES = {
    "mAP@10": "mAP@10",
    "NegRecall@10": "NegRecall@10",
    "ling_sens_paraphrase_range": "phrasing sensitivity",
}
FLOATS = ("first_stage", "reranked", "difference", "lo", "hi")


def read_record_csv(path: Path) -> list[dict]:
    """The rows of a record CSV, numbers parsed; a ValueError naming the file, row and field otherwise."""
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such file (`python -m cir_demo record` writes record.csv into its --out)")
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != CSV_FIELDS:
            raise ValueError(f"{path}: header is {reader.fieldnames}, expected {list(CSV_FIELDS)}")
        rows = []
        for line, row in enumerate(reader, 2):
            for field in (*FLOATS, "world_seed", "fold", "n_groups", "n_boot"):
                try:
                    row[field] = float(row[field]) if field in FLOATS else int(row[field])
                except (TypeError, ValueError):
                    raise ValueError(f"{path}: line {line}: {field} is {row[field]!r}, not a number") from None
            if row["better"] not in ("up", "down"):
                raise ValueError(f"{path}: line {line}: better is {row['better']!r}, expected up or down")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def verdict(row: dict) -> str:
    """'gain' when the interval excludes 0 the gaining way, 'loss' the losing way, '' when it holds 0."""
    if row["better"] == "up":
        return "gain" if row["lo"] > 0 else "loss" if row["hi"] < 0 else ""
    return "gain" if row["hi"] < 0 else "loss" if row["lo"] > 0 else ""


def _cells(rows: list[dict]) -> dict[tuple, list[dict]]:
    """(split, retriever, measure) -> its rows, one per world."""
    out = defaultdict(list)
    for r in rows:
        out[(r["split"], r["retriever"], r["measure"])].append(r)
    return out


def _retrievers(rows: list[dict]) -> list[str]:
    """Retrievers by mean first-stage test mAP@10, strongest first (then by name)."""
    cells = _cells(rows)
    names = sorted({r["retriever"] for r in rows})
    return sorted(names, key=lambda n: (-fmean(r["first_stage"] for r in cells.get(("test", n, "mAP@10"), [])), n))


def _k_of_n(cell: list[dict]) -> tuple[int, int, int]:
    verdicts = [verdict(r) for r in cell]
    return verdicts.count("gain"), verdicts.count("loss"), len(cell)


def _seeds(rows: list[dict]) -> list[int]:
    return sorted({r["world_seed"] for r in rows})


def render_summary(rows: list[dict]) -> list[str]:
    cells = _cells(rows)
    measures = [(s, m) for s in SPLITS for m in ("mAP@10", "NegRecall@10")]
    lines = [
        "| retriever | " + " | ".join(f"{s} {m}" for s, m in measures) + " |",
        "|---" * (len(measures) + 1) + "|",
    ]
    for name in _retrievers(rows):
        out = []
        for split, m in measures:
            cell = cells.get((split, name, m), [])
            if not cell:
                out.append("")
                continue
            gain, loss, n = _k_of_n(cell)
            first, reranked = fmean(r["first_stage"] for r in cell), fmean(r["reranked"] for r in cell)
            out.append(f"{first:.4f} → {reranked:.4f} ({gain}/{n}" + (f"; {loss} lose" if loss else "") + ")")
        lines.append(f"| {name} | " + " | ".join(out) + " |")
    return lines


def render_effects(rows: list[dict]) -> list[str]:
    cells = _cells(rows)
    names = _retrievers(rows)
    lines = ["| effect | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for split in SPLITS:
        for measure, better in JUDGE_EFFECTS:
            out = []
            for name in names:
                cell = cells.get((split, name, measure))
                gain, loss, n = _k_of_n(cell) if cell else (0, 0, 0)
                out.append(f"{gain} of {n}" + (f" ({loss})" if loss else "") if cell else "")
            lines.append(f"| {split}: {MEASURE_NAMES[measure]} {better} | " + " | ".join(out) + " |")
    return lines


def render_per_world(rows: list[dict], retriever: str) -> list[str]:
    cells = _cells(rows)
    measures = [(s, m) for s in SPLITS for m in ("mAP@10", "NegRecall@10")]
    lines = ["| world | " + " | ".join(f"{s} {m}" for s, m in measures) + " |", "|---" * (len(measures) + 1) + "|"]
    if not any(r["retriever"] == retriever for r in rows):
        raise ValueError(f"no rows of retriever {retriever!r}")
    for seed in _seeds(rows):
        out = []
        for split, m in measures:
            r = next((r for r in cells.get((split, retriever, m), []) if r["world_seed"] == seed), None)
            out.append(f"{r['difference']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}]" if r else "")
        lines.append(f"| {seed} | " + " | ".join(out) + " |")
    return lines


def render(spec: str, root: Path) -> list[str]:
    """The table lines a marker's `spec` ("KIND CSV [RETRIEVER]") asks for."""
    parts = spec.split()
    if len(parts) < 2 or parts[0] not in KINDS or (parts[0] == "per-world") != (len(parts) == 3) or len(parts) > 3:
        raise ValueError(
            f"table marker {spec!r}: expected 'KIND CSV' (KIND one of {', '.join(KINDS)}) or 'per-world CSV RETRIEVER'"
        )
    rows = read_record_csv(root / parts[1])
    if parts[0] == "summary":
        return render_summary(rows)
    if parts[0] == "effects":
        return render_effects(rows)
    return render_per_world(rows, parts[2])


def regenerate(text: str, root: Path, where: str = "") -> str:
    """`text` with every marked table region redrawn from its CSV."""
    out, pos = [], 0
    for m in BEGIN.finditer(text):
        if m.start() < pos:
            continue
        end = text.find(END, m.end())
        if end < 0:
            raise ValueError(f"{where}: table marker {m.group('spec')!r} has no '{END}'")
        try:
            table = render(m.group("spec"), root)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        out += [text[pos : m.end()], "\n".join(table) + "\n"]
        pos = end
    return "".join(out) + text[pos:]


def doc_files(root: Path) -> list[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def update_tables(root: Path, check: bool = False) -> list[Path]:
    """The Markdown files whose tables differ from their CSVs (rewritten atomically unless `check`)."""
    from cir_demo.utils.io import write_text_atomic

    stale = []
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")
        if "<!-- table: " not in text:
            continue
        new = regenerate(text, root, str(path))
        if new != text:
            stale.append(path)
            if not check:
                write_text_atomic(path, new)
    return stale

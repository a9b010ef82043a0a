"""The results tables of README.md and docs/*.md against the record CSVs they are drawn from: the
committed ones agree, a changed number is caught, and the counts equal a naive count of the rows."""

import csv
import re
import shutil

import pytest

from cir_demo.harness.record_tables import read_record_csv, render_effects, update_tables
from cir_demo.harness.seed_record import CSV_FIELDS
from cir_demo.paths import REPO_ROOT

MARKED_CSV = "docs/results/record.csv"


def _row(seed, split, retriever, measure, first, reranked, lo, hi, better="up"):
    return {
        "world_size": "tiny",
        "fold": 0,
        "world_seed": seed,
        "split": split,
        "retriever": retriever,
        "measure": measure,
        "better": better,
        "first_stage": first,
        "reranked": reranked,
        "difference": reranked - first,
        "lo": lo,
        "hi": hi,
        "n_groups": 40,
        "n_boot": 200,
    }


def _write_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


ROWS = [
    _row(1, "test", "cir", "mAP@10", 0.10, 0.20, 0.05, 0.15),  # gain
    _row(2, "test", "cir", "mAP@10", 0.12, 0.13, -0.01, 0.03),  # neither
    _row(1, "test", "clip", "mAP@10", 0.02, 0.01, -0.02, -0.005),  # loss
    _row(2, "test", "clip", "mAP@10", 0.04, 0.05, 0.001, 0.02),  # gain
    _row(1, "compositional", "cir", "NegRecall@10", 0.3, 0.2, -0.12, -0.08, "down"),  # gain
    _row(2, "compositional", "cir", "NegRecall@10", 0.3, 0.31, 0.005, 0.02, "down"),  # loss
]
DOC = """# Results

Prose that stays.

<!-- table: effects docs/results/r.csv (python -m cir_demo docs tables) -->
stale
<!-- end table -->

<!-- table: summary docs/results/r.csv (python -m cir_demo docs tables) -->
<!-- end table -->

<!-- table: per-world docs/results/r.csv cir (python -m cir_demo docs tables) -->
<!-- end table -->
Closing prose.
"""


def test_tables_are_redrawn_from_the_csv_and_a_changed_number_is_caught(tmp_path):
    _write_csv(tmp_path / "docs" / "results" / "r.csv", ROWS)
    (tmp_path / "README.md").write_text(DOC)
    assert update_tables(tmp_path, check=True) == [tmp_path / "README.md"]
    assert (tmp_path / "README.md").read_text() == DOC  # --check changes nothing
    assert update_tables(tmp_path) == [tmp_path / "README.md"]
    text = (tmp_path / "README.md").read_text()
    assert update_tables(tmp_path, check=True) == []
    # what is outside the markers is kept byte for byte
    outside = re.sub(r"(\(python -m cir_demo docs tables\) -->\n).*?(<!-- end table -->)", r"\1\2", text, flags=re.S)
    assert outside == re.sub(
        r"(\(python -m cir_demo docs tables\) -->\n).*?(<!-- end table -->)", r"\1\2", DOC, flags=re.S
    )
    # by hand: cir gains on 1 of 2 worlds in test mAP, clip on 1 of 2 and loses on the other
    assert "| test: mAP@10 up | 1 of 2 | 1 of 2 (1) |" in text
    assert "| compositional: NegRecall@10 down | 1 of 2 (1) |  |" in text
    assert "| cir | 0.1100 → 0.1650 (1/2) |" in text
    assert "| 1 | +0.1000 [+0.0500, +0.1500] |" in text
    # one interval moved across 0 in the CSV: the check names the file, the rewrite follows
    _write_csv(tmp_path / "docs" / "results" / "r.csv", [{**ROWS[1], "lo": 0.002}] + ROWS[:1] + ROWS[2:])
    assert update_tables(tmp_path, check=True) == [tmp_path / "README.md"]
    update_tables(tmp_path)
    assert "| test: mAP@10 up | 2 of 2 | 1 of 2 (1) |" in (tmp_path / "README.md").read_text()


def test_a_bad_csv_or_marker_is_one_error_naming_it(tmp_path):
    _write_csv(tmp_path / "docs" / "results" / "r.csv", [{**ROWS[0], "lo": "n/a"}])
    with pytest.raises(ValueError, match=r"r.csv: line 2: lo is 'n/a'"):
        read_record_csv(tmp_path / "docs" / "results" / "r.csv")
    (tmp_path / "README.md").write_text("<!-- table: ranking docs/results/r.csv (python -m cir_demo docs tables) -->\n")
    with pytest.raises(ValueError, match="'ranking docs/results/r.csv'"):
        update_tables(tmp_path, check=True)


def test_the_committed_tables_agree_with_the_committed_record_csvs(tmp_path):
    """README.md and docs/world_models.md draw their results tables from docs/results/record*.csv; a table
    edited by hand, or a CSV changed without `python -m cir_demo docs tables`, fails here."""
    readme, models = (REPO_ROOT / "README.md").read_text(), (REPO_ROOT / "docs" / "world_models.md").read_text()
    assert f"<!-- table: summary {MARKED_CSV} " in readme and f"<!-- table: effects {MARKED_CSV} " in models
    assert update_tables(REPO_ROOT, check=True) == []
    # the check would see a change: a copy of the docs with one CSV number moved is reported
    for rel in (
        "README.md",
        "docs/world_models.md",
        *[p.relative_to(REPO_ROOT) for p in (REPO_ROOT / "docs" / "results").glob("*.csv")],
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / rel, tmp_path / rel)
    rows = list(csv.DictReader((tmp_path / MARKED_CSV).open()))
    rows[0]["first_stage"] = str(float(rows[0]["first_stage"]) + 0.5)
    _write_csv(tmp_path / MARKED_CSV, rows)
    assert tmp_path / "README.md" in update_tables(tmp_path, check=True)


def test_the_effects_counts_equal_a_naive_count_of_the_committed_rows():
    """Each "k of n (m)" cell of the committed record equals a count of the raw CSV rows whose interval
    excludes 0 the gaining (k) and the losing (m) way."""
    raw = list(csv.DictReader((REPO_ROOT / MARKED_CSV).open()))
    table = render_effects(read_record_csv(REPO_ROOT / MARKED_CSV))
    names = [c.strip() for c in table[0].strip("|").split("|")][1:]
    measures = {
        "mAP@10": "mAP@10",
        "NegRecall@10": "NegRecall@10",
        "phrasing sensitivity": "ling_sens_paraphrase_range",
    }
    checked = 0
    for line in table[2:]:
        label, *cells = [c.strip() for c in line.strip("|").split("|")]
        split, rest = label.split(": ")
        measure = measures[rest.rsplit(" ", 1)[0]]
        for name, cell in zip(names, cells):
            rows = [r for r in raw if (r["split"], r["retriever"], r["measure"]) == (split, name, measure)]
            up = rows[0]["better"] == "up"
            gain = sum((float(r["lo"]) > 0) if up else (float(r["hi"]) < 0) for r in rows)
            loss = sum((float(r["hi"]) < 0) if up else (float(r["lo"]) > 0) for r in rows)
            assert cell == f"{gain} of {len(rows)}" + (f" ({loss})" if loss else "")
            checked += 1
    assert checked == 2 * 3 * len(names) >= 6

"""The shipped `--eval` outputs (cir_demo/index/prebuilt_run.py), on the tiny world with the tiny test
models: `index prebuilt` writes them from a real run and they are byte-identical to what `--eval`
writes (`--check --rerun` finds a changed file); an app with fresh ones installs them and starts no
background run; stale or damaged ones are never served and the background run computes them."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import shutil

import pytest

from cir_demo.cli import main as cli_main
from cir_demo.explorer.precompute import PrecomputeJob, complete_run
from cir_demo.index import prebuilt_run
from cir_demo.testing.explorer import VERIFIER, build_tiny_service

TINY = ["--benchmark", "world", "--world-size", "tiny", "--limit", "20"]  # the 20 intents the tiny service shows


@pytest.fixture(scope="module")
def shipped(tiny_setup, one_torch_thread):
    """(retriever names, folder of a prebuilt root holding the tiny world's shipped outputs)."""
    root, names = tiny_setup
    names = names[:2]
    built = root / "shipped-prebuilt"
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_PREBUILT", str(built))
    try:  # the corpus embeddings first, as the repository ships them: no check encodes the corpus again
        embeddings = ["index", "prebuilt", *TINY[:4], "--only", "embeddings", "--retrievers", ",".join(names)]
        assert cli_main([*embeddings, "--rerank", VERIFIER, "--no-progress"]) == 0
        assert (
            cli_main(
                [
                    "index",
                    "prebuilt",
                    *TINY,
                    "--only",
                    "eval",
                    "--retrievers",
                    ",".join(names),
                    "--rerank",
                    VERIFIER,
                    "--no-progress",
                ]
            )
            == 0
        )
    finally:
        mp.undo()
    assert (built / "world-tiny-s0" / "eval" / "manifest.json").is_file()
    return names, built


@pytest.fixture
def prebuilt(shipped, tmp_path, monkeypatch):
    """A copy of the shipped outputs for one test, and an empty runs folder."""
    names, built = shipped
    shutil.copytree(built, tmp_path / "prebuilt")
    monkeypatch.setenv("CIR_DEMO_PREBUILT", str(tmp_path / "prebuilt"))
    monkeypatch.setenv("CIR_DEMO_RUNS", str(tmp_path / "runs"))
    return names, tmp_path / "prebuilt" / "world-tiny-s0" / "eval"


@pytest.fixture
def launched(monkeypatch):
    """The background runs started (recorded, not run)."""
    seen = []
    monkeypatch.setattr(PrecomputeJob, "_launch_or_follow", lambda self, *a, **k: seen.append(a))
    return seen


def _rewrite(directory, name: str, data: bytes) -> None:
    """Replace shipped file `name` by `data` with consistent records (what stale outputs look like)."""
    manifest = json.loads((directory / "manifest.json").read_text())
    (stored,) = manifest["files"][name]["stored"]
    (directory / stored).write_bytes(lzma.compress(data) if stored != name else data)
    blob = (directory / stored).read_bytes()
    manifest["files"][name] = {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "stored": {stored: {"size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}},
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))


def test_shipped_outputs_are_byte_identical_to_what_eval_writes(prebuilt, capsys):
    names, directory = prebuilt
    check = [
        "index",
        "prebuilt",
        *TINY,
        "--only",
        "eval",
        "--retrievers",
        ",".join(names),
        "--rerank",
        VERIFIER,
        "--check",
    ]
    assert cli_main([*check, "--rerun"]) == 0, capsys.readouterr()
    assert "byte-identical to --eval" in capsys.readouterr().out
    manifest = json.loads((directory / "manifest.json").read_text())
    assert {"per_query.csv", "metrics.csv", "metrics.json", "report.md", "run_info.json"} <= set(manifest["files"])
    assert any(n.startswith("plots/") for n in manifest["files"]) and not any(
        n.startswith("results/") for n in manifest["files"]
    )
    # the world's compositional test split, evaluated beside the test split, ships too (its rankings do not)
    assert {"compositional/per_query.csv", "compositional/run_info.json"} <= set(manifest["files"])
    assert not any(n.startswith("compositional/results/") for n in manifest["files"])
    assert cli_main([*check, "--sample", "4"]) == 0  # every number recomputed, the rows of 4 intents drawn
    out = capsys.readouterr().out
    assert "4 of 20 intents of the test split" in out and "4 of 20 intents of the compositional split" in out
    assert "draw seed " in out and "fresh  --eval outputs, every number recomputed" in out
    metrics = lzma.decompress((directory / "metrics.csv.xz").read_bytes())
    _rewrite(directory, "metrics.csv", metrics.replace(b"0.", b"0.9", 1))
    assert cli_main(check) == 1  # the records agree, the content does not: metrics.csv is its rows' mean
    out = capsys.readouterr().out
    assert "wrong " in out and "metrics.csv row 2 (" in out and "recomputed from the rows" in out


def test_the_check_recomputes_a_slice_and_finds_edited_rows_and_a_changed_judge(prebuilt, capsys, monkeypatch):
    from cir_demo.testing.explorer import TinyVerifier

    names, directory = prebuilt
    check = [
        "index",
        "prebuilt",
        *TINY,
        "--only",
        "eval",
        "--retrievers",
        ",".join(names),
        "--rerank",
        VERIFIER,
        "--check",
    ]
    plain = TinyVerifier.score_logits
    monkeypatch.setattr(TinyVerifier, "score_logits", lambda self, *a: -plain(self, *a))  # same code hash
    assert cli_main(check) == 1
    out = capsys.readouterr().out
    assert "+rerank query w0000" in out and "recomputed by the models" in out
    monkeypatch.setattr(TinyVerifier, "score_logits", plain)
    rows = lzma.decompress((directory / "per_query.csv.xz").read_bytes()).decode().splitlines()
    cells = rows[1].split(",")
    column = rows[0].split(",").index("n_neg")
    cells[column] = str(int(cells[column]) + 1)  # one count of the first query, every record rewritten
    _rewrite(directory, "per_query.csv", "\n".join([rows[0], ",".join(cells), *rows[2:]]).encode() + b"\n")
    assert cli_main(check) == 1
    assert f"query {cells[1]}: n_neg differs between runs" in capsys.readouterr().out


def test_the_comparison_with_eval_names_every_changed_file_and_ignores_the_run_record(prebuilt, tmp_path):
    from cir_demo.harness.prebuilt_run_build import differences

    names, directory = prebuilt
    service = build_tiny_service(names)
    key = prebuilt_run.run_key(
        service.fingerprint, service.store.spec_hashes(service.retriever_names), service.store.reranker_hash(), 20
    )
    installed, problems = prebuilt_run.install_shipped_run(service.benchmark, key, tmp_path / "runs")
    service.engine.close()
    written = tmp_path / "written"
    shutil.copytree(installed, written)
    (written / "prebuilt.json").unlink()
    (written / "results").mkdir()
    (written / "results" / "a.json").write_text("{}")  # rankings are not shipped
    (written / "compositional" / "results").mkdir()
    (written / "compositional" / "results" / "a.json").write_text("{}")
    info = json.loads((written / "run_info.json").read_text())
    (written / "run_info.json").write_text(json.dumps({**info, "wall_s": 1.0, "argv": ["x"]}, indent=2))
    assert problems == [] and differences(installed, written) == []
    (written / "report.md").write_text((written / "report.md").read_text() + " ")
    (written / "compositional" / "metrics.csv").write_text("changed")
    (written / "plots" / "extra.png").write_bytes(b"png")
    (written / "breakdowns.csv").unlink()
    (written / "run_info.json").write_text(json.dumps({**info, "reranker": None}))
    assert differences(installed, written) == [
        "breakdowns.csv: shipped, not written by --eval",
        "plots/extra.png: written by --eval, not shipped",
        "compositional/metrics.csv: differs from what --eval writes now",
        "report.md: differs from what --eval writes now",
        "run_info.json: differs from what --eval writes now",
    ]


def test_an_app_with_fresh_shipped_outputs_starts_no_background_run(prebuilt, launched, tmp_path):
    names, directory = prebuilt
    service = build_tiny_service(names)
    assert complete_run(service) is None  # an empty runs folder
    job = PrecomputeJob(TINY, runs_root=tmp_path / "runs")
    job.start_for(service)
    st = job.status()
    assert launched == [] and st.state == "done" and "prebuilt-world-tiny-s0-" in st.text()
    installed = complete_run(service)
    assert installed.parent == tmp_path / "runs" and (installed / "prebuilt.json").is_file()
    assert service.report().run.label == installed.name
    assert {"rerank_helped", "rerank_hurt", "negatives", "spread"} <= service.stored_sorts()
    shipped_csv = lzma.decompress((directory / "per_query.csv.xz").read_bytes())
    assert (installed / "per_query.csv").read_bytes() == shipped_csv
    job2 = PrecomputeJob(TINY, runs_root=tmp_path / "runs")  # a later start: the copy is found, not installed again
    job2.start_for(service)
    assert job2.status().state == "done" and launched == []
    service.engine.close()


def test_outputs_of_other_code_are_computed_in_the_background_never_served(
    prebuilt, launched, tmp_path, monkeypatch, caplog
):
    names, _ = prebuilt
    service = build_tiny_service(names)
    PrecomputeJob(TINY, runs_root=tmp_path / "runs").start_for(service)  # installed while they are current
    assert complete_run(service) is not None and launched == []
    monkeypatch.setattr(prebuilt_run, "output_code_sha256", lambda: "0" * 64)  # the code changed since
    assert complete_run(service) is None and service.runs() == []  # the installed copy is no run any more
    job = PrecomputeJob(TINY, runs_root=tmp_path / "runs")
    with caplog.at_level("INFO", logger="cir_demo.explorer"):
        job.start_for(service)
    assert len(launched) == 1 and job.status().state == "running"
    assert "code changed" in caplog.text and "computing them in the background" in caplog.text
    service.engine.close()


def test_damaged_or_mismatched_shipped_outputs_are_refused(prebuilt, launched, tmp_path):
    names, directory = prebuilt
    service = build_tiny_service(names)
    served = prebuilt_run.run_key(
        service.fingerprint, service.store.spec_hashes(service.retriever_names), service.store.reranker_hash(), 20
    )
    assert prebuilt_run.shipped_problems(directory, served) == []
    other = dict(served, retrievers={n: "f" * 64 for n in served["retrievers"]}, rerank_top_n=10)
    problems = prebuilt_run.shipped_problems(directory, other)
    assert any("spec or weights changed" in p for p in problems) and any("depth changed" in p for p in problems)
    assert any(
        "benchmark changed" in p
        for p in prebuilt_run.key_problems(
            json.loads((directory / "manifest.json").read_text())["key"], dict(served, benchmark_fingerprint="world-x")
        )
    )
    stored = directory / "per_query.csv.xz"
    stored.write_bytes(stored.read_bytes()[:-1] + b"\0")
    assert any(
        p.startswith("damaged:") and "per_query.csv.xz" in p for p in prebuilt_run.shipped_problems(directory, served)
    )
    job = PrecomputeJob(TINY, runs_root=tmp_path / "runs")
    job.start_for(service)
    assert len(launched) == 1 and not list((tmp_path / "runs").glob("prebuilt-*"))
    service.engine.close()


def test_the_committed_default_world_outputs_match_their_records():
    """Every stored file of the committed outputs matches its size and sha256, and so does its content
    once decompressed (whether they are current for this code is `index prebuilt --only eval --check`)."""
    from cir_demo.integrity import check_records
    from cir_demo.paths import REPO_ROOT

    directory = REPO_ROOT / "indexes" / "prebuilt" / "world-default-s0" / prebuilt_run.RUN_FOLDER
    assert (directory / "manifest.json").is_file(), (
        "the shipped outputs are missing: python -m cir_demo index prebuilt --only eval"
    )
    manifest = prebuilt_run.read_shipped_manifest(directory)
    stored = {k: v for f in manifest["files"].values() for k, v in f["stored"].items()}
    assert check_records(directory, stored, verify=True) == []
    for name, record in manifest["files"].items():
        (stored_name,) = record["stored"]
        data = (directory / stored_name).read_bytes()
        data = lzma.decompress(data) if stored_name != name else data
        assert (len(data), hashlib.sha256(data).hexdigest()) == (record["size"], record["sha256"]), name
    assert {"per_query.csv", "metrics.csv", "report.md", "run_info.json"} <= set(manifest["files"])


# --------------------------------------------------------------------------- forged numbers, records rewritten
def _check(names, *extra) -> list[str]:
    return [
        "index",
        "prebuilt",
        *TINY,
        "--only",
        "eval",
        "--retrievers",
        ",".join(names),
        "--rerank",
        VERIFIER,
        "--check",
        *extra,
    ]


def _forge(directory, name: str, data: bytes) -> None:
    """Replace shipped file `name` by `data` with every record of it rewritten: the run's own
    run_manifest.json and the shipped manifest (what a careful forger does)."""
    run_manifest = json.loads(_shipped_text(directory, "run_manifest.json"))
    run_manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _rewrite(directory, "run_manifest.json", json.dumps(run_manifest, indent=2).encode())
    _rewrite(directory, name, data)


def _shipped_text(directory, name: str) -> str:
    return lzma.decompress((directory / f"{name}.xz").read_bytes()).decode()


def _table(text: str) -> list[list[str]]:
    import csv
    import io

    return list(csv.reader(io.StringIO(text)))


def _csv_text(table: list[list[str]]) -> bytes:
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(table)
    return buf.getvalue().encode()


def test_rows_forged_outside_the_draw_with_metrics_csv_at_their_mean_are_found(prebuilt, capsys):
    """The issue's forgery: one run's AP@10 raised on rows of intents the draw leaves out (each row still
    as its hit counts allow, so only a recomputation from the models could tell it by the row alone),
    metrics.csv set to the new mean, every record rewritten: the files written from the rows disagree."""
    from cir_demo.harness.shipped_check import draw

    names, directory = prebuilt
    seed, run = 7, f"{names[0]}+rerank"
    table = _table(_shipped_text(directory, "per_query.csv"))
    col = {c: i for i, c in enumerate(table[0])}
    drawn = set(draw([r[col["group_id"]] for r in table[1:]], 4, seed, "test"))
    forged = 0
    for r in table[1:]:
        hits, n_pos = round(float(r[col["precision@10"]]) * 10), int(r[col["n_pos"]])
        best = round(hits / max(min(n_pos, 10), 1), 6)
        if r[col["run"]] == run and r[col["group_id"]] not in drawn and hits and float(r[col["AP@10"]]) < best:
            r[col["AP@10"]], forged = repr(best), forged + 1
    assert forged >= 3, "the tiny run must leave rows to forge"
    _forge(directory, "per_query.csv", _csv_text(table))
    scored = [r for r in table[1:] if r[col["run"]] == run and r[col["scored"]] == "True"]
    mean = sum(float(r[col["AP@10"]]) for r in scored) / len(scored)
    metrics = _table(_shipped_text(directory, "metrics.csv"))
    (row,) = [r for r in metrics[1:] if r[0] == run]
    row[metrics[0].index("mAP@10")] = f"{mean:.4f}"
    _forge(directory, "metrics.csv", _csv_text(metrics))
    assert cli_main(_check(names, "--sample", "4", "--draw-seed", str(seed))) == 1
    out = capsys.readouterr().out
    assert "recomputed by the models" not in out  # the draw did not see them ...
    assert "metrics.json runs[" in out and "report.md line" in out  # ... the files written from them did


def test_a_forged_interval_breakdown_cell_or_report_number_is_found_whatever_the_key_says(
    prebuilt, capsys, monkeypatch
):
    """A compositional interval strengthened in paired.csv, a breakdowns.csv cell, a number of report.md's
    headline table, every record rewritten, from outputs of other code (stale): each is named apart."""
    names, directory = prebuilt
    paired = _table(_shipped_text(directory, "compositional/paired.csv"))
    paired[2][paired[0].index("lo")] = f"{float(paired[2][paired[0].index('lo')]) + 0.01:.6g}"
    _forge(directory, "compositional/paired.csv", _csv_text(paired))
    breakdowns = _table(_shipped_text(directory, "breakdowns.csv"))
    breakdowns[2][breakdowns[0].index("AP@10")] = f"{float(breakdowns[2][breakdowns[0].index('AP@10')]) + 0.01:.6g}"
    _forge(directory, "breakdowns.csv", _csv_text(breakdowns))
    report = _shipped_text(directory, "report.md")
    line = next(x for x in report.splitlines() if x.startswith(f"| {names[0]}+rerank | "))
    cell = line.split(" | ")[1].split()[0]
    _forge(directory, "report.md", report.replace(line, line.replace(cell, f"{float(cell) + 0.05:.4f}", 1)).encode())
    monkeypatch.setattr(prebuilt_run, "output_code_sha256", lambda: "0" * 64)  # the code changed since
    assert cli_main(_check(names, "--sample", "2")) == 1
    out = capsys.readouterr().out
    assert "wrong " in out and "- code changed" in out
    named = [x.split("content: ")[1] for x in out.splitlines() if "content: " in x]
    assert len(named) == 3, out
    assert named[0].startswith("breakdowns.csv row 3 (") and " column AP@10: " in named[0]
    assert named[1].startswith("report.md line ") and f"{float(cell) + 0.05:.4f} shipped, {cell} recomputed" in named[1]
    assert named[2].startswith("compositional/paired.csv row 3 (") and " column lo: " in named[2]


def test_run_info_must_be_what_the_key_hashes(prebuilt, tmp_path):
    from cir_demo.harness import shipped_check

    _, directory = prebuilt
    manifest = prebuilt_run.read_shipped_manifest(directory)
    assert shipped_check.unpack_shipped(directory, manifest, tmp_path / "run") == []
    assert shipped_check.run_info_problems(tmp_path / "run", manifest["key"]) == []
    info_path = tmp_path / "run" / "compositional" / "run_info.json"
    info = json.loads(info_path.read_text())
    info["rerank_top_n"] = 10
    info_path.write_text(json.dumps(info))
    assert shipped_check.run_info_problems(tmp_path / "run", manifest["key"]) == [
        "content: compositional/run_info.json: its rerank_top_n is not what the manifest's key records"
    ]


@pytest.mark.parametrize(
    "shipped, recomputed, sig6, same",
    [
        ("0.1454", "0.1454", False, True),
        ("0.1454", "0.1455", False, True),  # a value on a rounding boundary prints either way
        ("0.1454", "0.1456", False, False),
        ("0.1775", "0.1454", False, False),
        ("0.5", "0.500001", True, True),  # %.6g: six significant digits, trailing zeros dropped
        ("0.6", "0.5", True, False),
        ("0.0180442", "0.0190442", True, False),
        ("610", "609", False, False),  # counts exactly
        ("nan", "nan", False, True),
        ("+0.0129", "+0.0130", False, True),
    ],
)
def test_printed_numbers_agree_to_one_unit_of_their_last_place(shipped, recomputed, sig6, same):
    from cir_demo.harness.shipped_check import same_number

    assert same_number(shipped, recomputed, sig6) is same


def test_the_first_query_is_chosen_when_shipping_and_read_at_start_or_computed_without(prebuilt, monkeypatch):
    """`index prebuilt` records, per set of the shipped first-stage runs, the query a first visit opens:
    the one a loop over the shipped per_query.csv finds (runs differ most on AP@10, one scoring; the
    earliest). The app reads it without reading any per-query row; from outputs without the field
    (written before it existed) the same query is computed from the shipped rows."""
    from itertools import combinations
    from types import SimpleNamespace

    import pandas as pd

    from cir_demo.explorer import first_view

    names, directory = prebuilt
    manifest = json.loads((directory / "manifest.json").read_text())
    rows = pd.read_csv(
        io.BytesIO(lzma.decompress((directory / "per_query.csv.xz").read_bytes())), dtype={"query_id": str}
    )
    ap = {(r, q): v for r, q, v in zip(rows["run"], rows["query_id"], rows["AP@10"])}
    service = build_tiny_service(names)
    order = list(service.table["query_id"])

    def loop(runs):
        chosen, widest = order[0], -1.0
        for q in order:
            values = [ap[r, q] for r in runs if (r, q) in ap]
            spread = max(values) - min(values) if values else 0.0
            if values and max(values) > 0 and (spread > 0 or len(runs) == 1) and spread > widest:
                chosen, widest = q, spread
        return chosen

    field = manifest["first_query"]
    assert field["primary"] == "AP@10"
    sets = [runs for size in (1, 2) for runs in combinations(names, size)]
    assert {",".join(sorted(runs)): loop(runs) for runs in sets} == field["by_runs"]
    assert len({loop(runs) for runs in sets}) > 1  # the sets' choices differ: each is its own

    def no_rows(*a, **k):
        raise AssertionError("per-query rows read for the first view")

    with monkeypatch.context() as m:
        m.setattr(first_view, "shipped_rows", no_rows)
        m.setattr(service, "failure_stats", no_rows)
        m.setattr(service, "stored_sorts", lambda: set())
        assert first_view.first_query(service, SimpleNamespace(state="running", ready_sorts=())) == loop(names)
    del manifest["first_query"]  # outputs written before the field: computed from the shipped rows
    (directory / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(service, "stored_sorts", lambda: set())
    assert first_view.first_query(service, SimpleNamespace(state="later", ready_sorts=())) == loop(names)
    service.engine.close()

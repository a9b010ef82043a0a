"""The Python API (`import cir_demo as cd`, cir_demo/notebook.py): on the tiny world exported to CIRR
with two runs of one's own, every table `cd.evaluate` gives is the file `--eval` writes for the same
inputs (metrics.csv, per_query.csv, paired.csv, report.tex); `ev.save` writes that folder; `ev.show`
draws the app's grids without images; and the README's "In a notebook" section runs as written."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import cir_demo as cd

from own_runs_support import cirr_world_with_runs, eval_both_runs

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cirr_eval(tmp_path_factory):
    """(root, benchmark, A, B, the --eval folder of both runs with --n-boot 200)."""
    root = tmp_path_factory.mktemp("notebook")
    mp = pytest.MonkeyPatch()
    bench, pa, pb = cirr_world_with_runs(root, mp)
    out = eval_both_runs(root, pa, pb, root / "eval")
    yield root, bench, pa, pb, out
    mp.undo()


@pytest.fixture(scope="module")
def ev(cirr_eval):
    root, _, pa, pb, _ = cirr_eval
    bench = cd.load_benchmark("cirr", root=str(root / "cirr"))
    return cd.evaluate(bench, {"A": str(pa), "B": str(pb)}, n_boot=200)


def _csv(frame: pd.DataFrame, **kw) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(frame.to_csv(index=False, **kw)))


def test_tables_are_evals_files(ev, cirr_eval):
    out = cirr_eval[4]
    # metrics.csv is written with 4 places: the table written the same way is the file
    assert _csv(ev.metrics, float_format="%.4f").equals(pd.read_csv(out / "metrics.csv"))
    want = pd.read_csv(out / "per_query.csv")
    assert _csv(ev.per_query).equals(want)
    paired = pd.read_csv(out / "paired.csv", dtype={"p_value": str})
    got = ev.compare()
    assert list(got.columns[: len(paired.columns)]) == list(paired.columns)
    assert _csv(got[paired.columns], float_format="%.6g").astype(str).equals(paired.astype(str))
    assert ev.to_latex() == (out / "report.tex").read_text(encoding="utf-8")


def test_compare_marks_are_holm_corrected_against_the_baseline(ev):
    """`p_holm` is an independent Holm-Bonferroni step-down over the baseline's rows (p floored at 1/n_boot)."""
    rows = ev.compare(baseline="A")
    assert set(rows["a"]) | set(rows["b"]) == {"A", "B"} and len(rows)
    raw = [max(float(str(p).replace("< ", "")), 1 / 200) for p in rows["p_value"]]
    m = len(raw)
    order = sorted(range(m), key=lambda i: raw[i])
    want, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * raw[i]))
        want[i] = running
    assert rows["p_holm"].tolist() == pytest.approx(want)
    assert rows["significant"].tolist() == [p < 0.05 for p in want]


def test_runs_in_memory_and_save_give_the_same_folder(ev, cirr_eval, tmp_path):
    import json

    root, bench, pa, pb, out = cirr_eval
    in_memory = cd.evaluate(bench, {"A": json.loads(pa.read_text()), "B": str(pb)}, n_boot=200)
    assert in_memory.per_query.equals(ev.per_query)
    saved = in_memory.save(tmp_path / "saved", plots=False)
    for name in ("metrics.csv", "per_query.csv", "paired.csv", "report.tex", "report.md"):
        assert (saved / name).read_bytes() == (out / name).read_bytes(), name


def test_show_draws_the_apps_grids_without_images(ev, cirr_eval):
    bench = cirr_eval[1]
    q = bench.queries[0]
    html = ev.show(q.query_id)._repr_html_()
    assert "cir-grid" in html and "<style>" in html
    text = re.sub(r"<[^>]+>", " ", html)
    for run in ("A", "B"):
        assert run in text
    assert "<img" not in html  # no images here: grey tiles with the image ids
    key = bench.results_key(q.query_id)
    a, b = (json.loads(p.read_text())[key] for p in cirr_eval[2:4])
    for ranked in (a, sorted(b, key=lambda i: -b[i])):  # each run's official top 10: the reference deleted
        top = [x for x in ranked if x != q.reference_ids[0]][:10]
        assert all(f" {x} " in text or f">{x}<" in html for x in top), top
        assert (q.target_id in top) <= ("target" in text)
    top = ev.failures(sort="worst").iloc[0]
    assert str(top["query_id"]) in set(ev.per_query["query_id"].astype(str))


def test_bad_inputs_say_one_line(cirr_eval):
    root, bench, *_ = cirr_eval
    with pytest.raises(ValueError, match="neither a results file, a run dict nor"):
        cd.evaluate(bench, {"A": "no-such-file.json"})
    with pytest.raises(ValueError, match="load_benchmark: .*world-size"):
        cd.load_benchmark("world", world_size="huge")


def readme_notebook_code() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## In a notebook", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "README's 'In a notebook' section has no python block"
    return "\n".join(blocks)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A folder holding the package as pip installs it from the repository's pyproject.toml (the set-up's
    `-e .` finds the same packages and data files), built from a copy of the sources (nothing is written
    into the repository) without the network: a Python given only this folder imports `cir_demo` from it."""
    root = tmp_path_factory.mktemp("installed")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "requirements.txt"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "cir_demo", src / "cir_demo", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run([*pip, "--target", str(root / "site"), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "site"


def only_installed(site: Path) -> dict:
    """The environment of a Python that finds cir_demo in `site` only (never the repository's folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": str(site)}


def test_the_set_up_installs_the_package(installed, tmp_path):
    """README's set-up and CI's (`pip install -r requirements-dev.txt` at the repository root) install the
    package itself, and what pyproject.toml installs imports from any folder with its data files (the
    retrievers' configs); `import cir_demo` loads no heavy library."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "python -m pip install -r requirements.txt -e . &&" in readme
    dev = [ln.split("#")[0].strip() for ln in (REPO / "requirements-dev.txt").read_text().splitlines()]
    assert "-e ." in dev
    code = (
        "import sys, cir_demo as cd; from cir_demo.retrievers.registry import get_config; "
        "get_config('world-cir'); "
        "print(cd.__file__); print(sorted({'torch', 'gradio'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=only_installed(installed), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    where, heavy = done.stdout.strip().splitlines()[-2:]
    assert Path(where).resolve() == (installed / "cir_demo" / "__init__.py").resolve() and heavy == "[]"
    done = subprocess.run(
        [sys.executable, "-c", "import sys, cir_demo; print(sorted({'pandas', 'numpy', 'torch'} & set(sys.modules)))"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_readme_notebook_section_runs_as_written(cirr_eval, installed, tmp_path):
    """From another folder, with the package found where pip installed it (never the repository's folder),
    and the section's inputs: cirr/ (the CIRR export), a.json and b.trec."""
    root, bench, pa, pb, _ = cirr_eval
    shutil.copytree(root / "cirr", tmp_path / "cirr")
    shutil.copy(pa, tmp_path / "a.json")
    b = json.loads(pb.read_text())
    with open(tmp_path / "b.trec", "w") as f:
        for q, scored in b.items():
            for r, (img, s) in enumerate(sorted(scored.items(), key=lambda t: -t[1])):
                f.write(f"{q} Q0 {img} {r + 1} {s} B\n")
    code = readme_notebook_code()
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=only_installed(installed),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "metrics.csv").is_file()

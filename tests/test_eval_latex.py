"""report.tex of `--eval`: a booktabs table that LaTeX accepts (pdflatex where installed, else balanced braces
and environments), best values in bold, and significance marks against the baseline run where one run is
clearly better, after Holm-Bonferroni."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import app
from cir_demo.harness.latex import BETTER, WORSE, holm
from own_runs_support import write_two_runs


def test_holm_on_a_hand_made_example():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> kept monotone at 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # 0.5 * 2 caps at 1; the larger p cannot be below it


def balanced(tex: str) -> None:
    body = re.sub(r"\\[{}%&$#_]", "", re.sub(r"(?m)^%.*$", "", tex))
    depth = 0
    for ch in body:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    assert depth == 0
    envs = re.findall(r"\\(begin|end)\{(\w+)\}", body)
    stack = []
    for kind, env in envs:
        if kind == "begin":
            stack.append(env)
        else:
            assert stack.pop() == env
    assert not stack
    for rule in ("\\toprule", "\\midrule", "\\bottomrule"):
        assert body.count(rule) == 1, rule


def compiles(tex: str, folder) -> None:
    doc = folder / "doc.tex"
    doc.write_text("\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n" + tex + "\\end{document}\n")
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]


def cells(tex: str) -> dict[str, list[str]]:
    rows = tex.split("\\midrule")[1].split("\\bottomrule")[0].strip().splitlines()
    return {r.split(" & ")[0].removesuffix(" (baseline)"): r.rstrip(" \\").split(" & ")[1:] for r in rows}


@pytest.fixture(scope="module")
def cirr_runs(tmp_path_factory):
    from cir_demo.benchmarks.cirr import export_cirr, load_cirr
    from cir_demo.world import load_world

    root = tmp_path_factory.mktemp("latex")
    export_cirr(load_world(size="tiny", progress=False).limit(60), root / "cirr", splits=("val",), skip_two_image=True)
    bench = load_cirr(root / "cirr")
    return root, (*write_two_runs(bench, root),)


@pytest.mark.parametrize("baseline", [None, "A"])
def test_report_tex_compiles_and_marks_the_significant_differences(cirr_runs, baseline, tmp_path):
    root, (pa, pb) = cirr_runs
    out = tmp_path / "out"
    # B first: the default baseline is the first run given; A puts the target first on every second query
    args = [
        "--eval",
        "--benchmark",
        "cirr",
        "--root",
        str(root / "cirr"),
        "--results-json",
        str(pb),
        str(pa),
        "--out",
        str(out),
        "--n-boot",
        "200",
        "--no-plots",
    ]
    assert app.main(args + (["--baseline", baseline] if baseline else [])) == 0
    tex = (out / "report.tex").read_text()
    balanced(tex)
    if shutil.which("pdflatex"):
        compiles(tex, tmp_path)
    heads = tex.split("\\midrule")[0].splitlines()[-1].rstrip(" \\").split(" & ")[1:]
    assert heads[:2] == ["R@1", "R@5"] and "R$_s$@2" in heads and heads[-1] == "Avg"
    row = cells(tex)
    r1 = heads.index("R@1")
    assert row["A"][r1].startswith("\\textbf{50.00}") and not row["B"][r1].startswith("\\textbf")  # the best in bold
    if baseline is None:  # B is the baseline: A significantly better at R@1
        assert row["A"][r1].endswith(BETTER) and not any(c.endswith((BETTER, WORSE)) for c in row["B"])
    else:
        assert row["B"][r1].endswith(WORSE) and not any(c.endswith((BETTER, WORSE)) for c in row["A"])
    assert "Holm-Bonferroni" in tex and "paired bootstrap" in tex and "200 resamples" in tex


def test_an_unknown_baseline_is_one_line_before_any_file(cirr_runs, tmp_path, capsys):
    root, (pa, pb) = cirr_runs
    out = tmp_path / "out"
    assert (
        app.main(
            [
                "--eval",
                "--benchmark",
                "cirr",
                "--root",
                str(root / "cirr"),
                "--results-json",
                str(pa),
                "--out",
                str(out),
                "--n-boot",
                "0",
                "--no-plots",
                "--baseline",
                "Z",
            ]
        )
        != 0
    )
    err = capsys.readouterr().err
    assert "--baseline Z: no run of that name (runs: A)" in err and not out.exists()

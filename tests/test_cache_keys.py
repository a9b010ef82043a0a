"""Every cache is keyed by the code and libraries that compute its values (cir_demo/utils/code_hash.py):
the walk finds the modules a computation imports, a changed module changes the key, and a clone of the
project whose judge scores otherwise gives on a warm data folder exactly what it gives on an empty one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cir_demo.utils import code_hash

REPO = Path(__file__).resolve().parent.parent
# appended to a clone's world_judge_net.py: the judge's scores negated (a judge whose code changed)
NEGATED = (
    "\n_plain_logits = WorldJudge.logits\nWorldJudge.logits = lambda self, *a, **k: -_plain_logits(self, *a, **k)\n"
)


@pytest.fixture
def clone_package(tmp_path, monkeypatch):
    """A copy of the package that code_hash reads instead of this one (its caches emptied)."""
    copy = tmp_path / "cir_demo"
    shutil.copytree(REPO / "cir_demo", copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(code_hash, "PACKAGE_DIR", copy)
    for cached in (code_hash.code_modules, code_hash.code_sha256):
        cached.cache_clear()
    yield copy
    for cached in (code_hash.code_modules, code_hash.code_sha256):
        cached.cache_clear()


def test_the_walk_follows_imports_inside_functions_and_takes_the_packages_on_the_way():
    found = code_hash.code_modules(("cir_demo.rerank.world_verifier",))
    # world_verifier imports the judge inside a method; the judge imports its network inside a function
    assert {"cir_demo.models.world_judge", "cir_demo.models.world_judge_net", "cir_demo.models", "cir_demo"} <= set(
        found
    )
    assert "cir_demo.ui" not in {m.rsplit(".", 1)[0] for m in found} and list(found) == sorted(found)
    assert set(code_hash.code_modules(("cir_demo.world.render",))) >= {
        "cir_demo.world.render.paint",
        "cir_demo.world.render.compose",
    }  # a package: all of it
    with pytest.raises(ValueError, match="cir_demo.no_such_module"):
        code_hash.code_modules(("cir_demo.no_such_module",))


def test_a_changed_judge_module_changes_the_judges_keys_and_nothing_else(clone_package):
    roots = ("cir_demo.rerank.world_verifier",)
    judge, clip = code_hash.code_key(roots), code_hash.code_key(("cir_demo.models.world_clip",))
    assert code_hash.code_key(roots) == judge  # read again: the same
    with open(clone_package / "models" / "world_judge_net.py", "a") as f:
        f.write(NEGATED)
    code_hash.code_sha256.cache_clear()
    assert code_hash.code_key(roots)["sha256"] != judge["sha256"]
    assert code_hash.code_key(("cir_demo.models.world_clip",)) == clip  # code off the judge's path


def test_layout_comments_and_docstrings_keep_the_key_and_a_changed_constant_does_not(clone_package):
    """A formatter's pass, a reworded comment or docstring computes nothing: the key stays. A changed
    number in the same file computes something else: the key changes (the oracle is the edit itself)."""
    roots = ("cir_demo.models.world_judge_net",)
    path = clone_package / "models" / "world_judge_net.py"
    source = path.read_text()
    before = code_hash.code_key(roots)["sha256"]
    reflowed = '"""Reworded."""\n' + source.split('"""', 2)[2].replace("\n\n\n", "\n\n\n# a comment\n", 1)
    reflowed = reflowed.replace("(", "(  ", 3)  # spacing a formatter would take out again
    path.write_text(reflowed)
    code_hash.code_sha256.cache_clear()
    assert code_hash.code_key(roots)["sha256"] == before
    path.write_text(source + "\nNOT_A_DOCSTRING = 1\n")
    code_hash.code_sha256.cache_clear()
    assert code_hash.code_key(roots)["sha256"] != before


def test_library_versions_are_part_of_the_key(monkeypatch):
    from cir_demo.utils import versions

    before = code_hash.code_key(("cir_demo.models.world_clip",), ("numpy",))
    monkeypatch.setattr(versions, "library_versions", lambda *names, **kw: {n: "0.0" for n in names})
    assert code_hash.code_key(("cir_demo.models.world_clip",), ("numpy",)) != before


def _eval(repo: Path, cache: Path, out: Path) -> bytes:
    """`--eval` of world-CLIP + the world judge on 4 intents of the tiny world, run by the code in `repo`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIR_DEMO_")}
    env.update(
        CIR_DEMO_CACHE=str(cache),
        CIR_DEMO_INDEXES=str(out.parent / f"{out.name}-indexes"),
        CIR_DEMO_RUNS=str(out.parent / f"{out.name}-runs"),
        CIR_DEMO_PREBUILT=str(out.parent / "none"),
        CIR_DEMO_BENCHMARK_CACHE=str(cache / "benchmarks"),
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "cir_demo",
        "eval",
        "--benchmark",
        "world",
        "--world-size",
        "tiny",
        "--split",
        "test",
        "--limit",
        "4",
        "--retrievers",
        "world-clip-image",
        "--rerank",
        "world-verifier",
        "--no-plots",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return (out / "per_query.csv").read_bytes()


def test_a_clone_with_a_changed_judge_gives_on_a_warm_folder_what_it_gives_on_an_empty_one(tiny_world_seed, tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "cir_demo", clone / "cir_demo", ignore=shutil.ignore_patterns("__pycache__"))
    (clone / "assets").symlink_to(REPO / "assets")
    with open(clone / "cir_demo" / "models" / "world_judge_net.py", "a") as f:
        f.write(NEGATED)
    warm = tmp_path / "warm"
    shutil.copytree(tiny_world_seed, warm)  # the world and the corpus features of this code
    unchanged = _eval(REPO, warm, tmp_path / "unchanged")  # and now this code's scores too
    empty = tmp_path / "empty"
    shutil.copytree(tiny_world_seed / "world", empty / "world")  # the world's files only: data, not results
    on_empty = _eval(clone, empty, tmp_path / "clone-empty")
    assert on_empty != unchanged, "the negated judge must rank otherwise, or this test shows nothing"
    assert _eval(clone, warm, tmp_path / "clone-warm") == on_empty


def test_index_prebuilt_builds_in_an_empty_data_folder_and_gives_the_old_one_back(tmp_path, monkeypatch):
    from cir_demo.harness.prebuilt_run_build import empty_data_folder
    from cir_demo.paths import cache_dir, runs_dir

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "warm-cache"))
    monkeypatch.delenv("CIR_DEMO_RUNS", raising=False)
    (tmp_path / "warm-cache" / "rerank").mkdir(parents=True)  # what an earlier run left
    with empty_data_folder() as empty:
        assert cache_dir() == empty / "cache" and runs_dir() == empty / "runs" and list(empty.iterdir()) == []
        assert "CIR_DEMO_CACHE" not in os.environ
    assert not empty.exists() and cache_dir() == tmp_path / "warm-cache" and "CIR_DEMO_RUNS" not in os.environ


def test_the_worlds_pixel_fingerprint_follows_the_renderer_code(clone_package):
    from cir_demo.world.loader import pixels_fingerprint

    before = pixels_fingerprint("0" * 64)
    assert pixels_fingerprint("1" * 64) != before  # another world's content
    with open(clone_package / "world" / "generate.py", "a") as f:
        f.write("\n# not on the pixels' path\n")
    code_hash.code_sha256.cache_clear()
    assert pixels_fingerprint("0" * 64) == before
    with open(clone_package / "world" / "render" / "paint.py", "a") as f:
        f.write("\nPAINTED_OTHERWISE = True\n")
    code_hash.code_sha256.cache_clear()
    assert pixels_fingerprint("0" * 64) != before


def test_a_hash_memoised_by_file_stats_is_recomputed_when_a_file_changes(tmp_path, monkeypatch):
    """`memo_by_stats` gives what hashing the files gives (sha256 of their bytes here, computed by the
    test): computed once, read back while every file stats the same, computed again after an edit and
    when its memo is unreadable."""
    import hashlib

    from cir_demo.utils.stat_memo import memo_by_stats

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    files = [tmp_path / "a.py", tmp_path / "b.py"]
    for i, f in enumerate(files):
        f.write_text(f"x = {i}\n")
    calls = []

    def compute():
        calls.append(1)
        return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()

    def expected():
        return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()

    assert memo_by_stats("t", files, compute) == expected() and len(calls) == 1
    assert memo_by_stats("t", files, compute) == expected() and len(calls) == 1  # read back
    files[1].write_text("x = 7\n")  # the same size
    st = files[1].stat()
    os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert memo_by_stats("t", files, compute) == expected() and len(calls) == 2
    (tmp_path / "cache" / "code-hash" / "t.json").write_text("{not json")
    assert memo_by_stats("t", files, compute) == expected() and len(calls) == 3

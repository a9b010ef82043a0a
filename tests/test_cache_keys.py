"""Every cache is keyed by the code and libraries that compute its values (cir_demo/utils/code_hash.py):
the walk finds the modules a computation imports, a changed module changes the key, and a clone of the
project whose judge scores otherwise gives on a warm data folder exactly what it gives on an empty one."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cir_demo.utils import code_hash
from conftest import WORLD_PARTS_MEMO

REPO = Path(__file__).resolve().parent.parent
# appended to a clone's world_judge_net.py: the judge's scores negated (a judge whose code changed)
NEGATED = (
    "\n_plain_logits = WorldJudge.logits\nWorldJudge.logits = lambda self, *a, **k: -_plain_logits(self, *a, **k)\n"
)


def change_a_number(path: Path) -> str:
    """Change the first number written in the code of `path` (a constant on the computation's path, not
    a comment: `code_text` keeps it) by one; returns what changed, for a failure message."""
    source, before = path.read_text(), code_hash.code_text(path)
    numbers = [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant) and type(n.value) in (int, float) and n.lineno == n.end_lineno
    ]
    assert numbers, f"{path}: no number to change"
    n = min(numbers, key=lambda n: (n.lineno, n.col_offset))
    lines = source.splitlines(keepends=True)
    line = lines[n.lineno - 1]
    lines[n.lineno - 1] = line[: n.col_offset] + repr(n.value + 1) + line[n.end_col_offset :]
    path.write_text("".join(lines))
    assert code_hash.code_text(path) != before  # the hash sees it
    return f"{path.name}:{n.lineno} {n.value!r} -> {n.value + 1!r}"


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


EVAL_ARGS = [
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
]


def _eval_env(cache: Path, out: Path) -> dict:
    """The data folders of an `_eval` (set in place of every CIR_DEMO_ variable of this process)."""
    return dict(
        CIR_DEMO_CACHE=str(cache),
        CIR_DEMO_INDEXES=str(out.parent / f"{out.name}-indexes"),
        CIR_DEMO_RUNS=str(out.parent / f"{out.name}-runs"),
        CIR_DEMO_PREBUILT=str(out.parent / "none"),
        CIR_DEMO_BENCHMARK_CACHE=str(cache / "benchmarks"),
    )


# The clone's runs: one Python process imports the libraries an `--eval` loads (torch and the rest,
# most of a tiny run's CPU), then forks a child per run, which imports the clone's package afresh (nothing
# of cir_demo is imported before the fork) with that run's data folders set, and runs its command line.
CLONE_RUNS = """
import atexit, json, os, sys
import faiss, numpy, pandas, PIL.Image, safetensors.torch, torch
assert not any(m == "cir_demo" or m.startswith("cir_demo.") for m in sys.modules)
for env, argv in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.update(env)
            from cir_demo.cli import main
            if os.environ.get("TESTS_RENDER_MEMO"):  # the run's pictures (render_memo.py), keyed by this code
                sys.path.insert(0, os.environ["TESTS_DIR"])
                from render_memo import install
                from cir_demo.world import loader
                install(loader, lambda: os.environ["TESTS_RENDER_MEMO"])
            code = main(argv)
        finally:  # as the interpreter would end: its exit handlers, its output, then never back here
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status != 0:
        sys.exit(f"{argv[-1]}: exit {status}")
"""


def _eval(repo: Path, runs: list[tuple[Path, Path]]) -> list[bytes]:
    """`--eval` of world-CLIP + the world judge on 4 intents of the tiny world, run by the code in `repo`,
    for each (cache folder, output folder) of `runs` in turn: each in a process of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIR_DEMO_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TESTS_DIR=str(Path(__file__).parent))
    if WORLD_PARTS_MEMO["folder"] is not None and WORLD_PARTS_MEMO["on"]:
        env["TESTS_RENDER_MEMO"] = str(WORLD_PARTS_MEMO["folder"])
    plan = [(_eval_env(cache, out), [*EVAL_ARGS, "--out", str(out)]) for cache, out in runs]
    cmd = [sys.executable, "-c", CLONE_RUNS, json.dumps(plan)]
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=480)
    assert done.returncode == 0, done.stderr[-2000:]
    return [(out / "per_query.csv").read_bytes() for _, out in runs]


def _eval_here(cache: Path, out: Path) -> bytes:
    """`_eval` of this code, in this process: only a clone's code needs a process of its own (and a
    torch import, most of a tiny run's CPU)."""
    from cir_demo.cli import main
    from cir_demo.utils.threads import torch_threads

    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        for var in [k for k in os.environ if k.startswith("CIR_DEMO_")]:
            mp.delenv(var)
        for var, value in _eval_env(cache, out).items():
            mp.setenv(var, value)
        assert main([*EVAL_ARGS, "--out", str(out)]) == 0
    return (out / "per_query.csv").read_bytes()


def test_a_clone_with_a_changed_judge_gives_on_a_warm_folder_what_it_gives_on_an_empty_one(tiny_world_seed, tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "cir_demo", clone / "cir_demo", ignore=shutil.ignore_patterns("__pycache__"))
    (clone / "assets").symlink_to(REPO / "assets")
    with open(clone / "cir_demo" / "models" / "world_judge_net.py", "a") as f:
        f.write(NEGATED)
    warm = tmp_path / "warm"
    shutil.copytree(tiny_world_seed, warm)  # the world and the corpus features of this code
    unchanged = _eval_here(warm, tmp_path / "unchanged")  # and now this code's scores too
    empty = tmp_path / "empty"
    shutil.copytree(tiny_world_seed / "world", empty / "world")  # the world's files only: data, not results
    on_empty, on_warm = _eval(clone, [(empty, tmp_path / "clone-empty"), (warm, tmp_path / "clone-warm")])
    assert on_empty != unchanged, "the negated judge must rank otherwise, or this test shows nothing"
    assert on_warm == on_empty


def test_index_prebuilt_builds_in_an_empty_data_folder_and_gives_the_old_one_back(tmp_path, monkeypatch):
    from cir_demo.harness.prebuilt_run_build import empty_data_folder
    from cir_demo.paths import cache_dir, runs_dir

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "warm-cache"))
    monkeypatch.delenv("CIR_DEMO_RUNS", raising=False)
    (tmp_path / "warm-cache" / "rerank").mkdir(parents=True)  # what an earlier run left
    monkeypatch.setenv("CIR_DEMO_CODE_MEMO", str(tmp_path / "parsed"))  # and the code hash's parse answers
    with empty_data_folder() as empty:
        assert cache_dir() == empty / "cache" and runs_dir() == empty / "runs" and list(empty.iterdir()) == []
        assert "CIR_DEMO_CACHE" not in os.environ and "CIR_DEMO_CODE_MEMO" not in os.environ
    assert not empty.exists() and cache_dir() == tmp_path / "warm-cache" and "CIR_DEMO_RUNS" not in os.environ
    assert os.environ["CIR_DEMO_CODE_MEMO"] == str(tmp_path / "parsed")


def test_the_worlds_pixel_fingerprint_follows_the_renderer_code(clone_package):
    from cir_demo.world.loader import pixels_fingerprint

    before = pixels_fingerprint("0" * 64)
    assert pixels_fingerprint("1" * 64) != before  # another world's content
    change_a_number(clone_package / "world" / "generate.py")  # a constant of the scene generator, not the renderer
    code_hash.code_sha256.cache_clear()
    assert pixels_fingerprint("0" * 64) == before
    change_a_number(clone_package / "world" / "render" / "palette.py")  # RENDER_SIZE, SUPERSAMPLE, ...
    code_hash.code_sha256.cache_clear()
    assert pixels_fingerprint("0" * 64) != before


# --------------------------------------------------------------------------- the caches of training
@pytest.fixture
def counted_renders(monkeypatch):
    """How many times the world's renderer ran (a cache miss renders, a hit does not)."""
    from cir_demo.world import loader

    calls = []
    plain = loader.render_batch
    monkeypatch.setattr(loader, "render_batch", lambda *a, **k: calls.append(1) or plain(*a, **k))
    return calls


def test_the_train_pixels_are_rendered_again_when_code_on_their_path_changes(
    clone_package, seeded_cache, counted_renders
):
    from cir_demo.training.data import world_pixels
    from cir_demo.world.loader import open_world

    world = open_world(size="tiny", progress=False)
    ids = sorted(world.manifest.get("test_corpus_ids") or [])[:3] or ["w-te-000000"]
    first = world_pixels(world, ids, "test-corpus", progress=False)
    assert np.array_equal(world_pixels(world, ids, "test-corpus", progress=False), first)
    assert len(counted_renders) == 1  # the second read was the cache's
    change_a_number(clone_package / "explorer" / "failures.py")  # off the pixels' path: still a hit
    code_hash.code_sha256.cache_clear()
    world_pixels(world, ids, "test-corpus", progress=False)
    assert len(counted_renders) == 1
    changed = change_a_number(clone_package / "world" / "render" / "palette.py")
    code_hash.code_sha256.cache_clear()
    world_pixels(world, ids, "test-corpus", progress=False)
    assert len(counted_renders) == 2, f"{changed}: the renderer changed, the warm folder replayed old pixels"


@pytest.mark.parametrize(
    "edited", ["training/world_clip.py", "models/preprocess.py", "world/render/palette.py"]
)  # the encoder's code, the pixels' preprocessing, the renderer
def test_the_test_corpus_embeddings_are_computed_again_when_code_on_their_path_changes(
    clone_package, tmp_path, monkeypatch, edited
):
    from cir_demo.training.data import cached_array
    from cir_demo.training.world_clip import ENCODE_CODE, ENCODE_LIBRARIES

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    computed = []

    def encode():
        computed.append(1)
        return np.full((2, 3), len(computed), np.float32)

    def corpus():  # as training/evaluate.py's `clip_embeddings` keeps them
        return cached_array("c" * 64, "test-corpus-emb-weights", encode, ENCODE_CODE, ENCODE_LIBRARIES)

    assert corpus()[0, 0] == 1 and corpus()[0, 0] == 1 and len(computed) == 1
    changed = change_a_number(clone_package / edited)
    code_hash.code_sha256.cache_clear()
    assert corpus()[0, 0] == 2, f"{changed}: the old embeddings were replayed"


def test_the_judges_stage_1_cnn_is_trained_again_when_code_on_its_path_changes(clone_package):
    from types import SimpleNamespace

    from cir_demo.models.world_judge import JudgeArch
    from cir_demo.training.judge_start import judge_cnn_path

    cfg = SimpleNamespace(cnn_epochs=1, cnn_batch=8, cnn_lr=1e-3, seed=0, cnn_max_steps=2)
    kept = judge_cnn_path("c" * 64, JudgeArch(), cfg)  # the stage-1 cache is a hit when this file exists
    assert judge_cnn_path("c" * 64, JudgeArch(), cfg) == kept
    assert judge_cnn_path("c" * 64, JudgeArch(), SimpleNamespace(**{**vars(cfg), "cnn_lr": 2e-3})) != kept
    for edited in ("training/world_judge.py", "models/world_judge.py", "world/render/palette.py"):
        changed = change_a_number(clone_package / edited)  # the trainer, the network, the pixels
        code_hash.code_sha256.cache_clear()
        now = judge_cnn_path("c" * 64, JudgeArch(), cfg)
        assert now != kept, f"{changed}: the old CNN would be reused"
        kept = now


# --------------------------------------------------------------------------- every other cache folder
def test_the_generated_world_follows_the_generator_code(clone_package):
    from cir_demo.world.shipped import generator_sha256

    before = generator_sha256(clone_package / "world")
    change_a_number(clone_package / "world" / "generate.py")  # MAX_NEGATIVES
    generator_sha256.cache_clear()
    assert generator_sha256(clone_package / "world") != before  # a warm world folder is a miss (world_problems)


def test_the_corpus_embeddings_follow_the_encoders_code(clone_package):
    from cir_demo.retrievers.openclip import encoder_code

    clip = encoder_code()
    judge = code_hash.code_key(("cir_demo.models.world_judge",))  # the judge's image features (world_verifier)
    change_a_number(clone_package / "models" / "world_judge.py")  # GRID
    code_hash.code_sha256.cache_clear()
    assert code_hash.code_key(("cir_demo.models.world_judge",)) != judge and encoder_code() == clip
    change_a_number(clone_package / "retrievers" / "openclip.py")
    code_hash.code_sha256.cache_clear()
    assert encoder_code() != clip


def test_the_stores_runs_and_stored_benchmarks_follow_their_code(clone_package):
    """The run store's key reaches the family's metrics module (loaded by name, no import reaches it)."""
    from cir_demo.benchmarks.load_cache import cache_key
    from cir_demo.store.key import code_of

    rows, stored = code_of("cir_demo.metrics.pinpoint")[0], cache_key("pinpoint", [])
    change_a_number(clone_package / "metrics" / "pinpoint.py")
    change_a_number(clone_package / "benchmarks" / "pinpoint.py")
    code_hash.code_sha256.cache_clear()
    code_of.cache_clear()
    assert code_of("cir_demo.metrics.pinpoint")[0] != rows and cache_key("pinpoint", []) != stored


def test_a_text_proxys_descriptions_follow_the_request_they_answer(monkeypatch):
    """A description is the remote model's answer to one request: keyed by the request (model, prompts,
    images, sampling), which the code's prompt constants make; a changed prompt asks again."""
    from cir_demo.retrievers import text_proxy

    args = ("gpt-x", "make it red", ["sha256:0"], "short", 1, 0.0, 64, 512)
    before = text_proxy.cache_key(*args)
    monkeypatch.setattr(text_proxy, "SYSTEM_PROMPT", text_proxy.SYSTEM_PROMPT + " Be brief.")
    assert text_proxy.cache_key(*args) != before


# Every folder the code keeps under the data folder's cache/, and the tests above that change the code on
# its path and see its key change (a cache whose key differs is recomputed, never replayed)
KEY_TESTS = {
    "world": ["test_the_generated_world_follows_the_generator_code"],
    "world_models": [
        "test_the_train_pixels_are_rendered_again_when_code_on_their_path_changes",
        "test_the_test_corpus_embeddings_are_computed_again_when_code_on_their_path_changes",
        "test_the_judges_stage_1_cnn_is_trained_again_when_code_on_its_path_changes",
    ],
    "embeddings": ["test_the_corpus_embeddings_follow_the_encoders_code"],
    "rerank": [
        "test_a_changed_judge_module_changes_the_judges_keys_and_nothing_else",
        "test_a_clone_with_a_changed_judge_gives_on_a_warm_folder_what_it_gives_on_an_empty_one",
    ],
    "app": ["test_the_worlds_pixel_fingerprint_follows_the_renderer_code"],  # thumbnails/, pixels/
    "store": ["test_the_stores_runs_and_stored_benchmarks_follow_their_code"],
    "benchmarks": ["test_the_stores_runs_and_stored_benchmarks_follow_their_code"],
    "code-hash": ["test_a_hash_memoised_by_file_stats_is_recomputed_when_a_file_changes"],
    "text_proxy": ["test_a_text_proxys_descriptions_follow_the_request_they_answer"],
}


def test_every_cache_folder_the_code_creates_has_a_key_test():
    """The audit: every `cache_dir() / "<folder>"` in the package's code (and the pixel cache's folder)
    is listed in KEY_TESTS with tests of this module that exist; a new cache folder fails here until a
    test changes the code on its path and sees a recompute."""
    found = {}
    for path in sorted((REPO / "cir_demo").rglob("*.py")):
        for folder in re.findall(r'cache_dir\(\)\s*/\s*"([^"/]+)', path.read_text()):
            found.setdefault(folder, []).append(path.relative_to(REPO).as_posix())
    assert {"world_models", "rerank", "embeddings"} <= set(found), "the scan finds the known folders"
    uncovered = {f: where for f, where in found.items() if f not in KEY_TESTS}
    assert not uncovered, f"cache folders without a key test (add one to KEY_TESTS): {uncovered}"
    assert set(KEY_TESTS) <= set(found), f"KEY_TESTS lists folders no code creates: {set(KEY_TESTS) - set(found)}"
    defined = set(re.findall(r"^def (test_\w+)", Path(__file__).read_text(), re.M))
    missing = [t for tests in KEY_TESTS.values() for t in tests if t not in defined]
    assert not missing, f"KEY_TESTS names tests that do not exist: {missing}"


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


def test_a_code_hash_memoised_by_stats_is_the_parsed_one(tmp_path, monkeypatch):
    """`code_sha256_by_stats` gives `code_sha256` of a fresh parse (the oracle: the lru cache cleared),
    reads it back without parsing while no file of the package changes, and follows an edit of a reached
    module and a module newly imported (a file added) into the walk."""
    from cir_demo.utils.stat_memo import code_sha256_by_stats

    package = tmp_path / "cir_demo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cir_demo import b\nx = 1\n")
    (package / "b.py").write_text("y = 2\n")
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(code_hash, "PACKAGE_DIR", package)

    def parsed():
        code_hash.code_sha256.cache_clear()
        code_hash.code_modules.cache_clear()
        code_hash.code_text.cache_clear()  # conftest.py's parse per source too: a fresh parse of every file
        return code_hash.code_sha256(("cir_demo.a",))

    def bump(path: Path, text: str):
        path.write_text(text)
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))

    try:
        first = parsed()
        code_hash.code_sha256.cache_clear()
        assert code_sha256_by_stats(["cir_demo.a"]) == first
        code_hash.code_sha256.cache_clear()
        code_hash.code_text.cache_clear()  # so that only the stats memo can answer without a parse
        monkeypatch.setattr(code_hash.ast, "parse", lambda *a, **k: pytest.fail("parsed again"))
        assert code_sha256_by_stats(["cir_demo.a"]) == first  # read back: no syntax tree built
        monkeypatch.undo()
        monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
        monkeypatch.setattr(code_hash, "PACKAGE_DIR", package)
        bump(package / "b.py", "y = 3\n")  # the same size: only the modification time tells
        second = parsed()
        assert second != first and code_sha256_by_stats(["cir_demo.a"]) == second
        (package / "c.py").write_text("z = 4\n")
        bump(package / "a.py", "from cir_demo import b, c\nx = 1\n")
        third = parsed()
        assert third != second and code_sha256_by_stats(["cir_demo.a"]) == third
    finally:
        code_hash.code_sha256.cache_clear()
        code_hash.code_modules.cache_clear()


def test_a_runs_code_key_is_the_code_key_of_its_modules(tmp_path, monkeypatch):
    """The run store's key (read back by file stats) holds what `code_key` gives on a fresh parse of the
    producing modules and the family's metrics module, with the same library versions, on a cold memo and
    on a warm one."""
    from cir_demo.store.key import LIBRARIES, PRODUCING_CODE, code_of

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    code_hash.code_sha256.cache_clear()
    code_hash.code_modules.cache_clear()
    expected = code_hash.code_key((*PRODUCING_CODE, "cir_demo.metrics.cirr"), LIBRARIES)
    for _ in range(2):  # cold memo, then read back
        code_of.cache_clear()
        code_hash.code_sha256.cache_clear()
        assert code_of("cir_demo.metrics.cirr") == (expected["sha256"], expected["libraries"])
    assert (tmp_path / "cache" / "code-hash").is_dir()

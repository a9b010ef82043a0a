import os

# Tests never touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# One BLAS/OpenMP thread per process (this one and every child it starts), set before numpy, torch and
# faiss load: tests run beside their own child processes and Chromium on 2 shared cores, where a
# second thread mostly spin-waits for a core (docs/benchmarks.md). A test that wants more threads sets them.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# Validated benchmark loads are stored between runs (benchmarks/load_cache.py): in a folder of this
# session, so the tests exercise storing and replaying without writing into the developer's cache.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

os.environ["CIR_DEMO_BENCHMARK_CACHE"] = tempfile.mkdtemp(prefix="cir_demo_benchmarks_")
atexit.register(shutil.rmtree, os.environ["CIR_DEMO_BENCHMARK_CACHE"], True)
# What the tests generate (worlds, caches, indexes, runs) goes to a data root of this process, never
# into the working tree: the tests that check the working tree stays untouched (test_space.py,
# test_preflight.py) hold while another pytest-xdist worker runs beside them, and a developer's own
# caches neither help nor disturb the tests. A test that needs other folders sets them itself.
for _var in ("CIR_DEMO_CACHE", "CIR_DEMO_INDEXES", "CIR_DEMO_RUNS"):
    os.environ.pop(_var, None)
os.environ["CIR_DEMO_DATA"] = tempfile.mkdtemp(prefix="cir_demo_data_")
atexit.register(shutil.rmtree, os.environ["CIR_DEMO_DATA"], True)
# gradio's file cache (uploads, answered files; the apps the tests start and gradio_client's downloads):
# a folder of this process too, not the machine's <tmp>/gradio, which gradio never empties.
os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix="cir_demo_gradio_")
atexit.register(shutil.rmtree, os.environ["GRADIO_TEMP_DIR"], True)

import pytest  # noqa: E402

# gradio without its type-stub writer, as the app imports it (cir_demo/ui/gradio_import.py): test modules
# import gradio before cir_demo.ui, and the writer is half of an import's CPU in each worker.
from cir_demo.ui.gradio_import import install as _install_gradio_import  # noqa: E402

_install_gradio_import()


# The code hash's parse answers kept between processes (cir_demo/utils/parse_memo.py) in a folder of this
# run, set by the first pytest process (xdist's controller) and inherited by its workers and every child
# process they start: one parse of each file per run, whatever the processes; never the developer's.
if not os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["CIR_DEMO_CODE_MEMO"] = tempfile.mkdtemp(prefix="cir_demo_code_memo_")
    atexit.register(shutil.rmtree, os.environ["CIR_DEMO_CODE_MEMO"], True)
# Each source file parsed once per process for the code hash, as the entry points do (app.py,
# `python -m cir_demo`): before any module binds code_text by name (cir_demo/world/shipped.py).
from cir_demo.utils.parse_memo import install as _parse_each_source_once  # noqa: E402

_parse_each_source_once()


# The folder where generated tiny worlds are kept for the whole run (both xdist workers; set by the session
# fixture `world_parts_memo`), and whether the running test uses it: not in the modules about the
# generator (`GENERATOR_MODULE_PREFIX`).
WORLD_PARTS_MEMO: dict = {"folder": None, "on": False}
GENERATOR_MODULE_PREFIX = "test_world_"


def _each_tiny_world_part_generated_once() -> None:
    """Dozens of tests run the real code in an empty data folder, which generates the tiny world there
    again (its test part, or the whole world for training): the same bytes every time for this code
    (disk.py: same size and seed give byte-identical files). Here the first generation of each (part,
    `world_key`: generator code, version, numpy, Python; and the size's settings) is kept in a folder of
    this run, and a later generation into an empty folder copies its files in the order `write_world`
    writes them (manifest last). Only into an empty folder (beside the generation lock): a folder with a
    damaged or other world is adopted or regenerated as before. Done here, not in the package: the
    generator's code is in every world's key. The modules about the generator itself generate every time."""
    import fcntl
    import hashlib
    import json
    from pathlib import Path

    from cir_demo.world import disk
    from cir_demo.world.files import DATA_FILES, MANIFEST, TEST_FILES, TEST_MANIFEST

    plain = disk._generate_part
    written = {"test": (*TEST_FILES, TEST_MANIFEST), "full": (*DATA_FILES, TEST_MANIFEST, MANIFEST)}

    def generate_part(root, size, seed, part, progress):
        memo, root = WORLD_PARTS_MEMO["folder"], Path(root)
        if (
            memo is None
            or not WORLD_PARTS_MEMO["on"]
            or size != "tiny"
            or any(p.name != disk.LOCK_FILE for p in root.iterdir())
        ):
            return plain(root, size, seed, part, progress)
        from dataclasses import asdict

        from cir_demo.world.generate import SIZES
        from cir_demo.world.shipped import world_key

        key = {**world_key(size, seed), "part": part, "config": asdict(SIZES[size])}
        kept = memo / hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
        with open(f"{kept}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not kept.is_dir():
                manifest = plain(root, size, seed, part, progress)
                partial = kept.with_suffix(".partial")
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir(parents=True)
                for name in written[part]:
                    shutil.copyfile(root / name, partial / name)
                partial.rename(kept)
                return manifest
        for name in written[part]:  # into a hidden name, then renamed: a reader never sees half a file
            shutil.copyfile(kept / name, root / f".{name}.copy")
            os.replace(root / f".{name}.copy", root / name)
        return disk.read_manifest(root, disk.PARTS[part][0])

    disk._generate_part = generate_part


_each_tiny_world_part_generated_once()


def _each_scene_rendered_once() -> None:
    """The world's pictures rendered once per run (render_memo.py), in `WORLD_PARTS_MEMO`'s folder; the
    modules about the world itself render every time."""
    from render_memo import install

    from cir_demo.world import loader

    install(loader, lambda: WORLD_PARTS_MEMO["folder"] if WORLD_PARTS_MEMO["on"] else None)


_each_scene_rendered_once()


@pytest.fixture(scope="session", autouse=True)
def world_parts_memo(tmp_path_factory):
    """The folder of this run (shared by the xdist workers) that keeps the generated tiny worlds."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # this run's, never another's
    (shared / "world_parts").mkdir(exist_ok=True)
    WORLD_PARTS_MEMO["folder"] = shared / "world_parts"
    yield
    WORLD_PARTS_MEMO["folder"] = None


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are set up, which may generate a world
def pytest_runtest_setup(item):
    WORLD_PARTS_MEMO["on"] = not item.module.__name__.startswith(GENERATOR_MODULE_PREFIX)


SHARED_TOKENIZERS: dict = {}  # (model name, its registered config, arguments) -> open_clip's SimpleTokenizer


def each_tokenizer_built_once(plain):
    """open_clip's `get_tokenizer` (`plain`) as the tiny-model modules use it (`tiny_setup`): open_clip
    builds its BPE tokenizer anew (about 75 ms: the vocabulary read and merged) for every model it loads,
    and these tests load the tiny open_clip models hundreds of times. A model name of open_clip's own
    registry gets one `SimpleTokenizer` per (name, its registered config, arguments) for the session,
    shared: it holds nothing but its settings and a memo of its own encodings, so a load tokenizes
    exactly as with a fresh one. Other names and other kinds of tokenizer are built each time."""
    import json

    import open_clip
    from open_clip.tokenizer import SimpleTokenizer

    def get_tokenizer(model_name: str = "", *args, **kwargs):
        if ":" in model_name:  # hf-hub:, local-dir: read their config from elsewhere
            return plain(model_name, *args, **kwargs)
        config = json.dumps(open_clip.get_model_config(model_name), sort_keys=True, default=str)
        key = (model_name, config, repr(args), repr(sorted(kwargs.items())))
        if key not in SHARED_TOKENIZERS:
            tokenizer = plain(model_name, *args, **kwargs)
            if type(tokenizer) is not SimpleTokenizer:
                return tokenizer
            SHARED_TOKENIZERS[key] = tokenizer
        return SHARED_TOKENIZERS[key]

    return get_tokenizer


# `python -m pytest` runs on two pytest-xdist workers (pytest.ini: `-n 2 --dist loadgroup
# --no-loadscope-reorder`), each with its own session fixtures and data root. Every test is in one
# xdist group, run on one worker: its module's (module fixtures are built once, as without xdist), or,
# for the tests sharing what costs most to build once per session, one group across their modules.
# Modules sharing what one process caches, so that it is built once: the browser modules share
# `browser_support.run_tiny_eval`'s run; the training modules the tiny world's train pixels (rendered
# into the data root's cache by the first `world_pixels`). The tiny corpus encoded by
# world-CLIP and the world verifier needs no group: `tiny_world_seed` is built once across the workers.
MODULE_GROUPS = {
    "test_ui_browser": "tiny_eval",
    "test_ui_browser_visit": "tiny_eval",
    "test_training_world": "train_pixels",
    "test_training_split": "train_pixels",
}


def shared_group(item) -> str:
    """The group of a test that uses the `space_app` or the `default_world` session fixture (the
    first, when both), of a module in `MODULE_GROUPS`, else its module's name."""
    used = getattr(item, "fixturenames", ())
    for fixture in ("space_app", "default_world"):
        if fixture in used:
            return fixture
    module = item.module.__name__
    return MODULE_GROUPS.get(module, module)


# The groups that take longest, longest first (by wall seconds per group on one worker over a whole
# suite: `--durations` shows them): each worker is handed its next group as it finishes one, so the
# suite ends evenly when the last groups handed out are short ones. xdist's own order (by test count;
# pytest.ini's `--no-loadscope-reorder` turns it off) would hand the 2-test groups of the two
# first-start apps out last. Every other group follows in file order.
LONGEST_GROUPS = (
    "tiny_eval",
    "train_pixels",
    "test_cache_keys",
    "test_prebuilt_run",
    "test_faults",
    "default_world",
    "test_ui_browser_first_start",
    "space_app",
    "test_ui_api",
    "test_code_shape",
    "test_output_folders",
    "test_harness_pipeline",
    "test_bench_latency",
    "test_explorer_own_runs",
    "test_index_milvus",
    "test_explorer_per_query_truth",
    "test_gradio_import",
    "test_index_shard",
    "test_engine",
    "test_preflight",
)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items):
    groups = {item: shared_group(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item]))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order xdist hands groups out; one process keeps file order
        rank = {group: i for i, group in enumerate(LONGEST_GROUPS)}
        items.sort(key=lambda item: rank.get(groups[item], len(rank)))


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Collecting imports every test module, and with them torch, gradio, pandas and the package: over half
    a million objects the collector tracks, which live until the process ends. The collector makes a full
    pass over every one of them each time the heap has grown by a quarter (two dozen passes while these
    imports run, each longer than the last); it is off until they are done. Then they are frozen: left
    out of every later pass (pytest's five at its close among them). Frozen objects are still freed by
    reference counting; only a cycle among them outlives its use: the imported modules' own, and the few
    cycles the imports left, kept rather than found by a full pass.

    What the collector still sees are the tests' own objects: worlds, frames, models, most of them freed
    by reference counting within the test. At the default first threshold (700 allocations) many live
    long enough to reach the oldest generation, whose growth by a quarter then starts a full pass (some
    thirty a run per worker, each over a few hundred thousand objects); at 10,000 few get that far, and
    a worker makes a handful (docs/benchmarks.md)."""
    import gc

    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.set_threshold(10_000, 10, 10)
        gc.enable()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """At its close, after this hook, pytest makes five full collector passes in a row (its unraisable-
    exception plugin: the finalisers one pass runs may leave garbage for the next), each over every
    object the tests left alive; on the worker that finishes last they are the suite's last seconds, on
    one core. Here the passes run until one finds no garbage (two, mostly), which frees what pytest's
    passes would, any exception a finaliser raises reaching pytest's report as before. What is left is
    alive and frozen, and pytest's five passes have nothing to look through."""
    import gc

    for _ in range(5):
        if gc.collect() == 0:
            break
    gc.freeze()


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest, and deterministically, on one torch thread (2 shared cores)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture()
def quiet_machine(monkeypatch):
    """Two CPUs and no other work, as `cir_demo.utils.beside.spare_core` sees the machine, whatever the
    machine running the suite (its other worker keeps it busy): for the tests of what a forked child does."""
    from cir_demo.utils import beside

    monkeypatch.setattr(beside, "usable_cpus", lambda: 2)
    monkeypatch.setattr(beside, "other_work", lambda: 0.0)


@pytest.fixture(scope="session")
def audited_training(tmp_path_factory):
    """World-CLIP, world-CIR and the world judge trained for 2 steps on the tiny world under a file-open
    audit (`tests/training_audit.py`): test_training_split.py checks what the audit saw,
    test_training_world.py the world-CIR and judge it wrote (one training of each for both modules,
    which share an xdist group). Read-only: a test that trains on from one copies its folder."""
    from training_audit import audited_training as train

    return train(tmp_path_factory.mktemp("audited_training"))


# The caches `tiny_setup` shares between modules: keyed on their content (the world's generator, the
# models' weights and code, the pixels' code), costly to fill (the corpus encoded and its images warmed),
# and never a source of what a test reads as a result. Per-query rows, reranker scores, runs and the rest
# are each module's own, so that no module sees what another computed before it (in any order).
TINY_SHARED_CACHES = ("world", "embeddings", "app")


@pytest.fixture(scope="session")
def tiny_shared(tmp_path_factory):
    """The folder of this process that `tiny_setup` modules share: the tiny models' weights, the caches
    of `TINY_SHARED_CACHES`, the indexes built from those embeddings, and the runs computed once for
    several modules (`browser_support.run_tiny_eval`)."""
    shared = tmp_path_factory.getbasetemp() / "ui_shared"
    for name in TINY_SHARED_CACHES:
        (shared / "cache" / name).mkdir(parents=True, exist_ok=True)
    return shared


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory, tiny_shared):
    """Environment (a cache, indexes and a runs folder of this module's, in which the shared caches of
    `tiny_shared` are linked) and the tiny models of `cir_demo.testing.explorer` registered; yields
    (this module's root folder, retriever names)."""
    import torch
    from cir_demo.testing.explorer import register_tiny_models, unregister_tiny_models

    threads = torch.get_num_threads()  # the service sets 1 while serving; give the next module its setting back
    root = tmp_path_factory.mktemp("ui_module")
    for name in TINY_SHARED_CACHES:
        (root / "cache" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "cache" / name).symlink_to(tiny_shared / "cache" / name, target_is_directory=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_CACHE", str(root / "cache"))
    mp.setenv("CIR_DEMO_INDEXES", str(tiny_shared / "indexes"))
    mp.setenv("CIR_DEMO_RUNS", str(root / "runs"))
    names = register_tiny_models(tiny_shared / "models")
    import open_clip

    mp.setattr(open_clip, "get_tokenizer", each_tokenizer_built_once(open_clip.get_tokenizer))
    yield root, names
    unregister_tiny_models(names)
    mp.undo()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def service(tiny_setup):
    """An `ExplorerService` over 20 intents of the tiny world with the tiny models and verifier."""
    from cir_demo.testing.explorer import build_tiny_service

    _, names = tiny_setup
    svc = build_tiny_service(names)
    yield svc
    svc.engine.close()


@pytest.fixture(scope="session")
def default_world(tmp_path_factory):
    """The default world (size "default", seed 0), built once per session for the tests about that
    world itself (the tiny world serves every other test): (its `BuiltWorld`, a cache folder holding
    its test part written as `load_world()` finds it under CIR_DEMO_CACHE). Shared and read-only: tests
    open it through `default_world_cache`, never write into it. Only the test part is written: no test
    reads the train split from disk (the statistics test reads the `BuiltWorld`), and its files cost
    CPU to write."""
    from cir_demo.world.disk import world_dir, write_world
    from cir_demo.world.generate import build_test_part, build_world

    cache = tmp_path_factory.mktemp("default_world_cache")
    test_part = build_test_part("default", 0)
    built = build_world("default", 0, test=test_part)
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_CACHE", str(cache))
    write_world(test_part, world_dir("default", 0))
    mp.undo()
    return built, cache


@pytest.fixture()
def default_world_cache(default_world, tmp_path, monkeypatch):
    """CIR_DEMO_CACHE set to a fresh folder of this test's own, in which the shared default world is
    linked (no copy, no build): `load_world()` opens it, everything else the test caches is its own."""
    cache = linked_default_world(default_world, tmp_path / "cache")
    monkeypatch.setenv("CIR_DEMO_CACHE", str(cache))
    return cache


def linked_default_world(default_world, cache):
    """`cache`, a new cache folder in which the shared default world is linked (read-only)."""
    (cache / "world").mkdir(parents=True)
    (cache / "world" / "default-seed0").symlink_to(
        default_world[1] / "world" / "default-seed0", target_is_directory=True
    )
    return cache


@pytest.fixture(scope="session")
def tiny_world_seed(tmp_path_factory):
    """A cache folder holding the tiny world's test part and its corpus encoded by world-CLIP's image
    tower and by the world verifier, as a first `--eval` of the world models leaves them (the real code,
    on one torch thread as the tests run). Built once per suite: the first worker that asks builds it
    under a lock in the folder both workers' temporary folders share; the other waits and reuses it.
    Read-only: tests take a private copy through `seeded_cache`."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # this run's, never another's
    seed = shared / "tiny_world_seed"
    with open(shared / "tiny_world_seed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not seed.is_dir():
            partial = shared / "tiny_world_seed.partial"
            shutil.rmtree(partial, ignore_errors=True)
            build_tiny_world_seed(partial)
            partial.rename(seed)
    return seed


def build_tiny_world_seed(cache) -> None:
    """The tiny world and its world-CLIP and world-verifier corpus features, written into `cache`."""
    from cir_demo.engine import RetrievalEngine
    from cir_demo.utils.threads import torch_threads
    from cir_demo.world import load_world

    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_CACHE", str(cache))
    try:
        with torch_threads(1):
            bench = load_world(size="tiny", progress=False)
            engine = RetrievalEngine(bench, ["world-clip-image"], progress=False)
            engine.prefetch_corpus_embeddings(["world-clip-image"], "world-verifier")
            engine.close()
    finally:
        mp.undo()
    assert len(list((cache / "embeddings").rglob("*.npy"))) == 2, "the seed holds both corpus encodings"


@pytest.fixture()
def seeded_cache(tiny_world_seed, tmp_path, monkeypatch):
    """CIR_DEMO_CACHE set to this test's own copy of `tiny_world_seed` (a copy, not links: a test may
    damage its files in place): an `--eval` of world-CLIP and the world verifier on the tiny world finds
    its world and corpus features there and encodes no corpus image."""
    return private_seed_copy(tiny_world_seed, tmp_path / "cache", monkeypatch)


def private_seed_copy(seed, cache, mp):
    """`cache`, a copy of the seed folder, set as CIR_DEMO_CACHE with the MonkeyPatch `mp`."""
    shutil.copytree(seed, cache)
    mp.setenv("CIR_DEMO_CACHE", str(cache))
    return cache


SPACE_APP_ARGS = "--world-size tiny --limit 2 --retrievers world-clip-fusion,world-clip-image --no-thumbnail-warmer"


@pytest.fixture(scope="session")
def space_app(tmp_path_factory, tiny_world_seed):
    """One `python app.py` as a Hugging Face Space starts it (no arguments: CIR_DEMO_ARGS holds them;
    SPACE_ID set; persistent storage at CIR_DEMO_SPACE_STORAGE; host and port from GRADIO_*), up to
    "explorer ready", shared by test_space.py (port, storage, arguments) and the fresh-start browser
    test (its background run computes the failure sorts and the Report): a first start on a Space is
    exactly the fresh start, and one process with one background run serves both. The storage holds
    nothing but the tiny corpus's stored embeddings (`tiny_world_seed`'s), as the default world's first
    start finds its corpus embeddings shipped: the app still generates the world and builds its indexes
    there, and neither it nor its background run encodes a corpus image. Yields a
    namespace: url, storage, log (the app's output file), proc, repo_before (the working tree's
    cache/, indexes/, runs/ before the start)."""
    import socket
    import subprocess
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    from process_cpu import cpu_seconds, until, wait_while_working

    root = Path(__file__).resolve().parent.parent
    folder = tmp_path_factory.mktemp("space_app")
    storage = folder / "data"
    shutil.copytree(tiny_world_seed / "embeddings", storage / "cache" / "embeddings")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CIR_DEMO_DATA", "CIR_DEMO_CACHE", "CIR_DEMO_INDEXES", "CIR_DEMO_RUNS")
    }
    env.update(
        {
            "SPACE_ID": "someone/cir-demo",
            "SYSTEM": "spaces",
            "CIR_DEMO_SPACE_STORAGE": str(storage),
            "GRADIO_SERVER_NAME": "127.0.0.1",
            "GRADIO_SERVER_PORT": str(port),
            "HF_HUB_OFFLINE": "1",
            "GRADIO_ANALYTICS_ENABLED": "False",
            "PYTHONUNBUFFERED": "1",
            "CIR_DEMO_ARGS": SPACE_APP_ARGS,
        }
    )
    repo_before = {name: tree(root / name) for name in ("cache", "indexes", "runs")}
    log = folder / "app.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # as long as the start takes while the app works (beside other jobs at nice 0 it can outlast any
        # fixed bound); it fails after 300 s in which the app used no CPU
        wait_while_working(
            until(lambda: "explorer ready" in log.read_text() or proc.poll() is not None),
            lambda: cpu_seconds(proc.pid),
            300,
        )
        assert proc.poll() is None, log.read_text()
        assert "explorer ready" in log.read_text(), log.read_text()
        yield SimpleNamespace(
            url=f"http://127.0.0.1:{port}/", storage=storage, log=log, proc=proc, repo_before=repo_before
        )
    finally:
        proc.terminate()
        proc.wait(30)


def pytest_runtest_teardown(item, nextitem):
    """Stop `space_app` after the last test of this process that uses it, not at the end of the
    session: idle with its run done, the app still spends CPU every second, and its group runs early (`LONGEST_GROUPS`). Under xdist the group's tests
    run one after another, so the next test tells; in one process, every later one."""
    app = item.funcargs.get("space_app") if hasattr(item, "funcargs") else None
    if app is None:
        return
    items = item.session.items
    later = [nextitem] if os.environ.get("PYTEST_XDIST_WORKER") else items[items.index(item) + 1 :]
    if not any("space_app" in getattr(test, "fixturenames", ()) for test in later if test is not None):
        app.proc.terminate()
        app.proc.wait(30)


def tree(folder):
    """Every path under `folder`, relative to it (empty when it does not exist)."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


@pytest.fixture(scope="session")
def shipped_tiny_world(tmp_path_factory):
    """A prebuilt root holding the tiny world's (seed 0) shipped test part, as `index prebuilt --only
    world` writes it (cir_demo/world/shipped.py); read-only: tests copy it (`shipped_world_copy`)."""
    from cir_demo.world.pack import pack_world
    from cir_demo.world.shipped import shipped_world_dir

    root = tmp_path_factory.mktemp("shipped_tiny_world")
    pack_world("tiny", 0, shipped_world_dir("tiny", 0, root), {"what": "tests"})
    return root


@pytest.fixture
def shipped_world_copy(shipped_tiny_world, tmp_path, monkeypatch):
    """A copy of `shipped_tiny_world` set as CIR_DEMO_PREBUILT, and an empty cache (CIR_DEMO_CACHE) for
    one test; returns the copy's shipped folder of the tiny world."""
    from cir_demo.world.shipped import shipped_world_dir

    shutil.copytree(shipped_tiny_world, tmp_path / "prebuilt")
    monkeypatch.setenv("CIR_DEMO_PREBUILT", str(tmp_path / "prebuilt"))
    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    return shipped_world_dir("tiny", 0)

import os

# Tests never touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Validated benchmark loads are stored between runs (benchmarks/load_cache.py): in a folder of this
# session, so the tests exercise storing and replaying without writing into the developer's cache.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

os.environ["CIR_DEMO_BENCHMARK_CACHE"] = tempfile.mkdtemp(prefix="cir_demo_benchmarks_")
atexit.register(shutil.rmtree, os.environ["CIR_DEMO_BENCHMARK_CACHE"], True)

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest, and deterministically, on one torch thread (2 shared cores)."""
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """Environment (cache, indexes, runs under one shared temp folder) and the tiny models of
    `cir_demo.testing.explorer` registered; yields (root folder, retriever names)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("open_clip")
    from cir_demo.testing.explorer import register_tiny_models, unregister_tiny_models

    threads = torch.get_num_threads()  # the service sets 1 while serving; give the next module its setting back
    root = tmp_path_factory.getbasetemp() / "ui_shared"
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_CACHE", str(root / "cache"))
    mp.setenv("CIR_DEMO_INDEXES", str(root / "indexes"))
    mp.setenv("CIR_DEMO_RUNS", str(root / "runs"))
    names = register_tiny_models(root / "models")
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
    it written as `load_world()` finds it under CIR_DEMO_CACHE). Shared and read-only: tests open it
    through `default_world_cache`, never write into it."""
    from cir_demo.world.generate import build_world, write_world, world_dir

    cache = tmp_path_factory.mktemp("default_world_cache")
    built = build_world("default", 0)
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_CACHE", str(cache))
    write_world(built, world_dir("default", 0))
    mp.undo()
    return built, cache


@pytest.fixture()
def default_world_cache(default_world, tmp_path, monkeypatch):
    """CIR_DEMO_CACHE set to a fresh folder of this test's own, in which the shared default world is
    linked (no copy, no build): `load_world()` opens it, everything else the test caches is its own."""
    cache = tmp_path / "cache"
    (cache / "world").mkdir(parents=True)
    (cache / "world" / "default-seed0").symlink_to(default_world[1] / "world" / "default-seed0", target_is_directory=True)
    monkeypatch.setenv("CIR_DEMO_CACHE", str(cache))
    return cache

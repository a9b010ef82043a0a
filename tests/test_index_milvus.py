"""Corpus indexes in Milvus (`--index-uri`): on an embedded Milvus Lite, one per module (its server
starts in this process, once), against brute force over the tiny model's own embeddings and a faiss
flat index; against a real server only when CIR_DEMO_MILVUS_URI names one."""

from __future__ import annotations

import argparse
import os

import numpy as np
import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from cir_demo.index import milvus_build, milvus_store  # noqa: E402
from cir_demo.index.build import build_corpus_index, ensure_index  # noqa: E402
from cir_demo.index.faiss_index import brute_force_search  # noqa: E402
from cir_demo.index.milvus_build import build_milvus_index  # noqa: E402
from cir_demo.index.milvus_store import MilvusIndexError  # noqa: E402
from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark  # noqa: E402


@pytest.fixture(scope="module")
def lite(tmp_path_factory):
    """One Milvus Lite folder (and so one in-process server) for the module; released at its end."""
    path = str(tmp_path_factory.mktemp("milvus") / "sub" / "index.db")  # the parent folder is created
    yield path
    from milvus_lite import server_manager_instance

    server_manager_instance.release_server(path)


@pytest.fixture()
def client(lite):
    return milvus_store.connect(milvus_store.parse_uri(lite))


def reference(bench, retriever) -> np.ndarray:
    """Every corpus image encoded on its own (no batching, no index code)."""
    return np.concatenate([retriever.encode_images([bench.images.open(i)]) for i in bench.corpus_ids])


def queries(retriever, bench, n_random: int = 6) -> np.ndarray:
    rng = np.random.default_rng(0)
    own = retriever.encode_images([bench.images.open(i) for i in bench.corpus_ids[:3]])
    rand = rng.standard_normal((n_random, retriever.dim)).astype(np.float32)
    return np.concatenate([own, rand / np.linalg.norm(rand, axis=1, keepdims=True)])


def assert_brute_force(loaded, bench, retriever, k: int) -> None:
    xq = queries(retriever, bench)
    D_bf, I_bf = brute_force_search(xq, reference(bench, retriever), k)
    for (ids, scores), d_row, i_row in zip(loaded.search(xq, k), D_bf, I_bf):
        keep = i_row >= 0
        assert ids == [bench.corpus_ids[j] for j in i_row[keep]]
        np.testing.assert_allclose(scores, d_row[keep], atol=1e-5)


def aliases(client) -> dict[str, str]:
    return {a: client.describe_alias(a)["collection_name"] for a in client.list_aliases()["aliases"]}


def test_build_equals_faiss_flat_and_brute_force_and_a_second_build_is_fresh(lite, tmp_path):
    bench, r = tiny_benchmark(45, name="mv-build"), TinyConvRetriever()
    loaded = build_milvus_index(bench, r, lite, progress=False)
    m = loaded.manifest
    assert loaded.built and (m.kind, m.count, m.dim, m.params["index_type"]) == ("milvus", 45, 16, "FLAT")
    assert m.spec_hash == r.spec_hash() and m.weights_sha256 == "seed-0" and m.choice.startswith("auto: exact")
    assert m.provenance["index_code"] == milvus_build.milvus_code()
    assert_brute_force(loaded, bench, r, 10)
    assert_brute_force(loaded, bench, r, 60)  # k beyond the corpus: every image once, padding stripped
    faiss = build_corpus_index(bench, r, out_dir=tmp_path / "faiss", progress=False)
    xq = queries(r, bench)
    assert [ids for ids, _ in loaded.search(xq, 20)] == [ids for ids, _ in faiss.search(xq, 20)]
    encoded = r.images_encoded
    again = ensure_index(bench, r, index_uri=lite, progress=False)  # the engine's path: found fresh
    assert not again.built and r.images_encoded == encoded and again.collection == loaded.collection
    assert again.ids == bench.corpus_ids and again.manifest.to_dict() == m.to_dict()


def test_changed_corpus_is_rebuilt_beside_the_old_and_the_alias_moves(lite, client):
    r = TinyConvRetriever()
    old = build_milvus_index(tiny_benchmark(30, name="mv-stale"), r, lite, progress=False)
    grown = tiny_benchmark(34, name="mv-stale")
    served = build_milvus_index(grown, r, lite, progress=False, allow_stale=True)  # the app's --allow-stale
    assert not served.built and served.collection == old.collection and len(served.ids) == 30
    assert any(x.startswith("corpus changed") for x in served.stale_reasons)
    new = build_milvus_index(grown, r, lite, progress=False)
    assert new.built and new.collection != old.collection and aliases(client)[new.alias] == new.collection
    assert not client.has_collection(old.collection)  # ours, same spec and code, outdated: dropped
    assert_brute_force(new, grown, r, 10)


def test_other_code_is_refused_unless_forced(lite, client, monkeypatch):
    bench, r = tiny_benchmark(20, name="mv-code"), TinyConvRetriever()
    first = build_milvus_index(bench, r, lite, progress=False)
    real = milvus_build.milvus_code()
    monkeypatch.setattr(milvus_build, "milvus_code", lambda: {**real, "sha256": "f" * 64})
    with pytest.raises(MilvusIndexError) as exc:
        build_milvus_index(bench, r, lite, progress=False)
    line = str(exc.value)
    assert "\n" not in line and lite in line and "built by other code" in line and "--force" in line
    assert client.has_collection(first.collection) and aliases(client)[first.alias] == first.collection
    forced = build_milvus_index(bench, r, lite, progress=False, force=True)
    assert forced.built and forced.collection != first.collection and not client.has_collection(first.collection)
    assert_brute_force(forced, bench, r, 5)


def test_force_rebuilds_a_fresh_collection_under_the_other_name(lite, client):
    bench, r = tiny_benchmark(15, name="mv-force"), TinyConvRetriever()
    first = build_milvus_index(bench, r, lite, progress=False)
    encoded = r.images_encoded
    second = build_milvus_index(bench, r, lite, progress=False, force=True)
    third = build_milvus_index(bench, r, lite, progress=False, force=True)
    assert second.built and third.built and r.images_encoded == 3 * encoded  # encoded again each time
    assert second.collection == first.collection + "_r" and third.collection == first.collection
    assert aliases(client)[first.alias] == third.collection and not client.has_collection(second.collection)
    assert_brute_force(third, bench, r, 5)


def test_a_killed_build_leaves_the_old_one_serving_and_resumes(lite, client, monkeypatch, capsys):
    r = TinyConvRetriever()
    old = build_milvus_index(tiny_benchmark(25, name="mv-kill"), r, lite, progress=False)
    bench = tiny_benchmark(47, name="mv-kill")
    monkeypatch.setattr(milvus_store, "INSERT_ROWS", 10)
    real_calling, inserted = milvus_store.calling, []

    def dies_at_row_20(target, what, fn, *a, **kw):
        if what.startswith("inserting rows"):
            if what.startswith("inserting rows 20.."):
                raise KeyboardInterrupt  # the process killed between two batches
            inserted.append(what)
        return real_calling(target, what, fn, *a, **kw)

    monkeypatch.setattr(milvus_store, "calling", dies_at_row_20)
    with pytest.raises(KeyboardInterrupt):
        build_milvus_index(bench, r, lite, progress=False)
    assert inserted == ["inserting rows 0..9 into " + inserted[0].split(" into ")[1], inserted[1]]
    assert aliases(client)[old.alias] == old.collection  # readers still get the old, whole collection
    still = build_milvus_index(tiny_benchmark(25, name="mv-kill"), r, lite, progress=False)
    assert not still.built and still.collection == old.collection
    assert_brute_force(still, tiny_benchmark(25, name="mv-kill"), r, 5)
    inserted.clear()
    monkeypatch.setattr(
        milvus_store, "calling", lambda t, w, f, *a, **kw: (inserted.append(w), real_calling(t, w, f, *a, **kw))[1]
    )
    resumed = build_milvus_index(bench, r, lite, progress=False)
    assert "resuming the build" in capsys.readouterr().err and resumed.built
    assert [w.split(" into ")[0] for w in inserted if w.startswith("inserting")] == [
        "inserting rows 20..29",
        "inserting rows 30..39",
        "inserting rows 40..46",
    ]
    assert milvus_store.row_count(client, milvus_store.parse_uri(lite), resumed.collection) == 47
    assert aliases(client)[old.alias] == resumed.collection and not client.has_collection(old.collection)
    assert_brute_force(resumed, bench, r, 10)


def test_a_collection_not_built_here_is_refused_and_left_alone(lite, client):
    from pymilvus import DataType

    bench, r = tiny_benchmark(12, name="mv-foreign"), TinyConvRetriever()
    from cir_demo.index.build import benchmark_index_name

    alias = milvus_store.alias_name(benchmark_index_name(bench), r.name, r.spec_hash())
    schema = client.create_schema(auto_id=False)
    schema.add_field("k", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=4)
    client.create_collection(alias, schema=schema)
    client.insert(alias, [{"k": 7, "v": [0.1, 0.2, 0.3, 0.4]}])
    with pytest.raises(MilvusIndexError, match="was not built by cir_demo; refusing") as exc:
        build_milvus_index(bench, r, lite, progress=False)
    assert "\n" not in str(exc.value) and r.images_encoded == 0  # refused before any encoding
    rows = client.query(alias, filter="k >= 0", output_fields=["k"], consistency_level="Strong")
    assert [row["k"] for row in rows] == [7]


def test_dimension_mismatch_and_bad_flags_are_one_line(lite, monkeypatch):
    bench, r = tiny_benchmark(10, name="mv-dim"), TinyConvRetriever()
    loaded = build_milvus_index(bench, r, lite, progress=False)
    with pytest.raises(
        MilvusIndexError, match=r"dimension mismatch: collection \S+ holds 16-d vectors, the queries are 8-d"
    ):
        loaded.search(np.ones((2, 8), np.float32), 3)
    for uri, part in (("ftp://h:1", "not a Milvus URI"), ("index.faiss", "ending in .db"), ("", "got nothing")):
        with pytest.raises(ValueError, match=part):
            milvus_store.parse_uri(uri)
    from cir_demo.index.cli import index_flags, index_uri_problems

    args = argparse.Namespace(index_uri=lite, index_params='{"index_type": "IVF_PQQ"}', kind="flat", nlist=None)
    problems = index_uri_problems(index_flags(args))
    assert any("index_type must be one of" in p for p in problems) and any(
        p.startswith("--kind: faiss") for p in problems
    )
    assert index_uri_problems(index_flags(argparse.Namespace(index_uri=None, index_params="{}"))) == [
        "--index-params goes with --index-uri (a Milvus index); faiss takes --kind"
    ]
    assert "not valid JSON" in index_uri_problems(index_flags(argparse.Namespace(index_uri=lite, index_params="{x")))[0]


def test_unreachable_server_is_one_line_without_credentials(monkeypatch):
    monkeypatch.setenv("MILVUS_TOKEN", "root:s3cr3t-token")
    target = milvus_store.parse_uri("http://alice:pw-in-uri@127.0.0.1:9/?token=t0k")
    assert target.shown == "http://127.0.0.1:9"
    with pytest.raises(MilvusIndexError) as exc:
        milvus_store.connect(target, timeout=2)
    line = str(exc.value)
    assert "\n" not in line and "http://127.0.0.1:9 cannot be reached" in line
    assert not any(secret in line for secret in ("s3cr3t", "pw-in-uri", "alice", "t0k"))


class ScriptedServer:
    """A client whose index states follow a script (what a server answers while it builds), for the waits'
    timing and for a build that fails after the server accepted it: Milvus Lite builds at once and
    accepts every index type, so it shows neither."""

    def __init__(self, states: dict[str, list[dict]]):
        self.states, self.looks, self.declared = states, [], []

    def prepare_index_params(self):
        from pymilvus import MilvusClient

        return MilvusClient.prepare_index_params()

    def create_index(self, name, params, sync=True):
        assert sync is False  # the build is waited for by our looks, not the client's half-second sleeps
        self.declared.append(next(iter(params)).index_type)

    def describe_index(self, name, field):
        self.looks.append(self.declared[-1] if self.declared else name)
        script = self.states[self.looks[-1]]
        return script.pop(0) if len(script) > 1 else script[0]


def test_the_waits_look_at_once_then_at_growing_intervals_and_a_failed_build_tries_the_next_type(monkeypatch):
    slept = []
    monkeypatch.setattr(milvus_store, "time", argparse.Namespace(sleep=slept.append))  # this module's sleeps only
    target = milvus_store.parse_uri("/tmp/unused.db")
    rows = [{"state": "InProgress", "indexed_rows": k, "pending_index_rows": 100 - k} for k in (0, 10, 40, 70, 90, 99)]
    server = ScriptedServer({"c": [*rows, {"state": "Finished", "indexed_rows": 100, "pending_index_rows": 0}]})
    milvus_store.wait_indexed(server, target, "c", 100, poll_s=0.25)
    assert len(server.looks) == 7 and slept == [0.02, 0.04, 0.08, 0.16, 0.25, 0.25]
    building = {"state": "InProgress"}
    server = ScriptedServer(
        {
            "GPU_CAGRA": [building, {"state": "Failed", "index_state_fail_reason": "no GPU"}],
            "HNSW": [building, building, {"state": "Finished"}],
        }
    )
    slept.clear()
    chosen = milvus_store.create_vector_index(server, target, "c", ["GPU_CAGRA", "HNSW"], 10**6, {})
    assert chosen[0] == "HNSW" and server.declared == ["GPU_CAGRA", "HNSW"]
    assert server.looks == ["GPU_CAGRA", "GPU_CAGRA", "HNSW", "HNSW", "HNSW"] and slept == [0.02, 0.02, 0.04]
    server = ScriptedServer({"GPU_CAGRA": [{"state": "Failed", "index_state_fail_reason": "no GPU"}]})
    with pytest.raises(MilvusIndexError, match=r"builds none of GPU_CAGRA .*no GPU"):
        milvus_store.create_vector_index(server, target, "c", ["GPU_CAGRA"], 10**6, {})


def test_index_choice_by_size_follows_the_flat_limit():
    from cir_demo.index.choose import flat_limit

    n = flat_limit(512)
    assert milvus_store.candidate_types(n, 512, True, None)[0] == ["FLAT"]
    assert milvus_store.candidate_types(n + 1, 512, True, None)[0] == ["HNSW"]
    assert milvus_store.candidate_types(n + 1, 512, True, 2**20)[0] == ["IVF_SQ8"]  # HNSW over the budget
    assert milvus_store.candidate_types(n + 1, 512, False, None)[0] == ["GPU_CAGRA", "HNSW"]
    assert milvus_store.candidate_types(n + 1, 512, False, 2**20)[0] == ["DISKANN", "IVF_SQ8"]
    build, search = milvus_store.resolve_index("IVF_SQ8", 1_000_000, None, {"nprobe": 7})
    assert build == {"nlist": 4096} and search == {"nprobe": 7}
    assert list(milvus_store.query_chunks(2500, 512)) == [(0, 1000), (1000, 2000), (2000, 2500)]


@pytest.mark.skipif(not os.environ.get("CIR_DEMO_MILVUS_URI"), reason="set CIR_DEMO_MILVUS_URI to a Milvus server")
def test_against_a_server(monkeypatch):
    """CIR_DEMO_MILVUS_URI (and MILVUS_TOKEN for a server with authentication): build, search, fresh."""
    uri = os.environ["CIR_DEMO_MILVUS_URI"]
    if os.environ.get("MILVUS_TOKEN"):  # a wrong token is refused in one line that does not show it
        with monkeypatch.context() as m:
            m.setenv("MILVUS_TOKEN", "root:not-the-password")
            with pytest.raises(MilvusIndexError, match="refused the credentials") as exc:
                milvus_store.connect(milvus_store.parse_uri(uri))
            assert "not-the-password" not in str(exc.value) and "\n" not in str(exc.value)
    bench, r = tiny_benchmark(33, name=f"mv-server-{os.getpid()}"), TinyConvRetriever()
    loaded = build_milvus_index(bench, r, uri, progress=False)
    try:
        assert loaded.built and loaded.manifest.params["index_type"] == "FLAT"
        assert_brute_force(loaded, bench, r, 10)
        again = build_milvus_index(bench, r, uri, progress=False)
        assert not again.built and again.collection == loaded.collection
    finally:  # only what this test created
        loaded.client.drop_alias(loaded.alias)
        loaded.client.drop_collection(loaded.collection)


KILLED_BUILD = """
import os, signal, sys
from cir_demo.index import milvus_store
from cir_demo.index.milvus_build import build_milvus_index
from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark

r = TinyConvRetriever()
build_milvus_index(tiny_benchmark(25, name="mv-sigkill"), r, sys.argv[1], progress=False)
milvus_store.INSERT_ROWS = 10
real = milvus_store.calling

def dying(target, what, fn, *a, **kw):
    if what.startswith("inserting rows 20.."):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(target, what, fn, *a, **kw)

milvus_store.calling = dying
build_milvus_index(tiny_benchmark(47, name="mv-sigkill"), r, sys.argv[1], progress=False)
"""


@pytest.mark.slow  # a second process imports torch and pymilvus
def test_a_process_killed_mid_build_leaves_the_old_one_serving(tmp_path, capsys):
    """SIGKILL, not an exception: what Milvus Lite kept on disk is all the next build finds."""
    import signal
    import subprocess
    import sys

    uri = str(tmp_path / "killed.db")
    done = subprocess.run([sys.executable, "-c", KILLED_BUILD, uri], capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    r, bench = TinyConvRetriever(), tiny_benchmark(47, name="mv-sigkill")
    try:
        still = build_milvus_index(tiny_benchmark(25, name="mv-sigkill"), r, uri, progress=False)
        assert not still.built and len(still.ids) == 25  # the old collection, whole, still served
        resumed = build_milvus_index(bench, r, uri, progress=False)
        assert "resuming the build" in capsys.readouterr().err and resumed.built
        assert aliases(resumed.client)[resumed.alias] == resumed.collection != still.collection
        assert_brute_force(resumed, bench, r, 10)
    finally:
        from milvus_lite import server_manager_instance

        server_manager_instance.release_server(uri)


def test_the_engine_ranks_from_milvus_as_from_faiss_and_the_app_passes_the_uri(lite, tmp_path, monkeypatch):
    """The seam the app and --eval share: `RetrievalEngine(index_uri=...)` searches Milvus."""
    from cir_demo.engine import RetrievalEngine
    from cir_demo.index.milvus_build import MilvusLoadedIndex
    from cir_demo.ui.startup import build_parser

    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "indexes"))
    bench = tiny_benchmark(40, name="mv-engine")
    engines = {}
    for uri in (lite, None):
        engines[uri] = RetrievalEngine(bench, [], progress=False, index_uri=uri)
        engines[uri].add_retriever(TinyConvRetriever())
    queries = [engines[None].composed(q) for q in bench.queries]
    assert isinstance(engines[lite].index("tiny-conv"), MilvusLoadedIndex)
    assert not isinstance(engines[None].index("tiny-conv"), MilvusLoadedIndex)
    milvus, faiss = (engines[u].search("tiny-conv", queries, k=10) for u in (lite, None))
    assert [r.ids for r in milvus] == [r.ids for r in faiss] and len(milvus[0].ids) == 10
    assert build_parser().parse_args(["--index-uri", lite]).index_uri == lite  # the app's flag


def test_sharded_encoding_writes_the_same_collection(lite, tmp_path):
    """`index build --sharded --index-uri`: rank 0 writes the shards' rows into Milvus (one process here)."""
    from cir_demo.index.shard import DistContext, build_sharded_milvus

    bench, r = tiny_benchmark(21, name="mv-sharded"), TinyConvRetriever()
    loaded = build_sharded_milvus(bench, r, lite, DistContext(), shard_dir=tmp_path / "shards", progress=False)
    assert loaded.built and loaded.manifest.num_shards == 1 and not (tmp_path / "shards").exists()
    assert_brute_force(loaded, bench, r, 8)
    again = build_sharded_milvus(bench, r, lite, DistContext(), shard_dir=tmp_path / "shards", progress=False)
    assert not again.built and again.collection == loaded.collection


def test_index_params_override_the_choice_and_are_kept_in_the_manifest(lite, capsys):
    bench, r = tiny_benchmark(18, name="mv-params"), TinyConvRetriever()
    flat = build_milvus_index(bench, r, lite, progress=False)
    request = '{"index_type": "HNSW", "params": {"M": 8}, "search_params": {"ef": 40}}'
    hnsw = build_milvus_index(bench, r, lite, progress=False, index_params=request)
    assert "index type changed: collection is FLAT, requested HNSW" in capsys.readouterr().err
    p = hnsw.manifest.params
    assert (p["index_type"], p["params"], p["search_params"], hnsw.manifest.choice) == (
        "HNSW",
        {"M": 8, "efConstruction": 200},
        {"ef": 40},
        "requested",
    )
    assert hnsw.built and hnsw.collection != flat.collection
    assert client_index_type(hnsw) == "HNSW"
    again = build_milvus_index(bench, r, lite, progress=False, index_params=request)
    assert not again.built and again.collection == hnsw.collection
    assert not build_milvus_index(bench, r, lite, progress=False).built  # no request: the HNSW one serves


def client_index_type(loaded) -> str:
    return loaded.client.describe_index(loaded.collection, milvus_store.VECTOR)["index_type"]

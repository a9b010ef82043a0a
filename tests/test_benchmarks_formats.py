"""EDIR, CIRCO and JSONL adapters, FolderImageStore, the registry and `validate`.

Every fixture is built here in the official schema; nothing touches the
network except a tiny http.server on 127.0.0.1 started by the image tests.
"""

from __future__ import annotations

import http.server
import io
import json
import threading
from pathlib import Path

import pytest
from PIL import Image

from cir_demo.benchmarks.circo import load_circo
from cir_demo.benchmarks.edir import load_edir
from cir_demo.benchmarks.images import FolderImageStore, ImageUnavailableError, pinpoint_cdn_url
from cir_demo.benchmarks.jsonl import export_jsonl_benchmark, load_jsonl_benchmark
from cir_demo.benchmarks.registry import BenchmarkArgumentError, list_benchmarks, load_benchmark, resolve_loader
from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, CallableImageStore, Judgments, Query
from cir_demo.utils.names import UnknownNameError


def png(path: Path, color=(10, 20, 30), size=(6, 4)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def errors_of(exc: BenchmarkError):
    return [i for i in exc.issues if i.level == "error"]


def has_error(exc, file_end, location, field, text):
    return any(
        i.file.endswith(file_end) and location in (i.location or "") and i.field == field and text in i.message
        for i in errors_of(exc)
    )


# =========================================================================== EDIR
def edir_fixture(root: Path, queries=None, corpus=None, instances=None, images=True) -> Path:
    corpus = corpus if corpus is not None else [{"id": f"c{i}.png", "image": f"c{i}.png"} for i in range(6)]
    queries = (
        queries
        if queries is not None
        else [
            {
                "id": "q1",
                "image": "src1.png",
                "text": "make the car red",
                "metadata": {"subcategory": "color", "category": "attribute"},
            },
            {"id": "q2", "image": "src2.png", "text": "remove the hat", "metadata": {"subcategory": "remove"}},
        ]
    )
    instances = (
        instances
        if instances is not None
        else [
            {"qid": "q1", "pos": ["c0.png"], "neg": ["c1.png", "c2.png"]},
            {"qid": "q2", "pos": ["c3.png"], "neg": ["c4.png"]},
        ]
    )
    write_jsonl(root / "corpus.jsonl", corpus)
    write_jsonl(root / "queries.jsonl", queries)
    write_jsonl(root / "instances.jsonl", instances)
    if images:
        for name in [c["image"] for c in corpus if isinstance(c, dict) and "image" in c] + ["src1.png", "src2.png"]:
            png(root / "images" / name)
    return root


def test_edir_loads_queries_judgments_subcategories(tmp_path):
    b = load_edir(edir_fixture(tmp_path / "edir"))
    assert (b.name, b.metric_family) == ("edir", "edir")
    assert b.corpus_ids == [f"c{i}.png" for i in range(6)]
    q1, q2 = b.queries
    assert q1.reference_ids == ("src1.png",) and q1.instruction == "make the car red"
    assert q1.positives == ("c0.png",) and q1.negatives == ("c1.png", "c2.png") and q1.target_id == "c0.png"
    assert q1.meta["edit_subcategory"] == "color" and q1.meta["edit_category"] == "attribute"
    assert q1.group_id == "q1" and q2.group_id == "q2"  # each query its own group
    assert b.images.open("src1.png").size == (6, 4) and b.images.open("c3.png").mode == "RGB"
    assert b.warnings == []


def test_edir_errors_name_file_line_and_field(tmp_path):
    root = edir_fixture(
        tmp_path / "e",
        corpus=[{"id": "c0.png", "image": "c0.png"}, {"id": "c0.png", "image": "c0.png"}, {"id": "c1.png"}],
        queries=[
            {"id": "q1", "image": "src1.png", "text": "  ", "metadata": {"subcategory": "color"}},
            {"id": "q2", "image": "missing.png", "text": "add a dog"},
            {"id": "q3", "image": "src2.png", "text": "no judgments"},
            '{"id": "q4", "image": ',
        ],
        instances=[{"qid": "q1", "pos": ["c0.png"], "neg": []}, {"qid": "q2", "pos": ["zz.png"], "neg": ["c1.png"]}],
    )
    with pytest.raises(BenchmarkError) as ei:
        load_edir(root)
    e = ei.value
    assert has_error(e, "corpus.jsonl", "line 2", "id", "duplicate corpus id")
    assert has_error(e, "queries.jsonl", "line 1 (q1)", "text", "empty instruction")
    assert has_error(e, "queries.jsonl", "line 2 (q2)", "image", "does not exist")
    assert has_error(e, "queries.jsonl", "line 4", None, "malformed JSON")
    assert len(errors_of(e)) == 4
    assert "queries.jsonl, line 2 (q2), field 'image'" in str(e)


def test_edir_accepts_what_the_official_pytrec_eval_scoring_accepts(tmp_path):
    """No positives, no instances row, a positive outside the corpus: warnings (the official code runs on them)."""
    root = edir_fixture(
        tmp_path / "e",
        queries=[
            {"id": "q1", "image": "src1.png", "text": "make it red", "metadata": {"subcategory": "color"}},
            {"id": "q2", "image": "src2.png", "text": "add a dog"},
            {"id": "q3", "image": "src2.png", "text": "no judgments"},
        ],
        instances=[{"qid": "q1", "pos": [], "neg": []}, {"qid": "q2", "pos": ["zz.png"], "neg": ["c1.png"]}],
    )
    b = load_edir(root)
    assert [q.positives for q in b.queries] == [(), ("zz.png",), ()]
    text = "\n".join(str(w) for w in b.warnings)
    assert "instances.jsonl, line 1, field 'pos': no positives" in text
    assert "instances.jsonl, line 2, field 'pos': positive(s) not in the corpus" in text
    assert "queries.jsonl, line 3 (q3), field 'id': no judgments" in text


def test_edir_missing_files_and_group_with_differing_judgments(tmp_path):
    with pytest.raises(BenchmarkError) as ei:
        load_edir(tmp_path)
    assert {Path(i.file).name for i in errors_of(ei.value)} == {"queries.jsonl", "corpus.jsonl", "instances.jsonl"}
    root = edir_fixture(
        tmp_path / "g",
        queries=[
            {"id": "q1", "image": "src1.png", "text": "red car", "group_id": "g"},
            {"id": "q2", "image": "src2.png", "text": "a red car", "metadata": {"group_id": "g"}},
        ],
    )
    with pytest.raises(BenchmarkError) as ei:
        load_edir(root)
    assert has_error(ei.value, "queries.jsonl", "line 2 (q2)", "group_id", "different judgments")
    # no image folder: loads, with a warning; missing subcategory: warning
    root = edir_fixture(tmp_path / "noimg", images=False)
    b = load_edir(root)
    assert any("image folder" in w.message for w in b.warnings)


# =========================================================================== CIRCO
CIRCO_VAL = [
    {
        "reference_img_id": 271520,
        "target_img_id": 355099,
        "relative_caption": "shows two people",
        "shared_concept": "a girl with an umbrella",
        "gt_img_ids": [355099, 528417],
        "id": 0,
        "semantic_aspects": ["cardinality", "addition"],
    },
    {
        "reference_img_id": 2097,
        "target_img_id": 295260,
        "relative_caption": "are being used by a person",
        "shared_concept": "comb and scissors",
        "gt_img_ids": [295260],
        "id": 1,
        "semantic_aspects": ["direct_addressing"],
    },
]
CIRCO_IMAGES = [271520, 355099, 528417, 2097, 295260, 7]


def circo_fixture(root: Path, entries=CIRCO_VAL, images=CIRCO_IMAGES) -> Path:
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / "val.json").write_text(json.dumps(entries))
    for i in images:
        png(root / "COCO2017_unlabeled" / "unlabeled2017" / f"{i:012d}.jpg")
    return root / "annotations" / "val.json"


def test_circo_loads_val_split_with_folder_corpus(tmp_path):
    b = load_circo(circo_fixture(tmp_path / "CIRCO"))  # image folder found in the official layout
    assert (b.name, b.metric_family, b.results_id_format) == ("circo", "circo", "same")
    assert b.corpus_ids == [str(i) for i in sorted(CIRCO_IMAGES)]  # folder listing, file-name order
    q0, q1 = b.queries
    assert q0.query_id == "0" and q0.reference_ids == ("271520",) and q0.instruction == "shows two people"
    assert q0.positives == ("355099", "528417") and q0.negatives == () and q0.target_id == "355099"
    assert q0.meta["shared_concept"] == "a girl with an umbrella"
    assert q0.meta["semantic_aspects"] == ["cardinality", "addition"]
    assert b.results_key("1") == "1" and q1.group_id == "1"
    assert b.images.open("2097").size == (6, 4)  # 000000002097.jpg
    assert b.warnings == []


def test_circo_corpus_sources(tmp_path):
    ann = circo_fixture(tmp_path / "C", images=[])
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(str(i) for i in CIRCO_IMAGES + [99]))
    assert load_circo(ann, corpus_ids=ids).corpus_ids == [str(i) for i in CIRCO_IMAGES + [99]]
    coco = tmp_path / "image_info_unlabeled2017.json"
    coco.write_text(json.dumps({"images": [{"id": i, "file_name": f"{i:012d}.jpg"} for i in CIRCO_IMAGES]}))
    assert load_circo(ann, corpus_ids=coco).corpus_ids == [str(i) for i in CIRCO_IMAGES]
    b = load_circo(ann)  # no list, no folder: union of named ids, with a warning
    assert set(b.corpus_ids) == {"271520", "355099", "528417", "2097", "295260"}
    assert any("corpus is the" in w.message for w in b.warnings)


def test_circo_errors(tmp_path):
    entries = [
        dict(CIRCO_VAL[0]),
        dict(CIRCO_VAL[1]),
        dict(CIRCO_VAL[1]),
        {"reference_img_id": 5, "relative_caption": "x", "shared_concept": "y", "id": 3},
    ]
    entries[0]["relative_caption"] = ""
    entries[1]["reference_img_id"] = 424242  # not in the corpus
    with pytest.raises(BenchmarkError) as ei:
        load_circo(circo_fixture(tmp_path / "C", entries=entries, images=CIRCO_IMAGES + [5]))
    e = ei.value
    assert has_error(e, "val.json", "entry 0 (id 0)", "relative_caption", "empty instruction")
    assert has_error(e, "val.json", "entry 1 (id 1)", "reference_img_id", "does not exist")
    assert has_error(e, "val.json", "entry 2 (id 1)", "id", "duplicate query id")
    assert has_error(e, "val.json", "entry 3 (id 3)", "gt_img_ids", "test split")
    assert len(errors_of(e)) == 4
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(BenchmarkError, match="malformed JSON"):
        load_circo(bad)


# =========================================================================== JSONL
def toy_benchmark(images=None) -> Benchmark:
    corpus = ["a", "b", "c", "d", "e"]
    j1, j2 = Judgments(("a", "b"), ("c",)), Judgments(("d",), ())
    queries = [
        Query(
            "q1",
            ("r1",),
            "make it blue",
            "g1",
            j1,
            {"intent_category": "Swap", "skin_tone_bucket": "DARKEST", "semantic_aspects": ["color", "negation"]},
        ),
        Query("q2", ("r1",), "a blue one?", "g1", j1, {"intent_category": "Swap", "token_count": 3}),
        Query("q3", ("a", "r2"), "<img1> in the style of <img2>", "g2", j2, {}, target_id="d"),
    ]
    return Benchmark(
        "toy",
        "pinpoint",
        queries,
        corpus,
        images=images,
        info={"seed": 3, "obj": object()},
        results_id_format="pinpoint",
    )


def query_tuples(b: Benchmark):
    return [
        (q.query_id, q.reference_ids, q.instruction, q.group_id, q.judgments, dict(q.meta), q.target_id)
        for q in b.queries
    ]


def colour_of(image_id: str):
    return tuple((ord(ch) * k) % 256 for ch, k in zip(image_id[-1] * 3, (3, 5, 7)))


def test_jsonl_round_trip_without_and_with_rendered_images(tmp_path):
    src = toy_benchmark()
    root = export_jsonl_benchmark(src, tmp_path / "plain", image_mode="none")
    back = load_jsonl_benchmark(root)
    assert query_tuples(back) == query_tuples(src) and back.corpus_ids == src.corpus_ids
    assert (back.name, back.metric_family, back.results_id_format) == ("toy", "pinpoint", "pinpoint")
    assert back.info["seed"] == 3 and "obj" not in back.info
    assert (root / "extra_images.txt").read_text().split() == ["r1", "r2"]
    manifest = json.loads((root / "benchmark.json").read_text())
    assert manifest["counts"] == {"queries": 3, "groups": 2, "corpus": 5, "extra_images": 2, "images": 0}
    assert back.warnings == []

    rendered = toy_benchmark(CallableImageStore(lambda i: Image.new("RGB", (3, 3), colour_of(i)), "toy"))
    root = export_jsonl_benchmark(rendered, tmp_path / "img", image_mode="render")
    back = load_jsonl_benchmark(root)
    for image_id in ["a", "e", "r1", "r2"]:
        assert back.images.open(image_id).getpixel((1, 1)) == colour_of(image_id)
    # copy mode re-exports the loaded folder byte for byte
    again = export_jsonl_benchmark(back, tmp_path / "copy", image_mode="copy")
    assert (again / "images" / "a.png").read_bytes() == (root / "images" / "a.png").read_bytes()
    assert query_tuples(load_jsonl_benchmark(again)) == query_tuples(src)


def test_jsonl_export_refuses_groups_with_differing_judgments(tmp_path):
    b = toy_benchmark()
    b.queries[1] = Query("q2", ("r1",), "a blue one?", "g1", Judgments(("a",), ()), {})
    with pytest.raises(BenchmarkError, match="different judgments"):
        export_jsonl_benchmark(Benchmark("t", "pinpoint", b.queries, b.corpus_ids), tmp_path / "x", image_mode="none")
    with pytest.raises(ValueError, match="image_mode"):
        export_jsonl_benchmark(toy_benchmark(), tmp_path / "y", image_mode="jpeg")


def test_jsonl_validation_errors_name_file_line_and_field(tmp_path):
    root = export_jsonl_benchmark(toy_benchmark(), tmp_path / "b", image_mode="none")
    lines = (root / "queries.jsonl").read_text().splitlines()
    q3 = json.loads(lines[2])
    q3["reference_ids"] = ["a", "ghost"]  # second reference image that does not exist
    q2 = json.loads(lines[1])
    q2["group_id"] = "g9"  # no judgments
    q2["instruction"] = ""
    write_jsonl(root / "queries.jsonl", [lines[0], json.dumps(q2), json.dumps(q3), lines[0], "{oops"])
    judg = (root / "judgments.jsonl").read_text().splitlines()
    g2 = json.loads(judg[1])
    g2["positives"] = ["zz"]
    write_jsonl(root / "judgments.jsonl", [judg[0], json.dumps(g2)])
    with pytest.raises(BenchmarkError) as ei:
        load_jsonl_benchmark(root)
    e = ei.value
    assert has_error(e, "queries.jsonl", "line 2 (q2)", "group_id", "no judgments")
    assert has_error(e, "queries.jsonl", "line 2 (q2)", "instruction", "empty instruction")
    assert has_error(e, "queries.jsonl", "line 3 (q3)", "reference_ids[1]", "'ghost' does not exist")
    assert has_error(e, "queries.jsonl", "line 4 (q1)", "query_id", "duplicate query id")
    assert has_error(e, "queries.jsonl", "line 5", None, "malformed JSON")
    assert has_error(e, "judgments.jsonl", "line 2 (g2)", "positives", "not in the corpus")
    assert "queries.jsonl, line 3 (q3), field 'reference_ids[1]'" in str(e)


def test_jsonl_manifest_problems(tmp_path):
    root = export_jsonl_benchmark(toy_benchmark(), tmp_path / "m", image_mode="none")
    manifest = json.loads((root / "benchmark.json").read_text())
    (root / "benchmark.json").write_text(json.dumps(dict(manifest, format_version=99, metric_family="nope")))
    with pytest.raises(BenchmarkError) as ei:
        load_jsonl_benchmark(root)
    assert has_error(ei.value, "benchmark.json", "", "format_version", "newer")
    assert has_error(ei.value, "benchmark.json", "", "metric_family", "expected one of")
    (root / "benchmark.json").unlink()
    with pytest.raises(BenchmarkError, match="benchmark.json is missing"):
        load_jsonl_benchmark(root)


def test_jsonl_warnings_are_not_errors(tmp_path):
    root = export_jsonl_benchmark(toy_benchmark(), tmp_path / "w", image_mode="none")
    judg = [json.loads(x) for x in (root / "judgments.jsonl").read_text().splitlines()]
    judg[0]["negatives"] = ["c", "outside"]  # negative not in the corpus: warning
    judg.append({"group_id": "unused", "positives": ["e"], "negatives": []})
    write_jsonl(root / "judgments.jsonl", judg)
    b = load_jsonl_benchmark(root)
    msgs = " | ".join(w.message for w in b.warnings)
    assert "negative(s) not in the corpus" in msgs and "no query uses" in msgs and "manifest says 2" in msgs


# =========================================================================== images
class _Handler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server API
        _Handler.hits.append(self.path)
        if self.path.startswith("/img/good"):
            buf = io.BytesIO()
            Image.new("RGB", (5, 7), (200, 100, 0)).save(buf, format="JPEG")
            body, status = buf.getvalue(), 200
        elif self.path.startswith("/img/junk"):
            body, status = b"<html>not an image</html>", 200
        else:
            body, status = b"nope", 404
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Handler.hits = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_folder_store_local_files_and_suffix_fallback(tmp_path):
    png(tmp_path / "x.png", (1, 2, 3))
    png(tmp_path / "odd" / "file-for-y.png", (4, 5, 6))
    store = FolderImageStore(tmp_path, "{id}.jpg", filenames={"y": "odd/file-for-y.png"})
    assert store.open("x").getpixel((0, 0)) == (1, 2, 3)  # .jpg asked, .png found
    assert store.open("y").getpixel((0, 0)) == (4, 5, 6)
    assert store.source("x").kind == "file" and store.source("x").location.endswith("x.png")
    with pytest.raises(ImageUnavailableError, match="'missing' not found locally"):
        store.open("missing")
    with pytest.raises(ValueError, match="cannot be used as a file name"):
        store.open("../etc/passwd")
    padded = FolderImageStore(tmp_path, "{id:0>12}.jpg")
    png(tmp_path / "000000002097.jpg")
    assert padded.exists("2097")


def test_folder_store_offline_never_fetches(tmp_path, http_server):
    store = FolderImageStore(
        tmp_path / "none", url_pattern=http_server + "/img/good-{id}.jpg", cache_dir=tmp_path / "c"
    )
    with pytest.raises(ImageUnavailableError) as ei:
        store.open("abc")
    assert (
        "'abc'" in str(ei.value) and f"{http_server}/img/good-abc.jpg" in str(ei.value) and "offline" in str(ei.value)
    )
    assert _Handler.hits == [] and not (tmp_path / "c").exists()


def test_folder_store_fetches_into_cache_once(tmp_path, http_server):
    store = FolderImageStore(
        None, url_pattern=lambda i: f"{http_server}/img/{i}.jpg", cache_dir=tmp_path / "c", online=True
    )
    img = store.open("good1")
    assert img.size == (5, 7) and (tmp_path / "c" / "good1.jpg").is_file()
    assert store.open("good1").size == (5, 7) and _Handler.hits == ["/img/good1.jpg"]  # second open: cache
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["good1.jpg"]  # no temp files left
    with pytest.raises(ImageUnavailableError, match=r"'bad': HTTP 404 from http://127\.0\.0\.1"):
        store.open("bad")
    with pytest.raises(ImageUnavailableError, match="did not return a valid image"):
        store.open("junk")
    assert not (tmp_path / "c" / "junk.jpg").exists()


def test_pinpoint_cdn_url():
    s = "afd9ded10f1efd368cd8294da0bb34ce"
    assert pinpoint_cdn_url(s) == f"https://i.pinimg.com/736x/af/d9/de/{s}.jpg"
    with pytest.raises(ValueError):
        pinpoint_cdn_url("not-hex")


# =========================================================================== registry and CLI
def test_registry_declares_benchmarks_and_checks_arguments(tmp_path):
    names = [s.name for s in list_benchmarks()]
    assert names == ["world", "pinpoint", "edir", "circo", "cirr", "fashioniq", "icir", "jsonl"]
    assert next(s for s in list_benchmarks() if s.name == "world").loader == "cir_demo.world:load_world"
    for spec in list_benchmarks():
        if spec.name != "world":  # written in parallel; only referenced by name here
            assert callable(resolve_loader(spec))
    with pytest.raises(UnknownNameError, match="Did you mean 'pinpoint'"):
        load_benchmark("pinpiont")
    with pytest.raises(BenchmarkArgumentError, match=r"needs annotations \(--annotations\)"):
        load_benchmark("circo", image_dir="x")
    with pytest.raises(BenchmarkArgumentError, match="Did you mean 'corpus_ids'"):
        load_benchmark("pinpoint", annotations="a.parquet", corpus_id="x")
    root = export_jsonl_benchmark(toy_benchmark(), tmp_path / "r", image_mode="none")
    assert load_benchmark("jsonl", root=str(root), image_dir=None).name == "toy"  # None args are dropped


def test_validate_command_prints_counts_and_exit_codes(tmp_path, capsys):
    from cir_demo.cli import main

    root = export_jsonl_benchmark(toy_benchmark(), tmp_path / "v", image_mode="none")
    assert main(["validate", "--benchmark", "jsonl", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "queries: 3" in out and "paraphrase groups: 2" in out and "corpus: 5 images" in out
    assert "2 single-image queries, 1 two-image queries" in out
    assert "positives per query: min 1, median 2, mean 1.67, max 2 (total 5)" in out
    assert "meta intent_category: Swap 2, (none) 1" in out and "OK: 0 errors" in out

    write_jsonl(root / "queries.jsonl", ['{"query_id": "q1"}'])
    assert main(["validate", "--benchmark", "jsonl", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "queries.jsonl, line 1 (q1), field 'reference_ids'" in out
    assert main(["validate", "--benchmark", "nosuch"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err


def test_paraphrases_are_the_group_in_benchmark_order():
    """`Benchmark.paraphrases` (indexed once) against a scan of every query (the oracle), groups
    interleaved in file order; a list of queries replaced or grown is indexed again."""
    import random

    from cir_demo.benchmarks.schema import Benchmark, Judgments, Query

    rng = random.Random(0)
    queries = [Query(f"q{i}", ("a",), f"text {i}", f"g{rng.randrange(7)}", Judgments(("b",))) for i in range(60)]
    bench = Benchmark("b", "pinpoint", list(queries), ["a", "b"])

    def scan(qid):
        group = bench.query(qid).group_id
        return [q for q in bench.queries if q.group_id == group]

    for q in queries:
        assert bench.paraphrases(q.query_id) == scan(q.query_id)
    bench.paraphrases("q0").clear()  # a caller's copy
    assert bench.paraphrases("q0") == scan("q0") != []
    extra = Query("q60", ("a",), "text", queries[0].group_id, Judgments(("b",)))
    bench.queries.append(extra)
    bench._by_id[extra.query_id] = extra
    assert bench.paraphrases("q0") == scan("q0") and bench.paraphrases("q0")[-1] is extra
    bench.queries = queries[:10]
    assert all(bench.paraphrases(q.query_id) == scan(q.query_id) for q in queries[:10])

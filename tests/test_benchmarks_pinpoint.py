"""PinPoint adapter: loading, grouping, validation messages, official-format export.

Fixtures are written in the official schema inside tmp_path; the real files
are never read here.
"""

from __future__ import annotations

import random
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cir_demo.benchmarks.pinpoint import GROUP_COLUMN, OFFICIAL_COLUMNS, export_pinpoint, load_pinpoint
from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, Judgments, Query

from pinpoint_images import SCHEMA, sig  # noqa: E402  (the official parquet schema)


CORPUS = [sig(i) for i in range(1, 41)]


def row(qid, ref, instruction, pos, neg, ref2="None", **meta):
    r = {
        "query_id": qid,
        "query_image_signature": ref,
        "query_image_signature2": ref2,
        "instruction": instruction,
        "positive_candidates": list(pos),
        "negative_candidates": list(neg),
        "token_count": len(instruction.split()),
        "length_category": "short",
        "is_question": instruction.endswith("?"),
        "is_imperative": False,
        "is_single": ref2 == "None",
        "query_category": "Swap",
        "skin_tone_bucket": "UNKNOWN",
        "l1_interest": "Art",
    }
    r.update(meta)
    return r


def base_rows():
    p1, n1 = [sig(10), sig(11)], [sig(20), sig(21), None]  # trailing null, as in the real file
    return [
        row("query_00001", sig(1), "make it blue", p1, n1, skin_tone_bucket="DARKEST"),
        row("query_00002", sig(1), "blue version?", p1, n1, query_category="Swap"),
        row(
            "query_00003",
            sig(2),
            "<img1> in the style of <img2>",
            [sig(12)],
            [sig(22)],
            ref2=sig(3),
            query_category="Composition",
            l1_interest="Home Decor",
        ),
        row("query_00004", sig(1), "make it red", [sig(13)], [sig(20)]),  # same image, other intent
        row("query_00005", sig(1), "blue one", p1, n1),  # paraphrase, not adjacent
    ]


def write_fixture(tmp_path, rows, corpus=CORPUS, schema=SCHEMA, name="pinpoint_licensed.parquet"):
    path = tmp_path / name
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    pq.write_table(pa.table(cols, schema=schema), path)
    if corpus is not None:
        (tmp_path / "index_signatures.txt").write_text("\n".join(corpus))  # no final newline, like the real file
    return path


def identity_groups(rows):
    """Oracle: brute-force pairwise grouping on the same set of positives."""
    groups = []
    for r in rows:
        key = set(r["positive_candidates"])
        for g in groups:
            if g[0] == key:
                g[1].append(r["query_id"])
                break
        else:
            groups.append((key, [r["query_id"]]))
    return [ids for _, ids in groups]


# --------------------------------------------------------------------------- loading
def test_load_ids_groups_meta_and_second_image(tmp_path):
    rows = base_rows()
    b = load_pinpoint(write_fixture(tmp_path, rows))
    assert (b.name, b.metric_family, b.results_id_format) == ("pinpoint", "pinpoint", "pinpoint")
    assert [q.query_id for q in b.queries] == [r["query_id"] for r in rows]
    assert b.corpus_ids == CORPUS  # read from index_signatures.txt beside the parquet
    assert sorted(map(sorted, ([q.query_id for q in g] for g in b.groups().values()))) == sorted(
        map(sorted, identity_groups(rows))
    )
    q1, q2, q3, q4, q5 = b.queries
    assert q1.group_id == q2.group_id == q5.group_id == "query_00001" and q4.group_id != q1.group_id
    assert q1.judgments is q5.judgments  # one shared object per group
    assert q1.reference_ids == (sig(1),) and q1.is_single  # 'None' string -> single image
    assert q3.reference_ids == (sig(2), sig(3)) and not q3.is_single
    assert q1.positives == (sig(10), sig(11)) and q1.negatives == (sig(20), sig(21))
    assert q1.judgments.n_null_negatives == 1 and q3.judgments.n_null_negatives == 0
    assert q1.judgments.negative_list_length == 3
    assert q1.meta["skin_tone_bucket"] == "DARKEST" and q2.meta["skin_tone_bucket"] is None  # UNKNOWN -> None
    assert q3.meta["intent_category"] == "Composition" and q3.meta["domain"] == "Home Decor"
    assert q2.meta["is_question"] is True and q3.meta["is_single"] is False and q1.meta["token_count"] == 3
    assert b.results_key("query_00003") == "00003"
    assert b.info["n_groups"] == 3 and b.info["n_reference_sets"] == 2
    assert any("null entry" in w.message for w in b.warnings)


def test_annotations_folder_and_explicit_corpus_list(tmp_path):
    path = write_fixture(tmp_path, base_rows(), corpus=None)
    other = tmp_path / "ids.txt"
    other.write_text("\n".join(CORPUS + [sig(99)]) + "\n\n")
    b = load_pinpoint(tmp_path, corpus_ids=other)  # a folder holding the parquet
    assert b.corpus_ids == CORPUS + [sig(99)]
    b2 = load_pinpoint(path, corpus_ids=CORPUS)
    assert b2.corpus_ids == CORPUS


def test_without_corpus_list_the_corpus_is_the_named_images_with_a_warning(tmp_path):
    rows = base_rows()
    b = load_pinpoint(write_fixture(tmp_path, rows, corpus=None))
    named = {
        x
        for r in rows
        for x in [
            r["query_image_signature"],
            r["query_image_signature2"],
            *r["positive_candidates"],
            *r["negative_candidates"],
        ]
        if x not in (None, "None")
    }
    assert set(b.corpus_ids) == named and len(b.corpus_ids) == len(named)
    assert any("corpus is the" in w.message for w in b.warnings)


def test_image_store_uses_folder_then_cdn(tmp_path):
    from PIL import Image

    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (4, 4), (255, 0, 0)).save(tmp_path / "imgs" / f"{sig(1)}.jpg")
    b = load_pinpoint(write_fixture(tmp_path, base_rows()), image_dir=tmp_path / "imgs", cache_dir=tmp_path / "c")
    assert b.images.source(sig(1)).kind == "file"
    assert b.images.open(sig(1)).size == (4, 4)
    src = b.images.source(sig(10))
    assert src.kind == "url" and src.location == f"https://i.pinimg.com/736x/00/00/00/{sig(10)}.jpg"
    with pytest.raises(FileNotFoundError, match="python -m cir_demo images fetch"):
        b.images.open(sig(10))


# --------------------------------------------------------------------------- errors and warnings
def assert_issue(exc: BenchmarkError, file_end: str, location: str, field: str, text: str):
    hits = [
        i
        for i in exc.issues
        if i.level == "error"
        and i.file.endswith(file_end)
        and location in (i.location or "")
        and i.field == field
        and text in i.message
    ]
    assert hits, f"no error {file_end} / {location} / {field} / {text!r} in:\n{exc}"
    assert file_end in str(hits[0]) and location in str(hits[0]) and field in str(hits[0])


def test_every_error_is_collected_with_file_row_and_field(tmp_path):
    rows = base_rows()
    rows[1]["instruction"] = "   "
    rows[2]["query_image_signature2"] = sig(77)  # second reference image that does not exist
    rows[3]["positive_candidates"] = []
    rows[4]["positive_candidates"] = [sig(10), sig(88)]  # positive absent from the corpus
    rows.append(row("query_00001", sig(1), "dup", [sig(10)], []))
    with pytest.raises(BenchmarkError) as ei:
        load_pinpoint(write_fixture(tmp_path, rows))
    exc = ei.value
    assert_issue(exc, "pinpoint_licensed.parquet", "row 1 (query_00002)", "instruction", "empty instruction")
    assert_issue(exc, "pinpoint_licensed.parquet", "row 2 (query_00003)", "query_image_signature2", "does not exist")
    assert_issue(exc, "pinpoint_licensed.parquet", "row 3 (query_00004)", "positive_candidates", "no positives")
    assert_issue(exc, "pinpoint_licensed.parquet", "row 4 (query_00005)", "positive_candidates", "not in the corpus")
    assert_issue(exc, "pinpoint_licensed.parquet", "row 5 (query_00001)", "query_id", "duplicate query id")
    assert len([i for i in exc.issues if i.level == "error"]) == 5


def test_missing_columns_wrong_types_and_missing_files(tmp_path):
    schema = pa.schema([f for f in SCHEMA if f.name not in ("positive_candidates", "l1_interest")])
    with pytest.raises(BenchmarkError) as ei:
        load_pinpoint(write_fixture(tmp_path, base_rows(), schema=schema))
    assert_issue(ei.value, ".parquet", "", "positive_candidates", "required column is missing")
    assert any(i.level == "warning" and i.field == "l1_interest" for i in ei.value.issues)

    bad = pa.schema([pa.field("token_count", pa.string()) if f.name == "token_count" else f for f in SCHEMA])
    rows = [dict(r, token_count="3") for r in base_rows()]
    with pytest.raises(BenchmarkError, match="expected an integer column"):
        load_pinpoint(write_fixture(tmp_path, rows, schema=bad, name="b.parquet"))

    with pytest.raises(BenchmarkError, match="annotations file is missing"):
        load_pinpoint(tmp_path / "nope.parquet")
    path = write_fixture(tmp_path, base_rows(), name="c.parquet")
    with pytest.raises(BenchmarkError, match="corpus id list is missing"):
        load_pinpoint(path, corpus_ids=tmp_path / "no_ids.txt")


def test_truncated_parquet_names_the_file(tmp_path):
    path = write_fixture(tmp_path, base_rows())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BenchmarkError) as ei:
        load_pinpoint(path)
    assert str(path) in str(ei.value) and "truncated or corrupt" in str(ei.value)


def test_corpus_list_duplicates_are_errors_with_line_numbers(tmp_path):
    path = write_fixture(tmp_path, base_rows(), corpus=CORPUS + [CORPUS[3], "", "a b"])
    with pytest.raises(BenchmarkError) as ei:
        load_pinpoint(path)
    hits = [i for i in ei.value.issues if i.file.endswith("index_signatures.txt")]
    assert [(i.location, i.message.split(";")[0]) for i in hits] == [
        (f"line {len(CORPUS) + 1}", f"duplicate id {CORPUS[3]!r} (first on line 4)"),
        (f"line {len(CORPUS) + 3}", "'a b' contains whitespace"),
    ]


def test_warnings_do_not_stop_loading(tmp_path):
    rows = base_rows()
    rows[0]["negative_candidates"] = [sig(20), sig(95)]  # negative outside the corpus: warning
    rows[2]["instruction"] = "combine these"  # two images, no markers: warning
    rows[3]["is_single"] = False  # label disagrees with one reference image: warning
    rows[3]["positive_candidates"] = [sig(1), sig(13)]  # reference is a positive: warning
    b = load_pinpoint(write_fixture(tmp_path, rows))
    fields = {(w.field, w.message.split(" (")[0]) for w in b.warnings}
    assert ("negative_candidates", "negative(s) not in the corpus") in fields
    assert any(f == "instruction" and "markers" in m for f, m in fields)
    assert any(f == "is_single" for f, _ in fields)
    assert any("reference image is also a positive" in m for _, m in fields)
    assert all(w.level == "warning" for w in b.warnings)
    assert b.queries[3].meta["is_single"] is False and b.queries[3].is_single  # file label kept, refs decide


# --------------------------------------------------------------------------- export
def test_export_then_load_round_trips_the_official_table(tmp_path):
    src = write_fixture(tmp_path, base_rows())
    b = load_pinpoint(src)
    paths = export_pinpoint(b, tmp_path / "out")
    assert set(paths) == {"annotations", "corpus_ids"}
    original = pq.read_table(src).replace_schema_metadata(None)
    exported = pq.read_table(paths["annotations"])
    assert exported.column_names == list(OFFICIAL_COLUMNS) + [GROUP_COLUMN]
    official = exported.select(list(OFFICIAL_COLUMNS))
    assert official.schema.equals(original.schema) and official.equals(original)
    assert paths["corpus_ids"].read_text().split() == CORPUS
    again = load_pinpoint(paths["annotations"])
    key = lambda bb: [
        (q.query_id, q.reference_ids, q.instruction, q.group_id, q.judgments, dict(q.meta)) for q in bb.queries
    ]
    assert key(again) == key(b) and again.corpus_ids == b.corpus_ids


def test_export_of_a_non_pinpoint_benchmark_renumbers_ids_and_fills_metadata(tmp_path):
    corpus = ["w_a", "w_b", "w_c", "w_d"]
    j1, j2 = Judgments(("w_a",), ("w_b",)), Judgments(("w_c", "w_d"), ())
    queries = [
        Query("intent3/p0", ("w_ref",), "turn it green", "intent3", j1, {"intent_category": "Swap"}),
        Query("intent3/p1", ("w_ref",), "could it be green?", "intent3", j1, {"intent_category": "Swap"}),
        Query(
            "intent7/p0",
            ("w_r1", "w_r2"),
            "<img1> with the colour of <img2>",
            "intent7",
            j2,
            {"skin_tone_bucket": "LIGHTEST", "token_count": 30},
        ),
    ]
    bench = Benchmark("world", "pinpoint", queries, corpus)
    paths = export_pinpoint(bench, tmp_path / "off")
    import json

    id_map = json.loads(paths["query_id_map"].read_text())
    assert id_map == {"query_00001": "intent3/p0", "query_00002": "intent3/p1", "query_00003": "intent7/p0"}
    df = pq.read_table(paths["annotations"]).to_pandas()
    assert list(df["query_image_signature2"]) == ["None", "None", "w_r2"]
    assert list(df["is_question"]) == [False, True, False]
    assert list(df["token_count"]) == [3, 4, 30] and list(df["length_category"]) == ["short", "short", "long"]
    assert list(df["skin_tone_bucket"]) == ["UNKNOWN", "UNKNOWN", "LIGHTEST"]
    assert list(df["is_single"]) == [True, True, False]
    back = load_pinpoint(paths["annotations"], corpus_ids=paths["corpus_ids"])
    assert [q.query_id for q in back.queries] == list(id_map)
    assert [(q.reference_ids, q.instruction, q.judgments) for q in back.queries] == [
        (q.reference_ids, q.instruction, q.judgments) for q in queries
    ]
    assert [q.group_id for q in back.queries] == [q.group_id for q in bench.queries]  # exported group ids survive


def test_official_evaluator_reads_the_export_like_the_real_file(tmp_path):
    """pandas sees the same dtypes and 'None' marker the official evaluate.py relies on."""
    b = load_pinpoint(write_fixture(tmp_path, base_rows()))
    df = pq.read_table(export_pinpoint(b, tmp_path / "o")["annotations"]).to_pandas()
    assert df["query_id"].str.replace("query_", "").str.zfill(5).tolist()[:2] == ["00001", "00002"]
    assert df["positive_candidates"].iloc[0].tolist() == [sig(10), sig(11)]
    assert df["negative_candidates"].iloc[0].tolist() == [sig(20), sig(21), None]
    assert str(df["is_single"].dtype) == "bool" and str(df["token_count"].dtype) == "int64"


def test_full_size_file_loads_quickly(tmp_path):
    """7,635 queries, 109,600 corpus ids, ~330K judgments: the real file's size."""
    rng = random.Random(0)
    corpus = [f"{rng.getrandbits(128):032x}" for _ in range(109_600)]
    rows = []
    for g in range(1_283):
        refs = rng.sample(corpus, 2)
        pos, neg = rng.sample(corpus, 9), rng.sample(corpus, 34) + [None]
        for p in range(6 if g < 1_262 else 3):
            two = g % 8 == 0
            rows.append(
                row(
                    f"query_{len(rows) + 1:05d}",
                    refs[0],
                    "<img1> and <img2>" if two else f"make it {p}",
                    pos,
                    neg,
                    ref2=refs[1] if two else "None",
                )
            )
    path = write_fixture(tmp_path, rows, corpus=corpus)
    t = time.process_time()  # CPU seconds: wall time measures the machine's load (CI shares its cores)
    b = load_pinpoint(path)
    elapsed = time.process_time() - t
    assert len(b.queries) == 7_635 and len(b.corpus_ids) == 109_600 and len(b.groups()) == 1_283
    assert elapsed < 4.0, f"load took {elapsed:.2f} CPU s"


def test_paraphrases_with_differing_negatives_form_one_group_and_keep_their_lists(tmp_path):
    rows = base_rows()
    rows[4]["negative_candidates"] = [sig(20)]  # same positives as query 1, one negative fewer
    b = load_pinpoint(write_fixture(tmp_path, rows))
    q1, q5 = b.query("query_00001"), b.query("query_00005")
    assert q1.group_id == q5.group_id == "query_00001"
    assert q5.negatives == (sig(20),) and q1.negatives == (sig(20), sig(21))  # per-query lists, as in the file
    assert any("differ in their reference images or negatives" in w.message for w in b.warnings)


def test_exported_group_column_wins_over_the_positive_set_rule(tmp_path):
    j = Judgments(("w_a",), ())
    queries = [Query("query_00001", ("w_r",), "x", "intent-A", j), Query("query_00002", ("w_r",), "y", "intent-B", j)]
    bench = Benchmark("w", "pinpoint", queries, ["w_a", "w_b"])
    paths = export_pinpoint(bench, tmp_path)
    again = load_pinpoint(paths["annotations"])
    assert [q.group_id for q in again.queries] == ["intent-A", "intent-B"]


# --------------------------------------------------------------------------- stored validation
def _same_load(a: Benchmark, b: Benchmark):
    assert a.queries == b.queries
    assert [dict(q.meta) for q in a.queries] == [dict(q.meta) for q in b.queries]
    assert a.corpus_ids == b.corpus_ids and a.info == b.info and a.warnings == b.warnings
    assert a.results_id_format == b.results_id_format and a.images.cache_dir == b.images.cache_dir


def test_a_repeated_load_replays_the_stored_validation(tmp_path, monkeypatch):
    import cir_demo.benchmarks.pinpoint as pinpoint_module

    store = tmp_path / "stored"
    monkeypatch.setenv("CIR_DEMO_BENCHMARK_CACHE", str(store))
    path = write_fixture(tmp_path, base_rows())
    oracle = load_pinpoint(path, tmp_path / "index_signatures.txt", reuse_validation=False)
    assert not store.exists()
    assert oracle.warnings  # the trailing null negatives: replayed warnings must be the same ones
    first = load_pinpoint(path, tmp_path / "index_signatures.txt")
    assert len(list(store.iterdir())) == 1
    # the replay must not validate again: make validation impossible and load once more
    monkeypatch.setattr(pinpoint_module, "_build_queries", lambda *a, **k: pytest.fail("validated again"))
    again = load_pinpoint(path, tmp_path / "index_signatures.txt")
    _same_load(oracle, first)
    _same_load(oracle, again)
    # paraphrases share one Judgments object, as in a fresh load
    by_id = {q.query_id: q for q in again.queries}
    assert by_id["query_00001"].judgments is by_id["query_00002"].judgments is by_id["query_00005"].judgments
    # the folder holding the parquet names the same file: the same stored load
    _same_load(oracle, load_pinpoint(tmp_path, tmp_path / "index_signatures.txt"))
    assert len(list(store.iterdir())) == 1


def test_changed_files_are_validated_again_and_failures_are_never_stored(tmp_path, monkeypatch):
    from cir_demo.benchmarks.load_cache import BenchmarkCacheWarning

    store = tmp_path / "stored"
    monkeypatch.setenv("CIR_DEMO_BENCHMARK_CACHE", str(store))
    rows = base_rows()
    path = write_fixture(tmp_path, rows)
    corpus = tmp_path / "index_signatures.txt"
    assert len(load_pinpoint(path, corpus).queries) == 5
    write_fixture(tmp_path, rows[:3])  # same path, other bytes
    assert [q.query_id for q in load_pinpoint(path, corpus).queries] == ["query_00001", "query_00002", "query_00003"]
    corpus.write_text("\n".join(CORPUS[:9]))  # the corpus file is part of the key too: the positives are gone
    with pytest.raises(BenchmarkError):
        load_pinpoint(path, corpus)
    assert len(list(store.iterdir())) == 2  # the two good loads only
    corpus.write_text("\n".join(CORPUS))
    # a damaged stored load: validated again (same result as a fresh load), one warning, rewritten
    stored = max(store.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stored.write_bytes(bytes(data))
    with pytest.warns(BenchmarkCacheWarning, match="damaged"):
        reloaded = load_pinpoint(path, corpus)
    _same_load(load_pinpoint(path, corpus, reuse_validation=False), reloaded)
    import warnings as warnings_module

    with warnings_module.catch_warnings():
        warnings_module.simplefilter("error", BenchmarkCacheWarning)
        _same_load(reloaded, load_pinpoint(path, corpus))  # the rewritten file replays cleanly


def test_loads_that_depend_on_more_than_the_files_are_not_stored(tmp_path, monkeypatch):
    store = tmp_path / "stored"
    monkeypatch.setenv("CIR_DEMO_BENCHMARK_CACHE", str(store))
    path = write_fixture(tmp_path, base_rows())
    (tmp_path / "images").mkdir()
    load_pinpoint(path, tmp_path / "index_signatures.txt", image_dir=tmp_path / "images")  # folder contents count
    load_pinpoint(path, CORPUS)  # a corpus given as a list
    assert not store.exists()

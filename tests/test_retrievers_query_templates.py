"""Query templates as data: rendering, the per-family defaults, a config's own template, `retrievers show`,
and the text the engine hands a retriever."""

from __future__ import annotations

import json

import pytest

from cir_demo.benchmarks.fashioniq import join_captions
from cir_demo.benchmarks.schema import Benchmark, Judgments, Query
from cir_demo.cli import main
from cir_demo.retrievers import registry
from cir_demo.retrievers.query_templates import TemplateError, family_defaults, render, resolve

FIQ = Query(
    "dress-0",
    ("r",),
    join_captions(" Is Longer.", "has a belt?"),
    "dress-0",
    Judgments(("t",)),
    {"category": "dress", "captions": (" Is Longer.", "has a belt?")},
    target_id="t",
)
CIRCO = Query(
    "0",
    ("r",),
    "has a higher quality",
    "0",
    Judgments(("t",)),
    {"shared_concept": "a man sitting on a bench"},
    target_id="t",
)


def test_default_fashioniq_template_is_clip4cir_join_and_bge_vl_has_its_own():
    default = resolve({"name": "x", "family": "open_clip"}, "fashioniq")
    assert render(default["template"], FIQ) == FIQ.instruction == "Is longer and has a belt"
    bge = resolve({"name": "x", "family": "bge_vl"}, "fashioniq")
    assert render(bge["template"], FIQ) == " Is Longer., and has a belt?"  # MegaPairs' files join as written
    circo = resolve({"name": "x", "family": "bge_vl"}, "circo")
    assert (
        render(circo["template"], CIRCO)
        == "Find a picture that also a man sitting on a bench, but has a higher quality."
    )
    assert "MegaPairs" in circo["source"]
    # benchmarks without an entry keep their instruction byte for byte (the world's --eval is unchanged)
    assert resolve({"name": "x", "family": "open_clip"}, "world") is None
    assert resolve({"name": "x", "family": "bge_vl"}, "pinpoint") is None
    assert set(family_defaults()["*"]) == {"cirr", "circo", "fashioniq"}


def test_a_config_s_own_template_wins_and_bad_ones_are_refused():
    cfg = {"name": "own", "family": "bge_vl", "query_templates": {"circo": "{shared_concept|lower}: {instruction}"}}
    t = resolve(cfg, "circo")
    assert render(t["template"], CIRCO) == "a man sitting on a bench: has a higher quality" and "'own'" in t["source"]
    with pytest.raises(TemplateError, match="query 0: the template needs {captions.1}"):
        render("{captions.1}", CIRCO)
    base = {"name": "tmpl-test", "family": "precomputed", "params": {"path": "x.json"}}
    with pytest.raises(registry.ConfigError, match=r"query_templates.circo'.*unknown filter \|upper"):
        registry.validate_config({**base, "query_templates": {"circo": "{instruction|upper}"}})
    with pytest.raises(registry.ConfigError, match=r"unknown field \{caption\}"):
        registry.validate_config({**base, "query_templates": {"fashioniq": "{caption}"}})


def test_retrievers_show_prints_the_templates(capsys):
    assert main(["retrievers", "show", "bge-vl-base"]) == 0
    shown = json.loads(capsys.readouterr().out)["query_templates"]
    assert shown["circo"]["template"] == "Find a picture that also {shared_concept}, but {instruction}."
    assert shown["fashioniq"]["template"] == "{captions.0}, and {captions.1}"


def test_engine_encodes_the_templated_text(monkeypatch):
    from cir_demo.engine import RetrievalEngine, Ranking

    bench = Benchmark("fashioniq", "fashioniq", [FIQ], ["t", "r"])
    engine = RetrievalEngine(bench, ["bge-vl-base"], progress=False)
    seen = []
    monkeypatch.setattr(engine, "open_image", lambda image_id: image_id)
    # an encoder stands in for the model (its weights and remote code are not here); search is recorded
    monkeypatch.setattr(engine, "retriever", lambda name: object())
    monkeypatch.setattr(
        engine, "search", lambda name, cqs, k, batch_size: seen.extend(cqs) or [Ranking(["t"], [1.0]) for _ in cqs]
    )
    engine.run_benchmark("bge-vl-base")
    assert [cq.text for cq in seen] == [" Is Longer., and has a belt?"]
    assert engine.query_template("bge-vl-base")["template"] == "{captions.0}, and {captions.1}"


def test_report_section_states_each_template():
    from cir_demo.harness.pipeline import query_text_section

    assert query_text_section({"a": {}}) == []
    [section] = query_text_section({"a": {"query_template": {"template": "{instruction}", "source": "s"}}, "b": {}})
    assert "| a | `{instruction}` | s |" in section and "| b |" not in section

"""Registry: configs as data, strict schema, did-you-mean, install hints, remote-code opt-in, CLI."""

import argparse
import inspect
import json
import subprocess
import sys

import pytest

from cir_demo.retrievers import registry
from cir_demo.retrievers.registry import ConfigError
from cir_demo.utils.names import UnknownNameError

BRIEF_NAMES = {
    "metaclip2-h14-fusion",
    "metaclip2-h14-slerp",
    "metaclip2-h14-image",
    "metaclip2-h14-text",
    "dfn-h14-fusion",
    "hf-clip-l14-fusion",
    "hf-siglip-so400m-fusion",
    "bge-vl-base",
    "bge-vl-large",
    "bge-vl-mllm-s1",
    "bge-vl-mllm-s2",
    "gme-qwen2-vl-2b",
    "text-proxy-premerge",
    "text-proxy-postmerge",
}
REMOTE = ["bge-vl-base", "bge-vl-large", "bge-vl-mllm-s1", "bge-vl-mllm-s2", "gme-qwen2-vl-2b"]


def _cfg(**kw):
    base = {
        "name": "t-open-clip",
        "family": "open_clip",
        "model": "ViT-B-32",
        "pretrained": "openai",
        "recipe": "early_fusion",
        "params": {"text_weight": 0.8},
    }
    base.update(kw)
    return base


def test_builtin_configs_valid_and_listed():
    rows = {r["name"]: r for r in registry.list_retrievers()}
    assert BRIEF_NAMES <= set(rows)
    assert rows["metaclip2-h14-fusion"]["model"] == "ViT-H-14-worldwide-quickgelu"
    assert rows["metaclip2-h14-fusion"]["pretrained"] == "metaclip2_worldwide"
    assert rows["metaclip2-h14-fusion"]["params"] == {"text_weight": 0.8}
    assert rows["dfn-h14-fusion"]["pretrained"] == "dfn5b"
    assert all(rows[n]["needs_remote_code"] for n in REMOTE)
    assert not rows["metaclip2-h14-slerp"]["needs_remote_code"]
    for name in BRIEF_NAMES:
        assert registry.config_source(name).endswith((f"configs/{name}.json", f"configs/recipes.json ({name})"))


def test_recipe_configs_take_their_encoder_from_the_encoder_table(tmp_path):
    import json

    encoders = json.loads((registry.CONFIG_DIR / "encoders.json").read_text())
    for cfg, _ in registry.encoder_recipe_configs(
        registry.CONFIG_DIR / "encoders.json", registry.CONFIG_DIR / "recipes.json"
    ):
        enc = encoders[cfg["encoder"]]
        assert {k: cfg[k] for k in enc if k != "description"} == {k: v for k, v in enc.items() if k != "description"}
        assert registry.get_config(cfg["name"])["model"] == enc["model"]
    (tmp_path / "encoders.json").write_text(
        json.dumps({"enc-a": {"family": "open_clip", "model": "M", "pretrained": "p"}})
    )
    (tmp_path / "recipes.json").write_text(
        json.dumps([{"name": "a-image", "encoder": "enc-b", "recipe": "image_only"}])
    )
    with pytest.raises(registry.ConfigError, match="recipes.json entry 0.*enc-a"):
        registry.encoder_recipe_configs(tmp_path / "encoders.json", tmp_path / "recipes.json")


def test_unknown_name_did_you_mean():
    with pytest.raises(UnknownNameError) as info:
        registry.get_config("metaclip2-h14-fusoin")
    assert "Did you mean 'metaclip2-h14-fusion'" in str(info.value)
    with pytest.raises(UnknownNameError, match="Did you mean"):
        registry.load_retriever("bge-vl-bsae")


@pytest.mark.parametrize(
    "change,match",
    [
        ({"colour": "red"}, "unknown key 'colour'"),
        ({"params": {"text_weight": 0.8, "alpha": 1}}, "unknown key 'params.alpha'"),
        ({"recipe": "slerp", "params": {"text_weight": 0.8}}, "unknown key 'params.text_weight'"),
        ({"recipe": "late_fusion"}, "key 'recipe' must be one of"),
        ({"recipe": None}, "key 'recipe' is required"),
        ({"params": {"text_weight": "high"}}, "must be a number"),
        ({"params": {"batch_size": 0}}, "params.batch_size"),
        ({"params": {"marker_style": "emoji"}}, "params.marker_style"),
        ({"precision": "int8"}, "key 'precision'"),
        ({"requires": ["open_clip_torch", 3]}, "'requires' item 1"),
        ({"requires": ["numpy >>= 3"]}, "'requires' item 0 must be a pip requirement string, got 'numpy >>= 3': "),
        ({"needs_remote_code": "yes"}, "key 'needs_remote_code' must be bool"),
        ({"name": "has space"}, "key 'name'"),
        ({"pretrained": None}, "key 'pretrained'"),
        ({"transformers_pin": {"spec": "<5", "strict": True}}, "transformers_pin.strict"),
    ],
)
def test_strict_schema_names_source_and_key(change, match):
    with pytest.raises(ConfigError, match=match) as info:
        registry.validate_config(_cfg(**change), "my/config.json")
    assert "my/config.json" in str(info.value)


def test_missing_required_and_unknown_family():
    cfg = _cfg()
    del cfg["family"]
    with pytest.raises(ConfigError, match="missing required key 'family'"):
        registry.validate_config(cfg, "x.json")
    with pytest.raises(UnknownNameError, match="Did you mean 'open_clip'"):
        registry.validate_config(_cfg(family="openclip"), "x.json")
    with pytest.raises(ConfigError, match="'recipe' must be null"):
        registry.validate_config(
            {"name": "g", "family": "gme", "model": "m", "needs_remote_code": True, "recipe": "early_fusion"}, "x.json"
        )


def test_config_files_loaded_strictly(tmp_path, monkeypatch):
    (tmp_path / "good-one.json").write_text(json.dumps(_cfg(name="good-one")))
    monkeypatch.setattr(registry, "CONFIG_DIR", tmp_path)
    monkeypatch.setattr(registry, "_CONFIGS", None)
    assert [r["name"] for r in registry.list_retrievers()] == ["good-one"]
    (tmp_path / "bad.json").write_text(json.dumps({**_cfg(name="bad"), "weights": "x"}))
    monkeypatch.setattr(registry, "_CONFIGS", None)
    with pytest.raises(ConfigError, match=r"bad\.json.*unknown key 'weights'"):
        registry.list_retrievers()
    (tmp_path / "bad.json").write_text(json.dumps(_cfg(name="other-name")))
    monkeypatch.setattr(registry, "_CONFIGS", None)
    with pytest.raises(ConfigError, match="file name must match"):
        registry.list_retrievers()
    (tmp_path / "bad.json").write_text("{oops")
    monkeypatch.setattr(registry, "_CONFIGS", None)
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON: line 1"):
        registry.list_retrievers()


def test_register_config_conflicts():
    registry.register_config(_cfg(name="t-reg"))
    registry.register_config(_cfg(name="t-reg"))  # identical: no-op
    with pytest.raises(ConfigError, match="already registered"):
        registry.register_config(_cfg(name="t-reg", recipe="image_only", params={}))
    registry.register_config(_cfg(name="t-reg", recipe="image_only", params={}), replace=True)
    assert registry.get_config("t-reg")["recipe"] == "image_only"
    registry.unregister("t-reg")
    with pytest.raises(UnknownNameError):
        registry.get_config("t-reg")


def test_missing_package_gives_pip_hint(monkeypatch):
    real = registry._module_available
    monkeypatch.setattr(registry, "_module_available", lambda m: False if m == "open_clip" else real(m))
    with pytest.raises(ImportError, match=r"pip install 'open_clip_torch>=3\.3'"):
        registry.load_retriever("metaclip2-h14-fusion", device="cpu")
    row = next(r for r in registry.list_retrievers() if r["name"] == "metaclip2-h14-fusion")
    assert row["missing"] == ["open_clip_torch>=3.3"]


def test_installed_version_outside_requirement_is_missing():
    registry.register_config(_cfg(name="t-old-numpy", requires=["numpy<1.0"]), replace=True)
    row = next(r for r in registry.list_retrievers() if r["name"] == "t-old-numpy")
    assert row["missing"] and row["missing"][0].startswith("numpy<1.0 (installed: ")
    with pytest.raises(ImportError, match=r"pip install 'numpy<1\.0'"):
        registry.load_retriever("t-old-numpy", device="cpu")
    registry.unregister("t-old-numpy")


@pytest.mark.parametrize(
    "req,missing",
    [
        ("numpy[extra]>=99", True),  # extras do not hide the version test
        ('numpy>=99; python_version > "3"', True),  # nor does a marker that holds here
        ('numpy >= 99 ; sys_platform != "no-such-os"', True),
        ('numpy>=99; python_version < "3"', False),  # a requirement for another Python does not apply
        ("numpy[extra]>=1", False),
        ('numpy>=1; python_version > "3"', False),
        ("no_such_package_xyz[extra]; python_version > '3'", True),
    ],
)
def test_extras_and_markers_keep_the_version_test(req, missing):
    registry.register_config(_cfg(name="t-req", requires=[req]), replace=True)
    try:
        row = next(r for r in registry.list_retrievers() if r["name"] == "t-req")
        assert bool(row["missing"]) is missing, row["missing"]
        if missing and "numpy" in req:
            assert row["missing"][0].startswith(f"{req} (installed: ")
    finally:
        registry.unregister("t-req")


def test_trust_remote_code_defaults_false_and_is_required():
    assert inspect.signature(registry.load_retriever).parameters["trust_remote_code"].default is False
    for name in REMOTE:
        with pytest.raises(PermissionError, match="trust_remote_code=True"):
            registry.load_retriever(name, device="cpu")


@pytest.mark.parametrize("module_name", ["bgevl", "gme"])
def test_adapters_refuse_without_flag_even_when_called_directly(module_name):
    import importlib

    module = importlib.import_module(f"cir_demo.retrievers.{module_name}")
    cfg = registry.get_config("bge-vl-base" if module_name == "bgevl" else "gme-qwen2-vl-2b")
    with pytest.raises(PermissionError, match="trust_remote_code"):
        module.load(cfg, device="cpu")


def test_gme_hard_transformers_pin_stops_before_download():
    with pytest.raises(RuntimeError, match=r"transformers<4\.52\.0.*4\.51\.3.*precomputed"):
        registry.load_retriever("gme-qwen2-vl-2b", device="cpu", trust_remote_code=True)


def test_bge_vl_soft_pin_warns_and_failure_names_transformers():
    with pytest.warns(RuntimeWarning, match="4.45.2"):
        with pytest.raises(RuntimeError, match=r"(?s)could not fetch BAAI/BGE-VL-base.*transformers 4\.45\.2"):
            registry.load_retriever("bge-vl-base", device="cpu", trust_remote_code=True)  # offline in tests


def test_remote_code_failure_message_names_pin_and_versions():
    import transformers

    from cir_demo.retrievers.remote_code import remote_code_failure

    err = remote_code_failure(registry.get_config("bge-vl-mllm-s1"), "encoding queries", AttributeError("no x"))
    msg = str(err)
    assert "failed while encoding queries (AttributeError: no x)" in msg
    assert (
        "transformers 4.45.2" in msg and transformers.__version__ in msg and "pip install 'transformers==4.45.2'" in msg
    )


def test_overrides_are_validated():
    registry.register_config(_cfg(name="t-over"), replace=True)
    with pytest.raises(ConfigError, match="params.bogus"):
        registry.load_retriever("t-over", device="cpu", bogus=1)
    with pytest.raises(ConfigError, match="override of 'family'"):
        registry.load_retriever("t-over", device="cpu", family="gme")
    registry.unregister("t-over")


def test_cli_list_json_and_show(capsys):
    from cir_demo.retrievers import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.run(parser.parse_args(["list", "--json"])) == 0
    rows = json.loads(capsys.readouterr().out)
    assert BRIEF_NAMES <= {r["name"] for r in rows}
    assert cli.run(parser.parse_args(["list", "--family", "gme"])) == 0
    out = capsys.readouterr().out
    assert "gme-qwen2-vl-2b" in out and "metaclip2" not in out and "--trust-remote-code" in out
    assert cli.run(parser.parse_args(["show", "dfn-h14-fusoin"])) == 2
    assert "Did you mean 'dfn-h14-fusion'" in capsys.readouterr().err
    assert cli.run(parser.parse_args(["show", "dfn-h14-fusion"])) == 0
    assert json.loads(capsys.readouterr().out)["config"]["pretrained"] == "dfn5b"


def test_listing_imports_no_heavy_library():
    code = (
        "import sys, cir_demo.retrievers.registry as r, cir_demo.retrievers.cli; r.list_retrievers(); "
        "heavy = [m for m in ('torch', 'transformers', 'open_clip', 'faiss') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_expand_recipes_makes_one_valid_config_per_recipe():
    base = {k: v for k, v in _cfg(name="world-clip").items() if k != "recipe"}
    base["params"] = {"batch_size": 8, "text_weight": 0.3}
    made = registry.expand_recipes(base)
    assert [c["name"] for c in made] == ["world-clip-image", "world-clip-text", "world-clip-fusion", "world-clip-slerp"]
    assert [c["recipe"] for c in made] == ["image_only", "text_only", "early_fusion", "slerp"]
    assert made[2]["params"] == {"batch_size": 8, "text_weight": 0.8} and made[3]["params"] == {
        "batch_size": 8,
        "t": 0.8,
    }
    for cfg in made:
        registry.validate_config(cfg, "expand")
    with pytest.raises(UnknownNameError, match="Did you mean 'slerp'"):
        registry.expand_recipes(base, ("slurp",))


def test_shared_retriever_arguments_default_to_no_remote_code():
    from cir_demo.retrievers import cli

    parser = argparse.ArgumentParser()
    cli.add_retriever_arguments(parser)
    args = parser.parse_args(["--retriever", "gme-qwen2-vl-2b"])
    assert args.trust_remote_code is False and args.device is None
    with pytest.raises(PermissionError, match="trust_remote_code"):
        cli.retriever_from_args(args)
    assert parser.parse_args(["--retriever", "x", "--trust-remote-code"]).trust_remote_code is True

"""Retrievers declared as data: one JSON config per named retriever.

Built-in configs live in `cir_demo/retrievers/configs/`: one `<name>.json` per retriever,
except dual encoders used under several recipes (as open_clip's pretrained table): their
encoders (model, pretrained tag, precision, requirements) are declared once in `encoders.json`
and `recipes.json` lists the recipe configs that name one. The world retrievers are there
too (they point at the committed weights under assets/); tests add more at run time
with `register_config`, and `expand_recipes` makes the four recipe configs of a dual
encoder. Every config is validated by a strict schema: an unknown key,
a wrong type or a parameter the family does not take is an error naming the
file (or source) and the key.

`load_retriever(name)` checks the optional packages a config `requires`
(ImportError with a `pip install` hint), the transformers version a
remote-code model was written for, and the explicit `trust_remote_code`
opt-in, then imports the family adapter, which imports the heavy libraries.

A family is one module and one row of `FAMILIES`. Everything else asks the module:

    PARAMS: dict                 the `params` it takes, with their defaults (required)
    load(config, device, progress=False, trust_remote_code=False, **_) -> Retriever (required)
    weights(config) -> list      what must be on this machine: `cir_demo.utils.needs` items;
                                 the doctor, `--dry-run` and the app's load errors read it (required)
    validate(config, where)      family rules beyond the schema; raise ValueError naming the key
    USES_RECIPE = False          True: queries composed by a recipe (recipes.py) over a dual
                                 encoder, so a config needs `model` and `recipe`
    CONFIG_KEYS = ()             top-level config keys only this family takes (open_clip: model_config)
    REMOTE_CODE = False          True: it runs its model repository's code, so a config must say
                                 "needs_remote_code": true (and loading needs --trust-remote-code)
    RUNS_MODEL = True            False: no model (rankings read from a file): no device, and the
                                 doctor leaves it out of "every retriever"
    recipe_label(config) -> str  how `retrievers list` names its query composition (default: the
                                 config's recipe, else "native")
    api_key_env(config)          the environment variable holding its API key, for `retrievers list`
    problems(config) -> list     one line per problem `retrievers list` can see without loading
                                 (precomputed: the results file is missing or does not read)
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from cir_demo.retrievers import recipes
from cir_demo.retrievers.base import MARKER_STYLES
from cir_demo.utils.names import UnknownNameError, lookup

CONFIG_DIR = Path(__file__).resolve().parent / "configs"

# family -> adapter module (imported lazily; adapters import heavy libraries only inside functions)
FAMILIES = {
    "open_clip": "cir_demo.retrievers.openclip",
    "hf_clip": "cir_demo.retrievers.hf_clip",
    "bge_vl": "cir_demo.retrievers.bgevl",
    "gme": "cir_demo.retrievers.gme",
    "text_proxy": "cir_demo.retrievers.text_proxy",
    "precomputed": "cir_demo.retrievers.precomputed",
    "world_cir": "cir_demo.retrievers.world_cir",
}
REQUIRED_IN_FAMILY = ("PARAMS", "load", "weights")  # what every family module defines (see above)

# key -> (allowed types, required)
SCHEMA: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True),
    "family": ((str,), True),
    "description": ((str,), False),
    "model": ((str, type(None)), False),
    "pretrained": ((str, type(None)), False),
    "model_config": ((dict, str, type(None)), False),
    "recipe": ((str, type(None)), False),
    "params": ((dict,), False),
    "precision": ((str,), False),
    "requires": ((list,), False),
    "needs_remote_code": ((bool,), False),
    "transformers_pin": ((dict, type(None)), False),
    "encoder": ((str,), False),  # the encoders.json entry a recipe config was made from
    "query_templates": ((dict,), False),  # benchmark -> template (retrievers/query_templates.py)
}
PIN_KEYS = {"spec": str, "hard": bool, "tested": str}
FAMILY_ONLY_KEYS = ("model_config",)  # schema keys a family must list in its CONFIG_KEYS to take
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

# pip distribution -> import name, where they differ
PIP_TO_MODULE = {
    "open_clip_torch": "open_clip",
    "open-clip-torch": "open_clip",
    "pillow": "PIL",
    "faiss-cpu": "faiss",
    "faiss-gpu": "faiss",
    "protobuf": "google.protobuf",
    "qwen-vl-utils": "qwen_vl_utils",
    "flash-attn": "flash_attn",
}


class ConfigError(ValueError):
    """A retriever config that does not match the schema (names the file and key)."""


# --------------------------------------------------------------------------- validation
def validate_config(config: Any, source: str = "<dict>") -> dict:
    """Check a config against the schema; returns a normalised deep copy."""
    _check_schema(config, source)
    cfg = copy.deepcopy(config)
    name = cfg["name"]
    where = f"{source} (retriever {name!r})"
    if not NAME_RE.match(name):
        raise ConfigError(f"{where}: key 'name' must be letters, digits, '.', '_' or '-', got {name!r}")
    family = cfg["family"]
    if family not in FAMILIES:
        raise UnknownNameError("retriever family", family, FAMILIES)
    _fill_common_keys(cfg, where)
    module = family_module(family)
    _check_family_keys(cfg, module, where)
    _check_params(cfg, module, where)
    if hasattr(module, "validate"):
        try:
            module.validate(cfg, where)
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return cfg


def _check_schema(config: Any, source: str) -> None:
    """Keys and their types, before anything reads them."""
    where = f"{source}"
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: a retriever config must be a JSON object, got {type(config).__name__}")
    unknown = sorted(set(config) - set(SCHEMA))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r}"
            + (f" (and {unknown[1:]})" if unknown[1:] else "")
            + f"; allowed keys: {sorted(SCHEMA)}"
        )
    for key, (types, required) in SCHEMA.items():
        if key not in config:
            if required:
                raise ConfigError(f"{where}: missing required key {key!r}")
            continue
        if not isinstance(config[key], types) or (bool not in types and isinstance(config[key], bool)):
            names = "/".join("null" if t is type(None) else t.__name__ for t in types)
            raise ConfigError(f"{where}: key {key!r} must be {names}, got {type(config[key]).__name__}")


def _fill_common_keys(cfg: dict, where: str) -> None:
    """Defaults and checks of the keys every family takes."""
    cfg.setdefault("description", "")
    cfg.setdefault("params", {})
    cfg.setdefault("requires", [])
    cfg.setdefault("precision", "fp32")
    cfg.setdefault("needs_remote_code", False)
    cfg.setdefault("recipe", None)
    if cfg["precision"] not in ("fp32", "fp16"):
        raise ConfigError(f"{where}: key 'precision' must be 'fp32' or 'fp16', got {cfg['precision']!r}")
    for i, req in enumerate(cfg["requires"]):
        problem = _requirement_problem(req)
        if problem is not None:
            raise ConfigError(
                f"{where}: key 'requires' item {i} must be a pip requirement string, got {req!r}{problem}"
            )
    pin = cfg.get("transformers_pin")
    if pin is not None:
        for k, v in pin.items():
            if k not in PIN_KEYS:
                raise ConfigError(f"{where}: unknown key 'transformers_pin.{k}'; allowed: {sorted(PIN_KEYS)}")
            if not isinstance(v, PIN_KEYS[k]):
                raise ConfigError(f"{where}: key 'transformers_pin.{k}' must be {PIN_KEYS[k].__name__}")
        if "spec" not in pin:
            raise ConfigError(f"{where}: key 'transformers_pin' needs a 'spec' (e.g. '<4.52.0')")


def _check_family_keys(cfg: dict, module, where: str) -> None:
    """The family-specific parts, as the family module declares them."""
    family = cfg["family"]
    module = family_module(family)
    if getattr(module, "USES_RECIPE", False):
        if not cfg.get("model"):
            raise ConfigError(f"{where}: key 'model' is required for family {family!r}")
        if cfg["recipe"] is None:
            raise ConfigError(
                f"{where}: key 'recipe' is required for family {family!r}; one of {sorted(recipes.RECIPES)}"
            )
        if cfg["recipe"] not in recipes.RECIPES:
            raise ConfigError(f"{where}: key 'recipe' must be one of {sorted(recipes.RECIPES)}, got {cfg['recipe']!r}")
    elif cfg["recipe"] is not None:
        raise ConfigError(f"{where}: key 'recipe' must be null for family {family!r} (it composes queries itself)")
    for key in FAMILY_ONLY_KEYS:
        if cfg.get(key) is not None and key not in getattr(module, "CONFIG_KEYS", ()):
            takers = [f for f in FAMILIES if key in getattr(family_module(f), "CONFIG_KEYS", ())]
            raise ConfigError(f"{where}: key {key!r} is only for family " + ", ".join(map(repr, takers)))
    if getattr(module, "REMOTE_CODE", False) and not cfg["needs_remote_code"]:
        raise ConfigError(f'{where}: family {family!r} runs repository code: set "needs_remote_code": true')


def _check_params(cfg: dict, module, where: str) -> None:
    """`params`: those the family (and its recipe) takes, with their values checked."""
    family = cfg["family"]
    allowed = dict(module.PARAMS)
    if cfg["recipe"] is not None:
        allowed.update(recipes.RECIPES[cfg["recipe"]][2])
    bad = sorted(set(cfg["params"]) - set(allowed))
    if bad:
        raise ConfigError(
            f"{where}: unknown key 'params.{bad[0]}' for family {family!r}"
            + (f" and recipe {cfg['recipe']!r}" if cfg["recipe"] else "")
            + f"; allowed params: {sorted(allowed)}"
        )
    if "marker_style" in cfg["params"] and cfg["params"]["marker_style"] not in MARKER_STYLES:
        raise ConfigError(f"{where}: key 'params.marker_style' must be one of {MARKER_STYLES}")
    for bench, template in (cfg.get("query_templates") or {}).items():
        from cir_demo.retrievers.query_templates import TemplateError, check_template

        try:
            check_template(template, f"{where}: key 'query_templates.{bench}'")
        except TemplateError as exc:
            raise ConfigError(str(exc)) from None
    if "batch_size" in cfg["params"]:
        bs = cfg["params"]["batch_size"]
        if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
            raise ConfigError(f"{where}: key 'params.batch_size' must be a positive integer, got {bs!r}")
    if cfg["recipe"] is not None:
        try:
            recipes.recipe_params(
                cfg["recipe"], {k: v for k, v in cfg["params"].items() if k in recipes.RECIPES[cfg["recipe"]][2]}, where
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def family_module(family: str):
    """The adapter module of a registered family, checked to define what every family must."""
    module = importlib.import_module(lookup("retriever family", family, FAMILIES))
    missing = [a for a in REQUIRED_IN_FAMILY if not hasattr(module, a)]
    if missing:
        raise ConfigError(
            f"retriever family {family!r}: its module {module.__name__} does not define "
            f"{', '.join(missing)} (see the family protocol in cir_demo/retrievers/registry.py)"
        )
    return module


def _requirement_problem(req: Any) -> str | None:
    """None for a requirement pip would take; else why not ('' where the type says it all)."""
    from packaging.requirements import InvalidRequirement, Requirement

    if not isinstance(req, str):
        return ""
    try:
        Requirement(req)
    except InvalidRequirement as exc:
        return f": {str(exc).splitlines()[0]}"
    return None


# --------------------------------------------------------------------------- the table
_CONFIGS: dict[str, dict] | None = None
_SOURCES: dict[str, str] = {}


ENCODERS_FILE, RECIPES_FILE = "encoders.json", "recipes.json"
QUERY_TEMPLATES_FILE = "query_templates.json"  # per-family query templates (retrievers/query_templates.py)
OPEN_CLIP_TAGS_FILE = "open_clip_tags.json"  # open_clip tag table entries of encoders.json (openclip.tag_source)
# what an encoder entry of encoders.json declares (a recipe entry adds name, recipe, params, description)
ENCODER_KEYS = (
    "family",
    "model",
    "pretrained",
    "model_config",
    "precision",
    "requires",
    "needs_remote_code",
    "transformers_pin",
)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: line {exc.lineno}: {exc.msg}") from None


def encoder_recipe_configs(encoders_path: Path, recipes_path: Path) -> list[tuple[dict, str]]:
    """(config, source) for every entry of recipes.json: the encoder it names (model, pretrained tag,
    precision, requirements, from encoders.json) plus its recipe and parameters."""
    encoders = _read_json(encoders_path) if encoders_path.is_file() else {}
    entries = _read_json(recipes_path) if recipes_path.is_file() else []
    if not isinstance(encoders, dict):
        raise ConfigError(f"{encoders_path}: must be a JSON object of encoder name -> encoder")
    if not isinstance(entries, list):
        raise ConfigError(f"{recipes_path}: must be a JSON list of recipe configs")
    for enc_name, enc in encoders.items():
        unknown = (
            sorted(set(enc) - set(ENCODER_KEYS) - {"description"}) if isinstance(enc, dict) else ["(not an object)"]
        )
        if unknown:
            raise ConfigError(
                f"{encoders_path}: encoder {enc_name!r}: unknown key {unknown[0]!r}; "
                f"allowed keys: {sorted((*ENCODER_KEYS, 'description'))}"
            )
    out = []
    for i, entry in enumerate(entries):
        where = f"{recipes_path} entry {i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("encoder"), str):
            raise ConfigError(f"{where}: needs key 'encoder' naming an entry of {encoders_path.name}")
        if entry["encoder"] not in encoders:
            raise ConfigError(f"{where}: {UnknownNameError('encoder', entry['encoder'], encoders)}")
        enc = encoders[entry["encoder"]]
        cfg = {
            "name": entry.get("name"),
            "encoder": entry["encoder"],
            **{k: copy.deepcopy(enc[k]) for k in ENCODER_KEYS if k in enc},
            **{k: v for k, v in entry.items() if k not in ("name", "encoder", "description")},
        }
        cfg["description"] = "; ".join(d for d in (enc.get("description"), entry.get("description")) if d)
        out.append((cfg, f"{recipes_path} ({entry.get('name')})"))
    return out


def _table() -> dict[str, dict]:
    global _CONFIGS
    if _CONFIGS is None:
        table: dict[str, dict] = {}

        def add(cfg: dict, source: str) -> None:
            if cfg["name"] in table:
                raise ConfigError(
                    f"{source}: retriever name {cfg['name']!r} already defined in {_SOURCES[cfg['name']]}"
                )
            table[cfg["name"]] = cfg
            _SOURCES[cfg["name"]] = source

        for path in sorted(CONFIG_DIR.glob("*.json")):
            if path.name in (ENCODERS_FILE, RECIPES_FILE, QUERY_TEMPLATES_FILE, OPEN_CLIP_TAGS_FILE):
                continue
            cfg = validate_config(_read_json(path), str(path))
            if path.stem != cfg["name"]:
                raise ConfigError(f"{path}: file name must match key 'name' ({cfg['name']!r}.json)")
            add(cfg, str(path))
        for raw, source in encoder_recipe_configs(CONFIG_DIR / ENCODERS_FILE, CONFIG_DIR / RECIPES_FILE):
            add(validate_config(raw, source), source)
        _CONFIGS = dict(sorted(table.items()))
    return _CONFIGS


def register_config(config: dict, source: str = "<register_config>", replace: bool = False) -> dict:
    """Add a retriever config (validated). Re-registering an identical config is a no-op;
    a different config under a taken name needs `replace=True`."""
    cfg = validate_config(config, source)
    table = _table()
    name = cfg["name"]
    if name in table and table[name] != cfg and not replace:
        raise ConfigError(
            f"{source}: retriever {name!r} is already registered from {_SOURCES[name]}; pass replace=True"
        )
    table[name] = cfg
    _SOURCES[name] = source
    return copy.deepcopy(cfg)


RECIPE_SUFFIXES = {"image_only": "image", "text_only": "text", "early_fusion": "fusion", "slerp": "slerp"}


def expand_recipes(base: dict, recipes_to_make: tuple[str, ...] = tuple(RECIPE_SUFFIXES)) -> list[dict]:
    """One config per recipe from a dual-encoder config without one: `<name>-image`,
    `<name>-text`, `<name>-fusion`, `<name>-slerp`, each with its recipe's default params
    (the world retrievers register these for their world-CLIP weights)."""
    out = []
    for recipe in recipes_to_make:
        if recipe not in RECIPE_SUFFIXES:
            raise UnknownNameError("recipe", recipe, RECIPE_SUFFIXES)
        cfg = copy.deepcopy(base)
        cfg["name"] = f"{base['name']}-{RECIPE_SUFFIXES[recipe]}"
        cfg["recipe"] = recipe
        params = {k: v for k, v in cfg.get("params", {}).items() if k not in ("text_weight", "t")}
        cfg["params"] = {**params, **recipes.RECIPES[recipe][2]}
        out.append(cfg)
    return out


def unregister(name: str) -> None:
    """Remove a registered retriever (tests, or a world asset that went away)."""
    table = _table()
    if name not in table:
        raise UnknownNameError("retriever", name, table.keys())
    del table[name]
    _SOURCES.pop(name, None)


def get_config(name: str) -> dict:
    table = _table()
    if name not in table:
        raise UnknownNameError("retriever", name, table.keys())
    return copy.deepcopy(table[name])


def config_source(name: str) -> str:
    get_config(name)
    return _SOURCES[name]


def missing_requirements(config: dict) -> list[str]:
    """Requirements in `requires` that apply here (their environment marker holds) and are not
    importable, or installed at a version outside the requirement's specifier. Extras do not
    change which version is needed: `numpy[extra]>=2` needs numpy>=2."""
    from packaging.requirements import Requirement

    missing = []
    for req in config.get("requires", []):
        parsed = Requirement(req)
        if parsed.marker is not None and not parsed.marker.evaluate():
            continue  # for another Python or platform
        module = PIP_TO_MODULE.get(parsed.name.lower(), parsed.name.replace("-", "_"))
        if not _module_available(module):
            missing.append(req)
            continue
        version = _dist_version(parsed.name) if parsed.specifier else None
        if version is not None and not _version_ok(version, parsed.specifier):
            missing.append(f"{req} (installed: {version})")
    return missing


def _module_available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _dist_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _version_ok(installed: str, specifier) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return specifier.contains(Version(installed), prereleases=True)
    except InvalidVersion:
        return True  # cannot judge; let the import decide


def list_retrievers() -> list[dict]:
    """One row per retriever: name, family, model, pretrained, recipe, description, requires,
    missing (requirements not installed), needs_remote_code, source."""
    rows = []
    for name, cfg in sorted(_table().items()):
        rows.append(
            {
                "name": name,
                "family": cfg["family"],
                "model": cfg.get("model"),
                "pretrained": cfg.get("pretrained"),
                "recipe": cfg.get("recipe"),
                "params": copy.deepcopy(cfg.get("params", {})),
                "description": cfg.get("description", ""),
                "requires": list(cfg.get("requires", [])),
                "missing": missing_requirements(cfg),
                "needs_remote_code": cfg.get("needs_remote_code", False),
                "transformers_pin": copy.deepcopy(cfg.get("transformers_pin")),
                "source": _SOURCES.get(name, ""),
            }
        )
    return rows


# --------------------------------------------------------------------------- loading
def check_requirements(config: dict) -> None:
    """ImportError with a pip install hint for the first missing optional package."""
    missing = missing_requirements(config)
    if missing:
        reqs = " ".join(f"'{r.split(' (installed')[0]}'" for r in missing)
        raise ImportError(
            f"retriever {config['name']!r} needs the optional package(s) {', '.join(missing)}, "
            f"which are not installed. Install with: pip install {reqs}"
        )


def check_remote_code(config: dict, trust_remote_code: bool) -> None:
    if config.get("needs_remote_code") and not trust_remote_code:
        raise PermissionError(
            f"retriever {config['name']!r} runs code downloaded from the model repository ({config.get('model')}). "
            f"Opt in explicitly with trust_remote_code=True (CLI: --trust-remote-code) after reviewing that code."
        )


def check_transformers_pin(config: dict) -> None:
    """Refuse (hard pin) or warn (soft pin) when the installed transformers is outside the
    range the model's remote code was written for."""
    pin = config.get("transformers_pin")
    if not pin:
        return
    import warnings

    import transformers
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    installed = Version(transformers.__version__)
    if installed in SpecifierSet(pin["spec"]):
        return
    tested = pin.get("tested")
    message = (
        f"retriever {config['name']!r}: the remote code of {config.get('model')} is documented to work with "
        f"transformers{pin['spec']}"
        + (f" (tested: {tested})" if tested else "")
        + f", but this project pins transformers {installed}. Run this retriever in a separate environment "
        f"(pip install 'transformers=={tested or pin['spec']}') and load its rankings here with a 'precomputed' "
        f"retriever, or see docs/retrievers.md."
    )
    if pin.get("hard", False):
        raise RuntimeError(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def load_retriever(
    name: str, device: str | None = None, trust_remote_code: bool = False, progress: bool = False, **overrides: Any
):
    """Load a named retriever.

    `overrides` replace top-level config keys (e.g. `pretrained=...`,
    `precision="fp16"`) or, for keys the config does not have at top level,
    entries of `params` (e.g. `text_weight=0.5`, `batch_size=8`); the result is
    validated again. `device` defaults to CUDA when available.
    """
    cfg = get_config(name)
    if overrides:
        for key, value in overrides.items():
            if key in SCHEMA:
                if key in ("name", "family"):
                    raise ConfigError(f"retriever {name!r}: override of {key!r} is not allowed")
                cfg[key] = value
            else:
                cfg.setdefault("params", {})[key] = value
        cfg = validate_config(cfg, f"{_SOURCES.get(name, '<config>')} + overrides")
    check_requirements(cfg)
    from cir_demo.integrity import require_assets_of

    require_assets_of(cfg)  # committed weights checksummed: a damaged file names how to restore it
    check_remote_code(cfg, trust_remote_code)
    check_transformers_pin(cfg)
    module = family_module(cfg["family"])
    if device is None and getattr(module, "RUNS_MODEL", True):
        from cir_demo.retrievers.base import default_device

        device = default_device()
    return module.load(cfg, device=device or "cpu", progress=progress, trust_remote_code=trust_remote_code)

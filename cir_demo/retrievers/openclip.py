"""CLIP-family retrievers through open_clip (MetaCLIP 2, DFN, any model + tag, our world-CLIP).

Weights come from either
- an open_clip pretrained tag (`"pretrained": "metaclip2_worldwide"`): open_clip's
  own tag table pairs the weights with their preprocessing; or
- a local file (`"pretrained": "assets/world_clip/world_clip_s.safetensors"`, or
  .pt/.pth/.bin) with a *preprocessing sidecar* beside it
  (`world_clip_s.preprocess.json`, written by `save_weights_with_preprocess`). The
  sidecar names the architecture and the weights' sha256, so a file can never be
  paired with the wrong transform or architecture: a mismatch is an error.

A custom architecture (`"model_config"`: an inline JSON dict or a path to an
open_clip model-config JSON) is registered with open_clip under `"model"` before
the model is created.

open_clip and torch are imported only inside functions.
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cir_demo.models import world_clip
from cir_demo.retrievers.base import resolve_path
from cir_demo.retrievers.dual_encoder import DualEncoder, DualEncoderRetriever, retriever_from_config, torch_precision
from cir_demo.utils import versions

FAMILY = "open_clip"
# Family options in a config's "params" (recipe parameters are added per recipe).
PARAMS = {"marker_style": "words", "batch_size": 64}
SIDECAR_FORMAT = "cir_demo.open_clip_weights/1"
PREPROCESS_KEYS = ("size", "mode", "mean", "std", "interpolation", "resize_mode", "fill_color")
WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin")
HUB_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")  # what open_clip reads from a hub repo
TAG_SOURCE_KEYS = ("hf_hub", "url")  # the fields of a tag-table entry that say where its weights come from
USES_RECIPE = True  # queries are composed by a recipe (recipes.py) over this dual encoder
CONFIG_KEYS = ("model_config",)  # top-level config keys only this family takes


# --------------------------------------------------------------------------- weights + preprocessing pairing
def is_local_weights(pretrained: str) -> bool:
    """A path (has a weights suffix or a path separator), not an open_clip tag."""
    return pretrained.endswith(WEIGHT_SUFFIXES) or "/" in pretrained or "\\" in pretrained


def weights(config: dict) -> list:
    """Its local weights file, or the hub files (or URL) open_clip's tag table names for the tag."""
    from cir_demo.utils.needs import DownloadedFile, HubFiles, LocalFile, Unavailable

    model, pretrained = config["model"], config["pretrained"]
    if is_local_weights(pretrained):
        return [LocalFile(pretrained, f"open_clip {model} weights file")]
    label = f"open_clip {model} / {pretrained}"
    cfg = tag_source(model, pretrained)
    hub = cfg.get("hf_hub") or ""
    create = f"python -c \"import open_clip; open_clip.create_model('{model}', pretrained='{pretrained}')\""
    if hub:
        parts = hub.strip("/").split("/")
        repo = "/".join(parts[:2])
        files = (parts[2],) if len(parts) > 2 and parts[2] else HUB_FILES
        return [HubFiles(repo, files, label, include="open_clip_*", alternative=f"`{create}`")]
    url = cfg.get("url") or ""
    if url:
        cache = Path("~/.cache/clip").expanduser() / Path(url).name
        return [DownloadedFile(str(cache), label, f"`{create}`")]
    return [Unavailable(label, f"open_clip has no tag {pretrained!r} for {model!r}; see `open_clip.list_pretrained()`")]


def tag_source(model: str, pretrained: str) -> dict:
    """Where open_clip's tag table has `model` / `pretrained` fetched from: {"hf_hub": ...} or {"url": ...},
    {} for no such tag. The tags encoders.json names are read from configs/open_clip_tags.json, their
    entries of that table in the open_clip version it names (tests hold the copy to open_clip's own table),
    so that a preflight naming missing weights imports neither open_clip nor torchvision, most of its CPU;
    any other tag, or any tag under another installed open_clip, is looked up in open_clip."""
    recorded = _recorded_tags().get(f"{model}/{pretrained}")
    if recorded is not None:
        return dict(recorded)
    import open_clip

    cfg = open_clip.get_pretrained_cfg(model, pretrained) or {}
    return {k: cfg[k] for k in TAG_SOURCE_KEYS if cfg.get(k)}


@functools.lru_cache(maxsize=1)
def _recorded_tags() -> dict[str, dict]:
    """The recorded tag-table entries, or {} where the installed open_clip is not the version they copy."""
    from cir_demo.retrievers.registry import CONFIG_DIR, OPEN_CLIP_TAGS_FILE

    table = json.loads((CONFIG_DIR / OPEN_CLIP_TAGS_FILE).read_text(encoding="utf-8"))
    installed = versions.library_versions("open_clip")["open_clip"]
    return table["tags"] if installed == table["open_clip"] else {}


def validate(config: dict, where: str) -> None:
    """Family check (called by the registry): weights are an open_clip tag or a file."""
    if not config.get("pretrained"):
        raise ValueError(
            f"{where}: key 'pretrained' (an open_clip tag or a weights file) is required for family 'open_clip'"
        )


def preprocess_sidecar_path(weights_path: str | Path) -> Path:
    """`x.safetensors` -> `x.preprocess.json` (same folder)."""
    p = Path(weights_path)
    return p.with_name(p.stem + ".preprocess.json")


def validate_preprocess(pp: Any, where: str) -> dict:
    """A preprocessing spec: `size`, `mean`, `std` required; other open_clip keys optional."""
    if not isinstance(pp, dict):
        raise ValueError(f"{where}: 'preprocess' must be an object, got {type(pp).__name__}")
    unknown = sorted(set(pp) - set(PREPROCESS_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown preprocess keys {unknown}; allowed: {list(PREPROCESS_KEYS)}")
    missing = [k for k in ("size", "mean", "std") if k not in pp]
    if missing:
        raise ValueError(f"{where}: preprocess is missing {missing}")
    for key in ("mean", "std"):
        v = pp[key]
        if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, (int, float)) for x in v)):
            raise ValueError(f"{where}: preprocess {key!r} must be a list of 3 numbers, got {v!r}")
    size = pp["size"]
    if not (
        isinstance(size, int) or (isinstance(size, list) and len(size) == 2 and all(isinstance(s, int) for s in size))
    ):
        raise ValueError(f"{where}: preprocess 'size' must be an int or [h, w], got {size!r}")
    return dict(pp)


def save_weights_with_preprocess(
    state_dict_or_model: Any, weights_path: str | Path, model_name: str, preprocess: dict
) -> Path:
    """Write weights (safetensors when the suffix says so, else torch.save) and their sidecar, atomically.

    Returns the sidecar path. The world-CLIP trainer uses this so its weights
    always travel with their preprocessing.
    """
    import torch

    from cir_demo.utils.io import atomic_path, sha256_file, write_json_atomic

    weights_path = Path(weights_path)
    pp = validate_preprocess(dict(preprocess), f"preprocess for {weights_path}")
    state = state_dict_or_model.state_dict() if hasattr(state_dict_or_model, "state_dict") else state_dict_or_model
    state = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    with atomic_path(weights_path) as tmp:
        if weights_path.suffix == ".safetensors":
            from safetensors.torch import save_file

            save_file(state, str(tmp))
        else:
            torch.save(state, tmp)
    sidecar = preprocess_sidecar_path(weights_path)
    write_json_atomic(
        sidecar,
        {
            "format": SIDECAR_FORMAT,
            "model": model_name,
            "weights": weights_path.name,
            "weights_sha256": sha256_file(weights_path),
            "preprocess": pp,
        },
    )
    return sidecar


def read_preprocess_sidecar(weights_path: str | Path, model_name: str, weights_sha256: str) -> dict:
    """The preprocessing paired with `weights_path`; errors if missing or paired with other weights/arch."""
    sidecar = preprocess_sidecar_path(weights_path)
    if not sidecar.is_file():
        raise FileNotFoundError(
            f"{weights_path}: local open_clip weights need a preprocessing sidecar at {sidecar} "
            f"(write it with cir_demo.retrievers.openclip.save_weights_with_preprocess)"
        )
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{sidecar}: not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != SIDECAR_FORMAT:
        raise ValueError(f"{sidecar}: field 'format' must be {SIDECAR_FORMAT!r}")
    if meta.get("model") != model_name:
        raise ValueError(
            f"{sidecar}: field 'model' says these weights are for {meta.get('model')!r}, "
            f"but the retriever config asks for model {model_name!r}"
        )
    if meta.get("weights_sha256") != weights_sha256:
        raise ValueError(
            f"{sidecar}: field 'weights_sha256' does not match {weights_path} "
            f"(sidecar {str(meta.get('weights_sha256'))[:12]}..., file {weights_sha256[:12]}...): "
            f"the weights changed without their preprocessing"
        )
    return validate_preprocess(meta.get("preprocess"), f"{sidecar}")


# --------------------------------------------------------------------------- custom architectures
def load_model_config(model_config: dict | str | Path, where: str) -> dict:
    """An open_clip architecture config from an inline dict or a JSON file."""
    if isinstance(model_config, dict):
        cfg = model_config
    else:
        path = resolve_path(model_config)
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"{where}: model_config file not found: {path}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: model_config {path} is not valid JSON: {exc}") from None
    missing = [k for k in ("embed_dim", "vision_cfg", "text_cfg") if k not in cfg]
    if missing:
        raise ValueError(f"{where}: model_config is missing open_clip keys {missing}")
    return cfg


def register_model_config(name: str, model_config: dict) -> None:
    """Make `name` a known open_clip architecture. Re-registering the same config is a no-op;
    a different config under a taken name (ours or open_clip's built-in) is an error."""
    import open_clip

    existing = open_clip.get_model_config(name)
    if existing is not None:
        if _canonical(existing) != _canonical(model_config):
            raise ValueError(
                f"open_clip model {name!r} is already registered with a different config; "
                f"give the custom architecture its own name"
            )
        return
    # open_clip registers configs from files, and parses them when added: the file is gone again before
    # this returns (a folder kept until exit stayed in /tmp whenever a process was killed)
    with tempfile.TemporaryDirectory(prefix="cir_demo_open_clip_cfg_") as folder:
        path = Path(folder) / f"{name}.json"
        path.write_text(json.dumps(model_config), encoding="utf-8")
        open_clip.add_model_config(path)
    if open_clip.get_model_config(name) is None:
        raise RuntimeError(f"open_clip did not register the config of {name!r}")


def local_tokenizer_dir(model_config: dict | None) -> Path | None:
    """The folder a custom config's `text_cfg.hf_tokenizer_name` names, when it is a local path
    (relative paths are relative to the repository root, like every config path); else None."""
    name = ((model_config or {}).get("text_cfg") or {}).get("hf_tokenizer_name")
    if not name or not isinstance(name, str):
        return None
    path = resolve_path(name)
    return path if path.is_dir() else None


def make_tokenizer(model_name: str, model_config: dict | None = None):
    """open_clip's tokenizer for `model_name`; a local `hf_tokenizer_name` folder (the world-CLIP
    word-level tokenizer) is loaded from disk, resolved against the repo root rather than the CWD."""
    import open_clip

    local = local_tokenizer_dir(model_config)
    if local is None:
        return open_clip.get_tokenizer(model_name)
    from open_clip.tokenizer import HFTokenizer

    text_cfg = model_config["text_cfg"]
    return HFTokenizer(
        str(local),
        context_length=text_cfg.get("context_length", 77),
        tokenizer_mode=text_cfg.get("tokenizer_mode"),
        **(text_cfg.get("tokenizer_kwargs") or {}),
    )


def _canonical(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


# --------------------------------------------------------------------------- encoder
class OpenClipEncoder(DualEncoder):
    def __init__(self, model, preprocess, tokenizer, device: str, precision: str, input_dtype=None):
        self.model = model.eval()
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.device = device
        self.precision = precision
        self._input_dtype = input_dtype  # open_clip.get_input_dtype(precision): None for fp32
        self.dim = int(self.encode_text_batch(["a photo"]).shape[1])

    def encode_image_batch(self, images: Sequence[Any]) -> np.ndarray:
        import torch

        pixels = torch.stack([self.preprocess(_rgb(img)) for img in images])
        pixels = pixels.to(device=self.device, dtype=self._input_dtype)
        with torch.inference_mode():
            emb = self.model.encode_image(pixels)
            emb = torch.nn.functional.normalize(emb.float(), dim=-1)  # in fp32, also under fp16 weights
        return emb.cpu().numpy()

    def encode_text_batch(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        tokens = self.tokenizer(list(texts)).to(self.device)
        with torch.inference_mode():
            emb = self.model.encode_text(tokens)
            emb = torch.nn.functional.normalize(emb.float(), dim=-1)
        return emb.cpu().numpy()


def _rgb(img):
    return img if getattr(img, "mode", "RGB") == "RGB" else img.convert("RGB")


def library_versions() -> dict[str, str | None]:
    """torch's version as imported; open_clip's as imported where it ran, else (world-CLIP built without it,
    cir_demo/models/world_clip.py) its package's, which is the same string."""
    import sys

    out = versions.library_versions("open_clip", imported="open_clip" in sys.modules)
    return {**out, **versions.library_versions("torch", imported=True)}


def encoder_code() -> dict:
    """The code key of an open_clip or world-CLIP encoder's embeddings (`cir_demo.utils.code_hash`)."""
    from cir_demo.utils.code_hash import code_key

    return code_key((__name__,), ("torch", "numpy", "pillow", "open_clip"))


def load_encoder(
    model_name: str,
    pretrained: str,
    model_config: dict | str | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    where: str = "open_clip retriever",
    native: bool = True,
) -> tuple[OpenClipEncoder, dict]:
    """Create the open_clip model + matching transform + tokenizer; returns (encoder, spec fields).
    `native`: a local architecture that cir_demo/models/world_clip.py builds (world-CLIP) is built there,
    without importing open_clip (the same embeddings, bit for bit); False: always through open_clip."""
    from cir_demo.utils.io import sha256_file

    precision = torch_precision(precision, device)
    # the code key is the same on both paths (native and open_clip's give the same embeddings): this
    # module's closure holds the native model, the versions name open_clip
    spec: dict[str, Any] = {"model": model_name, "pretrained": pretrained, "code": encoder_code()}
    cfg = None
    if model_config is not None:
        cfg = load_model_config(model_config, where)
        spec["model_config"] = cfg
    if not pretrained:
        raise ValueError(f"{where}: 'pretrained' (an open_clip tag or a local weights file) is required")

    force_pp = None
    if is_local_weights(pretrained):
        path = resolve_path(pretrained)
        if not path.is_file():
            raise FileNotFoundError(f"{where}: weights file not found: {path}")
        digest = sha256_file(path)
        force_pp = read_preprocess_sidecar(path, model_name, digest)
        spec["weights"] = {"path": str(pretrained), "sha256": digest}
        checkpoint = str(path)
        if native and world_clip.supported(cfg, local_tokenizer_dir(cfg), precision):
            return _native_encoder(cfg, path, force_pp, device, spec, where)
    import open_clip  # after the native path: importing it is slow (torchvision, transformers)

    if cfg is not None:
        register_model_config(model_name, cfg)
    if not is_local_weights(pretrained):
        tag_cfg = open_clip.get_pretrained_cfg(model_name, pretrained)
        if not tag_cfg:
            known = open_clip.list_pretrained_tags_by_model(model_name)
            from cir_demo.utils.names import UnknownNameError

            raise UnknownNameError(f"open_clip pretrained tag for {model_name}", pretrained, known)
        spec["weights"] = {"tag": pretrained, **{k: tag_cfg[k] for k in ("hf_hub", "url") if tag_cfg.get(k)}}
        checkpoint = pretrained

    model = open_clip.create_model(
        model_name,
        pretrained=checkpoint,
        device=device,
        precision=precision,
        force_preprocess_cfg=force_pp,
        require_pretrained=True,
    )
    pp_cfg = {k: _jsonable(v) for k, v in model.visual.preprocess_cfg.items()}
    if force_pp is not None and _jsonable(force_pp["size"]) != pp_cfg["size"]:
        raise ValueError(
            f"{where}: sidecar preprocess size {force_pp['size']} differs from the model's image size {pp_cfg['size']}"
        )
    from open_clip.transform import PreprocessCfg, image_transform_v2

    transform = image_transform_v2(PreprocessCfg(**model.visual.preprocess_cfg), is_train=False)
    tokenizer = make_tokenizer(model_name, spec.get("model_config"))
    encoder = OpenClipEncoder(model, transform, tokenizer, device, precision, open_clip.get_input_dtype(precision))
    spec.update({"preprocess": pp_cfg, "precision": precision, "dim": encoder.dim})
    return encoder, spec


def _native_encoder(
    cfg: dict, weights: Path, sidecar: dict, device: str, spec: dict, where: str
) -> tuple[OpenClipEncoder, dict]:
    """`load_encoder` for an architecture cir_demo/models/world_clip.py builds: the same model, transform,
    tokenizer and spec as open_clip's, without importing it."""
    pp_cfg = {k: _jsonable(v) for k, v in world_clip.preprocess_cfg(cfg, sidecar).items()}
    if _jsonable(sidecar["size"]) != _jsonable(cfg["vision_cfg"]["image_size"]):
        raise ValueError(
            f"{where}: sidecar preprocess size {sidecar['size']} differs from the model's image size "
            f"{cfg['vision_cfg']['image_size']}"
        )
    model = world_clip.build_model(cfg, weights, device)
    tokenizer = world_clip.Tokenizer(local_tokenizer_dir(cfg), cfg["text_cfg"].get("context_length", 77))
    encoder = OpenClipEncoder(model, world_clip.Preprocess(pp_cfg), tokenizer, device, "fp32")
    spec.update({"preprocess": pp_cfg, "precision": "fp32", "dim": encoder.dim})
    return encoder, spec


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    return v


def load(config: dict, device: str, progress: bool = False, **_: Any) -> DualEncoderRetriever:
    """Build the retriever a validated registry config describes."""

    def encoder(options: dict, where: str):
        return load_encoder(
            config["model"],
            config.get("pretrained"),
            config.get("model_config"),
            device,
            config.get("precision", "fp32"),
            where=where,
        )

    return retriever_from_config(config, FAMILY, PARAMS, encoder, library_versions, progress)

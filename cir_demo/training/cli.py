"""`python -m cir_demo train world-clip|world-cir|world-verifier`: train a world model on the
offline world's train split, evaluate it on the test split, write weights + manifest atomically.

    python -m cir_demo train world-clip                     # ~30 min on 2 CPU cores (--threads 2)
    python -m cir_demo train world-cir                      # needs assets/world-clip
    python -m cir_demo train world-verifier                 # needs assets/world-clip
    python -m cir_demo train world-clip --world-size tiny --max-steps 3 --out /tmp/wc   # smoke test
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import fields
from pathlib import Path

MODELS = ("world-clip", "world-cir", "world-verifier")
DEFAULT_OUT = {"world-clip": "assets/world-clip", "world-cir": "assets/world-cir",
               "world-verifier": "assets/world-verifier"}
MANIFEST_FORMAT = "cir_demo.world_model/1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", choices=MODELS, help="which world model to train")
    parser.add_argument("--world-size", default="default", help="world size (default, tiny, ...)")
    parser.add_argument("--seed", type=int, default=0, help="world seed (the world's test/train split)")
    parser.add_argument("--data-seed", type=int, default=0, help="training seed (init, batches)")
    parser.add_argument("--epochs", type=float, default=None, help="override the model's default epochs")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after N steps (smoke tests)")
    parser.add_argument("--out", default=None, help="output folder (default assets/<model>)")
    parser.add_argument("--clip", default="assets/world-clip", help="world-CLIP folder (world-cir, world-verifier)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation (smoke tests)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a field of the model's training config, e.g. --set near_miss_last_weight=1 "
                             "(repeatable; the fields are in the manifest's training.config)")
    parser.add_argument("--from-judge", default=None, metavar="DIR",
                        help="world-verifier only: keep the trained judge in DIR (stages 1-2: eyes, judge, "
                             "calibration) and train stage 3 (the near-miss answer) on it")


def run(args: argparse.Namespace) -> int:
    import torch

    from cir_demo.retrievers.base import resolve_path

    torch.set_num_threads(max(1, args.threads))
    out = resolve_path(args.out or DEFAULT_OUT[args.model])
    clip_dir = resolve_path(args.clip)
    if args.model != "world-clip" and not (clip_dir / "manifest.json").is_file():  # before creating --out
        raise SystemExit(f"{args.model}: no world-CLIP at {clip_dir} (train it first: python -m cir_demo train world-clip)")
    out.mkdir(parents=True, exist_ok=True)
    kw = dict(size=args.world_size, seed=args.seed, data_seed=args.data_seed, epochs=args.epochs,
              max_steps=args.max_steps, out=out, evaluate=not args.no_eval, progress=not args.quiet,
              overrides=parse_overrides(args.overrides))
    if args.model == "world-clip":
        manifest = train_clip_command(**kw)
    elif args.model == "world-cir":
        manifest = train_cir_command(clip_dir=clip_dir, clip_ref=args.clip, **kw)
    else:
        from_judge = resolve_path(args.from_judge) if args.from_judge else None
        manifest = train_verifier_command(clip_dir=clip_dir, clip_ref=args.clip, from_judge=from_judge, **kw)
    print(json.dumps({k: manifest[k] for k in ("model", "training", "held_out") if k in manifest}, indent=2))
    return 0


# --------------------------------------------------------------------------- shared
def hardware() -> dict:
    import torch

    return {"cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version()}


def parse_overrides(items) -> dict[str, str]:
    """["field=value", ...] -> {field: value} (values are converted by `_override`)."""
    out = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"--set: expected FIELD=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def _convert(name: str, current, value):
    if isinstance(value, str):
        if isinstance(current, bool):
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise SystemExit(f"--set {name}: expected true or false, got {value!r}")
            return value.lower() in ("1", "true", "yes")
        if value.lower() == "none":
            return None
        if current is None:  # an optional number (max_steps)
            return int(value)
        if isinstance(current, tuple):  # a list of numbers: "0,0.5,1"
            try:
                return tuple(float(v) for v in value.split(","))
            except ValueError:
                raise SystemExit(f"--set {name}: expected numbers separated by commas, got {value!r}") from None
    try:
        return type(current)(value) if current is not None else value
    except ValueError:
        raise SystemExit(f"--set {name}: expected a {type(current).__name__}, got {value!r}") from None


def _override(cfg, overrides: dict | None = None, **values):
    """Set the non-None `values` that name config fields, then the user's `overrides` (which must)."""
    names = {f.name for f in fields(cfg)}
    for k, v in values.items():
        if v is not None and k in names:
            setattr(cfg, k, _convert(k, getattr(cfg, k), v))
    for k, v in (overrides or {}).items():
        if k not in names:
            from cir_demo.utils.names import UnknownNameError

            raise SystemExit(f"--set: {UnknownNameError(f'{type(cfg).__name__} field', k, names)}")
        setattr(cfg, k, _convert(k, getattr(cfg, k), v))
    return cfg


def _write_manifest(out: Path, manifest: dict) -> dict:
    from cir_demo.utils.io import write_json_atomic

    write_json_atomic(out / "manifest.json", manifest)
    return manifest


def _world_block(train, size: str, seed: int) -> dict:
    return {"size": size, "seed": seed, "checksum": train.world.manifest["checksum"],
            "generator_version": train.world.manifest.get("generator_version")}


def manifest_clip_sha(clip_manifest: dict) -> str:
    return clip_manifest["files"]["world_clip.safetensors"][:16]


def _clip_train_embeddings(clip_dir: Path, train, progress: bool):
    """Frozen world-CLIP: (model, tokenizer, train image embeddings, text encoder fn, clip manifest)."""
    from cir_demo.retrievers.base import render_markers
    from cir_demo.training.data import cached_array, world_pixels
    from cir_demo.training.world_clip import encode_pixels, encode_texts, load_world_clip

    clip_manifest = json.loads((clip_dir / "manifest.json").read_text(encoding="utf-8"))
    model, tokenizer, _ = load_world_clip(clip_dir, clip_manifest["model_name"])
    clip_sha = clip_manifest["files"]["world_clip.safetensors"]

    def train_emb():
        pixels = world_pixels(train.world, train.image_ids, "train", progress=progress)
        return encode_pixels(model, pixels, progress=progress, desc="encode train images (world-CLIP)")

    img = cached_array(train.world.manifest["checksum"], f"train-emb-{clip_sha[:16]}", train_emb)

    def text_fn(texts):
        return encode_texts(model, tokenizer, [render_markers(t, "words") for t in texts])

    return model, tokenizer, img, text_fn, clip_manifest


def _train_on_clip_features(size, seed, data_seed, clip_dir: Path, cfg, train_fn, progress: bool,
                            train_kwargs=None):
    """Train a head (world-CIR, verifier) on frozen world-CLIP features of the train split:
    (train, start time, clip model, tokenizer, clip manifest, intent examples, model, info).
    `train_kwargs(clip_model, tokenizer) -> dict` adds keyword arguments to `train_fn`."""
    from cir_demo.training.data import intent_examples
    from cir_demo.world.loader import load_train

    train = load_train(size=size, seed=seed)
    t0 = time.time()
    clip_model, tokenizer, img, text_fn, clip_manifest = _clip_train_embeddings(clip_dir, train, progress)
    examples = intent_examples(train, seed=data_seed)
    extra = train_kwargs(clip_model, tokenizer) if train_kwargs is not None else {}
    model, info = train_fn(examples, img, text_fn, cfg, progress, **extra)
    return train, t0, clip_model, tokenizer, clip_manifest, examples, model, info


def _head_manifest(name: str, description: str, clip_ref: str, clip_manifest: dict, train, size, seed, data_seed,
                   info: dict, t0: float, examples, weights: Path, held_out: dict, **extra) -> dict:
    from cir_demo.utils.io import sha256_file

    return {
        "format": MANIFEST_FORMAT, "model": name, "description": description, **extra,
        "clip": {"path": clip_ref, "weights_sha256": clip_manifest["files"]["world_clip.safetensors"],
                 "model_name": clip_manifest["model_name"]},
        "world": _world_block(train, size, seed), "data_seed": data_seed,
        "training": {**info, "wall_seconds": round(time.time() - t0, 1), "n_intents": len(examples)},
        "hardware": hardware(), "files": {weights.name: sha256_file(weights)}, "held_out": held_out,
        "held_out_note": "test split only (never used for training or model selection)",
    }


def _save_weights(model, weights: Path, metadata: dict) -> None:
    from safetensors.torch import save_file

    from cir_demo.utils.io import atomic_path

    with atomic_path(weights) as tmp:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp), metadata=metadata)


# --------------------------------------------------------------------------- world-CLIP
def train_clip_command(size, seed, data_seed, epochs, max_steps, out: Path, evaluate=True, progress=True,
                       model_name: str | None = None, overrides: dict | None = None) -> dict:
    from cir_demo.paths import REPO_ROOT
    from cir_demo.training import evaluate as ev
    from cir_demo.models.preprocess import PREPROCESS
    from cir_demo.training.data import world_pixels
    from cir_demo.training.world_clip import MODEL_NAME, WorldClipConfig, save_world_clip, train_world_clip
    from cir_demo.world.loader import load_train

    model_name = model_name or MODEL_NAME
    train = load_train(size=size, seed=seed)
    pixels = world_pixels(train.world, train.image_ids, "train", progress=progress)
    cfg = _override(WorldClipConfig(seed=data_seed), overrides, epochs=epochs, max_steps=max_steps)
    tok_dir = (out / "tokenizer").resolve()
    try:  # committed assets get a repo-relative tokenizer path; anywhere else an absolute one
        tok_ref = tok_dir.relative_to(REPO_ROOT.resolve()).as_posix()
    except ValueError:
        tok_ref = str(tok_dir)
    t0 = time.time()
    model, tokenizer, arch, info = train_world_clip(train, pixels, out, cfg, model_name, tok_ref, progress)
    files = save_world_clip(model, arch, out, model_name)
    held_out = {}
    if evaluate:
        test = ev.load_test_data(size, seed, progress)
        emb = ev.clip_embeddings(model, tokenizer, test, progress, cache_key=files["world_clip.safetensors"][:16])
        held_out = ev.evaluate_world_clip(model, tokenizer, test, size, seed, emb, progress=progress)
    manifest = {
        "format": MANIFEST_FORMAT, "model": "world-clip", "model_name": model_name,
        "description": "world-CLIP: small open_clip ViT (64 px, patch 8) + word-level text transformer, "
                       "trained from scratch on the world's train captions (multi-positive CLIP loss)",
        "architecture": arch, "preprocess": PREPROCESS, "world": _world_block(train, size, seed), "data_seed": data_seed,
        "training": {**info, "wall_seconds": round(time.time() - t0, 1), "n_train_images": len(train.image_ids)},
        "hardware": hardware(), "files": files, "held_out": held_out,
        "held_out_note": "test split only (never used for training or model selection)",
    }
    return _write_manifest(out, manifest)


# --------------------------------------------------------------------------- world-CIR
def train_cir_command(size, seed, data_seed, epochs, max_steps, out: Path, clip_dir: Path, clip_ref: str,
                      evaluate=True, progress=True, overrides: dict | None = None) -> dict:
    from cir_demo.training import evaluate as ev
    from cir_demo.models.world_cir import combine_numpy
    from cir_demo.training.world_cir import WEIGHTS_NAME, WorldCirConfig, reference_pairs, train_world_cir

    cfg = _override(WorldCirConfig(seed=data_seed), overrides, epochs=epochs, max_steps=max_steps)
    train, t0, clip_model, tokenizer, clip_manifest, examples, model, info = _train_on_clip_features(
        size, seed, data_seed, clip_dir, cfg, train_world_cir, progress)
    weights = out / WEIGHTS_NAME
    _save_weights(model, weights, {"format": "cir_demo.world_cir/1"})
    held_out = {}
    if evaluate:
        test = ev.load_test_data(size, seed, progress)
        emb = ev.clip_embeddings(clip_model, tokenizer, test, progress, cache_key=manifest_clip_sha(clip_manifest))
        clip_metrics = ev.evaluate_world_clip(clip_model, tokenizer, test, size, seed, emb, progress)
        queries = test.bench.queries
        r1, r2 = reference_pairs(emb["refs"], test.ref_row, queries)
        q = combine_numpy(model, r1, r2, emb["texts"])
        idx, _ = ev.top_k(q, emb["corpus"], 10)
        cir = ev.run_metrics(ev.run_from_topk(queries, test.bench.corpus_ids, idx), queries)
        recipes_only = {k: v for k, v in clip_metrics.items() if k.startswith("world-clip-")}
        best_name = max(recipes_only, key=lambda k: recipes_only[k]["mAP@10"])
        held_out = {"world-cir": cir, **recipes_only, "best_zero_shot_recipe": best_name,
                    "beats_best_zero_shot": bool(cir["mAP@10"] > recipes_only[best_name]["mAP@10"])}
    description = ("world-CIR: Combiner over frozen world-CLIP features (gated ref/text sum + MLP residual), "
                   "full-train-gallery multi-positive softmax + near-miss hard negatives")
    return _write_manifest(out, _head_manifest("world-cir", description, clip_ref, clip_manifest, train, size, seed,
                                               data_seed, info, t0, examples, weights, held_out))


# --------------------------------------------------------------------------- world verifier (the world judge)
def _judge_cnn(train, pixels, arch, cfg, progress: bool):
    """Stage 1 (the judge's CNN), kept in the pixel cache keyed by its config and the world: an
    interrupted or repeated run resumes at stage 2."""
    import hashlib

    import torch
    from safetensors.torch import load_file, save_file

    from cir_demo.models.world_judge import build_image_encoder
    from cir_demo.training.data import pixel_cache_dir
    from cir_demo.training.world_judge import train_cnn
    from cir_demo.utils.io import atomic_path

    stage1 = {k: getattr(cfg, k) for k in ("cnn_epochs", "cnn_batch", "cnn_lr", "seed", "cnn_max_steps")}
    eyes = {k: arch.to_json()[k] for k in ("image_size", "channels", "feat_dim")}  # what the CNN depends on
    key = hashlib.sha256(json.dumps([stage1, eyes], sort_keys=True).encode()).hexdigest()[:16]
    path = pixel_cache_dir(train.world.manifest["checksum"]) / f"judge-cnn-{key}.safetensors"
    info_path = path.with_suffix(".json")
    if path.is_file() and info_path.is_file():
        cnn = build_image_encoder(arch)
        cnn.load_state_dict(load_file(str(path)))
        return cnn.eval(), {**json.loads(info_path.read_text(encoding="utf-8")), "resumed_from": str(path)}
    cnn, info = train_cnn(pixels, train.scenes, arch, cfg, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in cnn.state_dict().items()}, str(tmp))
    with atomic_path(info_path) as tmp:
        tmp.write_text(json.dumps(info), encoding="utf-8")
    torch.manual_seed(cfg.seed)
    return cnn, info


def fusion_first_stage(examples, img, text_fn, k: int):
    """Per intent, (paraphrases, k) world-CLIP fusion top-k train rows, best first (references excluded):
    what a first stage shows the judge during training."""
    import numpy as np

    from cir_demo.retrievers import recipes

    out = []
    for ex in examples:
        t = text_fn(ex.texts)
        ref = recipes.mean_of_references([img[r] for r in ex.ref_rows])
        s = recipes.early_fusion(np.repeat(ref[None], len(t), 0), t, 0.8) @ img.T
        s[:, list(ex.ref_rows)] = -np.inf
        top = np.argpartition(-s, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(s, top, axis=1), axis=1, kind="stable")
        out.append(np.take_along_axis(top, order, axis=1))
    return out


def train_verifier_command(size, seed, data_seed, epochs, max_steps, out: Path, clip_dir: Path, clip_ref: str,
                           evaluate=True, progress=True, overrides: dict | None = None,
                           from_judge: Path | None = None) -> dict:
    """The world judge: stage 1 (CNN on train attributes), stage 2 (the judge on train intents), calibration,
    stage 3 (the near-miss answer and its ranking penalty). world-CLIP only picks training candidates (what
    a first stage shows); the judge never reads it. `from_judge`: keep that judge's stages 1-2 (its
    weights and manifest) and train stage 3 only."""
    import shutil

    import torch

    from cir_demo.models.preprocess import PREPROCESS
    from cir_demo.models.world_judge import JudgeArch, build_judge, encode_words, load_tokenizer
    from cir_demo.rerank.world_verifier import DESCRIPTION, TOKENIZER_FILE
    from cir_demo.retrievers.base import render_markers
    from cir_demo.training.data import intent_examples, world_pixels
    from cir_demo.training.world_judge import (WEIGHTS_NAME, JudgeData, JudgeTrainConfig, attribute_targets,
                                               patch_features, train_attribute_reader, train_judge,
                                               train_near_head)
    from cir_demo.integrity import file_record
    from cir_demo.world.loader import load_train

    cfg = _override(JudgeTrainConfig(seed=data_seed), overrides, epochs=epochs, max_steps=max_steps,
                    cnn_max_steps=max_steps)
    if max_steps is not None:
        cfg.near_steps = min(cfg.near_steps, max_steps)
    train = load_train(size=size, seed=seed)
    t0 = time.time()
    tokenizer_src = clip_dir / "tokenizer" / "tokenizer.json"
    tokenizer = load_tokenizer(tokenizer_src)
    pixels = world_pixels(train.world, train.image_ids, "train", progress=progress)
    if from_judge is not None:
        model, arch, earlier = _earlier_judge(from_judge, train, cfg)
        tokenizer_src = from_judge / TOKENIZER_FILE
        tokenizer = load_tokenizer(tokenizer_src)
    else:
        arch = JudgeArch(**{**cfg.arch, "near_head": cfg.near_head, "vocab_size": tokenizer.get_vocab_size(),
                            "attr_classes": tuple(attribute_targets(train.scenes)[1])})
        cnn, cnn_info = _judge_cnn(train, pixels, arch, cfg, progress)
        model = build_judge(arch)
        model.image.load_state_dict(cnn.state_dict())
        model.image.eval()
    for p in model.image.parameters():
        p.requires_grad_(False)
    feats = patch_features(model.image, pixels, progress=progress, desc="judge features of the train images")
    if from_judge is None:
        attr_info = train_attribute_reader(model, feats, train.scenes, steps=cfg.attr_steps, seed=cfg.seed,
                                           progress=progress)
    _, _, img, text_fn, clip_manifest = _clip_train_embeddings(clip_dir, train, progress)
    examples = intent_examples(train, seed=data_seed)
    fs = fusion_first_stage(examples, img, text_fn, cfg.first_stage_k)

    def tokenize(texts, length):
        return encode_words(tokenizer, [render_markers(t, "words") for t in texts], length)

    data = JudgeData(feats, examples, tokenize, arch.context_length)
    if from_judge is None:
        model, info = train_judge(model, data, fs, cfg, progress)
        training = {"stage1_cnn": cnn_info, "attribute_reader": attr_info, "stage2_judge": info}
    else:
        training = {k: v for k, v in earlier["training"].items() if k in ("stage1_cnn", "attribute_reader", "stage2_judge")}
        training["stages_1_2_from"] = {"manifest": _repo_relative(from_judge / "manifest.json"),
                                       "weights_sha256": file_record(from_judge / WEIGHTS_NAME)["sha256"]}
    penalty, near_info = (train_near_head(model, data, fs, cfg, progress) if arch.near_head else (0.0, None))
    if near_info is not None:
        training["stage3_near_miss"] = near_info
    weights = out / WEIGHTS_NAME
    (out / TOKENIZER_FILE).parent.mkdir(parents=True, exist_ok=True)
    if tokenizer_src.resolve() != (out / TOKENIZER_FILE).resolve():
        shutil.copyfile(tokenizer_src, out / TOKENIZER_FILE)
    _save_weights(model, weights, {"format": "cir_demo.world_judge/1"})
    for stale in ("world_verifier.safetensors",):  # the previous verifier's weights
        (out / stale).unlink(missing_ok=True)
    held_out = {}
    if evaluate:
        from cir_demo.training.judge_eval import held_out_judge

        with torch.inference_mode():
            held_out = held_out_judge(model, tokenize, arch, size, seed, clip_dir, clip_manifest, progress,
                                      near_penalty=penalty)
    training.update({"wall_seconds": round(time.time() - t0, 1), "n_intents": len(examples)})
    manifest = {
        "format": MANIFEST_FORMAT, "model": "world-verifier", "description": DESCRIPTION,
        "architecture": arch.to_json(), "preprocess": PREPROCESS,
        "ranking": {"near_miss_penalty": penalty,
                    "key": "P(yes) - near_miss_penalty * P(near miss)" if arch.near_head else "P(yes)"},
        "first_stage_for_training": {"clip": clip_ref, "weights_sha256": clip_manifest["files"]["world_clip.safetensors"],
                                     "recipe": "early_fusion text_weight 0.8", "k": cfg.first_stage_k},
        "world": _world_block(train, size, seed), "data_seed": data_seed,
        "training": training,
        "hardware": hardware(),
        "files": {weights.name: file_record(weights), TOKENIZER_FILE: file_record(out / TOKENIZER_FILE)},
        "held_out": held_out, "held_out_note": "test split only (never used for training or model selection)",
    }
    return _write_manifest(out, manifest)


def _repo_relative(path: Path) -> str:
    from cir_demo.paths import REPO_ROOT

    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _earlier_judge(folder: Path, train, cfg):
    """A trained judge (stages 1-2) from `folder`, given a fresh near-miss head: (model, arch, manifest)."""
    from dataclasses import replace

    from safetensors.torch import load_file

    from cir_demo.models.world_judge import JudgeArch, build_judge
    from cir_demo.rerank.world_verifier import read_judge_manifest
    from cir_demo.training.world_judge import WEIGHTS_NAME

    earlier, _ = read_judge_manifest(folder / WEIGHTS_NAME)
    if earlier.get("world", {}).get("checksum") != train.world.manifest["checksum"]:
        raise SystemExit(f"--from-judge {folder}: trained on another world "
                         f"({earlier.get('world', {}).get('checksum')}), not {train.world.manifest['checksum']}")
    arch = replace(JudgeArch.from_json(earlier["architecture"]), near_head=cfg.near_head)
    model = build_judge(arch)
    state = {k: v for k, v in load_file(str(folder / WEIGHTS_NAME)).items() if not k.startswith("near.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("near.") for k in missing):
        raise SystemExit(f"--from-judge {folder}: weights do not fit the architecture "
                         f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.eval(), arch, earlier

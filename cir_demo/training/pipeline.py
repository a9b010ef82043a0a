"""Training the world models, stage by stage: load the offline world's train split, train,
evaluate on the held-out test split, write weights + manifest atomically.

`train` is the one entry: `python -m cir_demo train` (training/cli.py) parses the flags and
calls it. A model's own training loop lives in its module (world_clip, world_cir, world_judge);
this module wires data, loops, held-out evaluation and the manifest together.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import fields
from pathlib import Path

MANIFEST_FORMAT = "cir_demo.world_model/1"


def train(model: str, out: str, clip: str, threads: int = 2, from_judge: str | None = None, **kw) -> dict:
    """Train world model `model` ("world-clip", "world-cir", "world-verifier") into the folder `out`
    (created only once the world-CLIP it needs is there); its manifest. `clip`: the world-CLIP folder
    (world-cir, world-verifier); `from_judge`: world-verifier only, see `train_verifier_command`;
    `kw`: size, seed, data_seed, epochs, max_steps, evaluate, progress, overrides."""
    import torch

    from cir_demo.retrievers.base import resolve_path

    torch.set_num_threads(max(1, threads))
    out_dir = resolve_path(out)
    clip_dir = resolve_path(clip)
    if model != "world-clip" and not (clip_dir / "manifest.json").is_file():  # before creating --out
        raise SystemExit(f"{model}: no world-CLIP at {clip_dir} (train it first: python -m cir_demo train world-clip)")
    out_dir.mkdir(parents=True, exist_ok=True)
    if model == "world-clip":
        return train_clip_command(out=out_dir, **kw)
    if model == "world-cir":
        return train_cir_command(out=out_dir, clip_dir=clip_dir, clip_ref=clip, **kw)
    return train_verifier_command(
        out=out_dir, clip_dir=clip_dir, clip_ref=clip, from_judge=resolve_path(from_judge) if from_judge else None, **kw
    )


# --------------------------------------------------------------------------- shared
def hardware() -> dict:
    import torch

    return {
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


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
    return {
        "size": size,
        "seed": seed,
        "checksum": train.world.manifest["checksum"],
        "generator_version": train.world.manifest.get("generator_version"),
    }


def manifest_clip_sha(clip_manifest: dict) -> str:
    return clip_manifest["files"]["world_clip.safetensors"][:16]


def _clip_train_embeddings(clip_dir: Path, train, progress: bool):
    """Frozen world-CLIP: (model, tokenizer, train image embeddings, text encoder fn, clip manifest)."""
    import numpy as np

    from cir_demo.retrievers.base import render_markers
    from cir_demo.training.data import cached_array, world_pixels
    from cir_demo.training.world_clip import ENCODE_CODE, ENCODE_LIBRARIES, encode_pixels, encode_texts, load_world_clip

    clip_manifest = json.loads((clip_dir / "manifest.json").read_text(encoding="utf-8"))
    model, tokenizer, _ = load_world_clip(clip_dir, clip_manifest["model_name"])
    clip_sha = clip_manifest["files"]["world_clip.safetensors"]

    def train_emb():
        pixels = world_pixels(train.world, train.image_ids, "train", progress=progress)
        return encode_pixels(model, pixels, progress=progress, desc="encode train images (world-CLIP)")

    img = cached_array(
        train.world.manifest["checksum"], f"train-emb-{clip_sha[:16]}", train_emb, ENCODE_CODE, ENCODE_LIBRARIES
    )

    # The judge's training asks for the same intents' texts under each first stage it validates on
    # (fusion, then world-CIR); the frozen encoder gives the same rows for the same call, so each list of
    # texts is encoded once per training. Each caller gets its own copy to change as it likes.
    encoded: dict[tuple[str, ...], np.ndarray] = {}

    def text_fn(texts):
        key = tuple(texts)
        if key not in encoded:
            encoded[key] = encode_texts(model, tokenizer, [render_markers(t, "words") for t in texts])
        return encoded[key].copy()

    return model, tokenizer, img, text_fn, clip_manifest


def _train_on_clip_features(size, seed, data_seed, clip_dir: Path, cfg, train_fn, progress: bool, train_kwargs=None):
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


def _head_manifest(
    name: str,
    description: str,
    clip_ref: str,
    clip_manifest: dict,
    train,
    size,
    seed,
    data_seed,
    info: dict,
    t0: float,
    examples,
    weights: Path,
    held_out: dict,
    **extra,
) -> dict:
    from cir_demo.utils.io import sha256_file

    return {
        "format": MANIFEST_FORMAT,
        "model": name,
        "description": description,
        **extra,
        "clip": {
            "path": clip_ref,
            "weights_sha256": clip_manifest["files"]["world_clip.safetensors"],
            "model_name": clip_manifest["model_name"],
        },
        "world": _world_block(train, size, seed),
        "data_seed": data_seed,
        "training": {**info, "wall_seconds": round(time.time() - t0, 1), "n_intents": len(examples)},
        "hardware": hardware(),
        "files": {weights.name: sha256_file(weights)},
        "held_out": held_out,
        "held_out_note": "test split only (never used for training or model selection)",
    }


def _save_weights(model, weights: Path, metadata: dict) -> None:
    from safetensors.torch import save_file

    from cir_demo.utils.io import atomic_path

    with atomic_path(weights) as tmp:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp), metadata=metadata)


# --------------------------------------------------------------------------- world-CLIP
def train_clip_command(
    size,
    seed,
    data_seed,
    epochs,
    max_steps,
    out: Path,
    evaluate=True,
    progress=True,
    model_name: str | None = None,
    overrides: dict | None = None,
) -> dict:
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
        "format": MANIFEST_FORMAT,
        "model": "world-clip",
        "model_name": model_name,
        "description": "world-CLIP: small open_clip ViT (64 px, patch 8) + word-level text transformer, "
        "trained from scratch on the world's train captions (multi-positive CLIP loss)",
        "architecture": arch,
        "preprocess": PREPROCESS,
        "world": _world_block(train, size, seed),
        "data_seed": data_seed,
        "training": {**info, "wall_seconds": round(time.time() - t0, 1), "n_train_images": len(train.image_ids)},
        "hardware": hardware(),
        "files": files,
        "held_out": held_out,
        "held_out_note": "test split only (never used for training or model selection)",
    }
    return _write_manifest(out, manifest)


# --------------------------------------------------------------------------- world-CIR
def train_cir_command(
    size,
    seed,
    data_seed,
    epochs,
    max_steps,
    out: Path,
    clip_dir: Path,
    clip_ref: str,
    evaluate=True,
    progress=True,
    overrides: dict | None = None,
) -> dict:
    from cir_demo.training import evaluate as ev
    from cir_demo.models.world_cir import combine_numpy
    from cir_demo.training.world_cir import WEIGHTS_NAME, WorldCirConfig, reference_pairs, train_world_cir

    cfg = _override(WorldCirConfig(seed=data_seed), overrides, epochs=epochs, max_steps=max_steps)
    train, t0, clip_model, tokenizer, clip_manifest, examples, model, info = _train_on_clip_features(
        size, seed, data_seed, clip_dir, cfg, train_world_cir, progress
    )
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
        held_out = {
            "world-cir": cir,
            **recipes_only,
            "best_zero_shot_recipe": best_name,
            "beats_best_zero_shot": bool(cir["mAP@10"] > recipes_only[best_name]["mAP@10"]),
        }
    description = (
        "world-CIR: Combiner over frozen world-CLIP features (gated ref/text sum + MLP residual), "
        "full-train-gallery multi-positive softmax + near-miss hard negatives"
    )
    return _write_manifest(
        out,
        _head_manifest(
            "world-cir",
            description,
            clip_ref,
            clip_manifest,
            train,
            size,
            seed,
            data_seed,
            info,
            t0,
            examples,
            weights,
            held_out,
        ),
    )


# --------------------------------------------------------------------------- world verifier (the world judge)
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


def cir_first_stage(examples, img, text_fn, combiner, k: int):
    """Per intent, (paraphrases, k) world-CIR top-k rows of the gallery `img`, best first (references
    excluded): the second first stage the judge's ranking key is chosen on."""
    import numpy as np

    from cir_demo.models.world_cir import combine_numpy

    out = []
    for ex in examples:
        t = text_fn(ex.texts)
        n = len(t)
        s = combine_numpy(combiner, img[[ex.ref_rows[0]] * n], img[[ex.ref_rows[-1]] * n], t) @ img.T
        s[:, list(ex.ref_rows)] = -np.inf
        top = np.argpartition(-s, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(s, top, axis=1), axis=1, kind="stable")
        out.append(np.take_along_axis(top, order, axis=1))
    return out


def _choice_combiner(cfg, clip_manifest: dict):
    """world-CIR's combiner named by `cfg.choice_cir` (None for ""), checked to sit on this world-CLIP."""
    if not cfg.choice_cir:
        return None
    from safetensors.torch import load_file

    from cir_demo.models.world_cir import combiner_from_state
    from cir_demo.paths import REPO_ROOT
    from cir_demo.training.world_cir import WEIGHTS_NAME

    folder = Path(cfg.choice_cir)
    folder = folder if folder.is_absolute() else REPO_ROOT / folder
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"choice_cir: {manifest_path} not found (train it: python -m cir_demo train world-cir)")
    cir_manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    on = str((cir_manifest.get("clip") or {}).get("weights_sha256"))
    record = clip_manifest["files"]["world_clip.safetensors"]
    clip_sha = record if isinstance(record, str) else record["sha256"]
    if on != clip_sha:
        raise ValueError(f"choice_cir: {manifest_path} was trained on world-CLIP {on!r}, not the judge's {clip_sha!r}")
    return combiner_from_state(load_file(str(folder / WEIGHTS_NAME)))


def train_verifier_command(
    size,
    seed,
    data_seed,
    epochs,
    max_steps,
    out: Path,
    clip_dir: Path,
    clip_ref: str,
    evaluate=True,
    progress=True,
    overrides: dict | None = None,
    from_judge: Path | None = None,
) -> dict:
    """The world judge: stage 1 (CNN on train attributes), stage 2 (the judge on train intents), calibration,
    stage 3 (the near-miss answer and its ranking key). world-CLIP only picks training candidates (what
    a first stage shows) and, with world-CIR, the lists the ranking key is chosen on; the judge never
    reads them. `from_judge`: keep that judge's stages 1-2 (its weights and manifest) and train stage 3
    only."""
    import numpy as np
    import torch

    from cir_demo.models.world_judge import encode_words, load_tokenizer
    from cir_demo.retrievers.base import render_markers
    from cir_demo.training.data import intent_examples, world_pixels
    from cir_demo.training.judge_start import starting_judge
    from cir_demo.training.world_judge import (
        JudgeData,
        JudgeTrainConfig,
        patch_features,
        train_attribute_reader,
        train_judge,
        train_near_head,
    )
    from cir_demo.world.loader import load_train

    cfg = _override(
        JudgeTrainConfig(seed=data_seed), overrides, epochs=epochs, max_steps=max_steps, cnn_max_steps=max_steps
    )
    if max_steps is not None:  # --max-steps caps every stage (a smoke run), the attribute reader too
        cfg.near_steps, cfg.attr_steps = min(cfg.near_steps, max_steps), min(cfg.attr_steps, max_steps)
    train = load_train(size=size, seed=seed)
    t0 = time.time()
    pixels = world_pixels(train.world, train.image_ids, "train", progress=progress)
    model, arch, tokenizer_src, earlier = starting_judge(train, pixels, clip_dir, cfg, from_judge, progress)
    tokenizer = load_tokenizer(tokenizer_src)
    for p in model.image.parameters():
        p.requires_grad_(False)
    feats = patch_features(model.image, pixels, progress=progress, desc="judge features of the train images")
    if from_judge is None:
        attr_info = train_attribute_reader(
            model, feats, train.scenes, steps=cfg.attr_steps, seed=cfg.seed, progress=progress
        )
    clip_model, _, img, text_fn, clip_manifest = _clip_train_embeddings(clip_dir, train, progress)
    examples = intent_examples(train, seed=data_seed)
    fs = fusion_first_stage(examples, img, text_fn, cfg.first_stage_k)

    def tokenize(texts, length):
        return encode_words(tokenizer, [render_markers(t, "words") for t in texts], length)

    data = JudgeData(feats, examples, tokenize, arch.context_length)
    combiner = _choice_combiner(cfg, clip_manifest)
    compositional, vimg = _compositional_validation(
        train, model.image, feats, clip_model, clip_manifest, img, text_fn, tokenize, arch, cfg, data_seed, progress
    )
    more = {}
    if combiner is not None:  # world-CIR's lists of both validation splits
        more["world-cir"] = {"in_distribution": cir_first_stage(examples, img, text_fn, combiner, cfg.first_stage_k)}
        if compositional is not None:
            gallery = np.concatenate([img, vimg])
            more["world-cir"]["compositional"] = cir_first_stage(
                compositional[0].examples, gallery, text_fn, combiner, cfg.first_stage_k
            )
    if from_judge is None:
        model, info = train_judge(model, data, fs, cfg, progress, compositional=compositional)
        training = {**earlier, "attribute_reader": attr_info, "stage2_judge": info}
    else:
        training = _stages_1_2_from(from_judge, earlier)
    (penalty, rank_weight), near_info = (
        train_near_head(model, data, fs, cfg, progress, compositional=compositional, more_first_stages=more)
        if arch.near_head
        else ((0.0, 0.0), None)
    )
    if near_info is not None:
        training["stage3_near_miss"] = near_info
    weights = _save_judge(model, out, tokenizer_src)
    held_out = {}
    if evaluate:
        from cir_demo.training.judge_eval import held_out_judge

        with torch.inference_mode():
            held_out = held_out_judge(
                model,
                tokenize,
                arch,
                size,
                seed,
                clip_dir,
                clip_manifest,
                progress,
                near_penalty=penalty,
                rank_weight=rank_weight,
            )
    training.update({"wall_seconds": round(time.time() - t0, 1), "n_intents": len(examples)})
    return _write_manifest(
        out,
        _judge_manifest(
            arch,
            (penalty, rank_weight),
            clip_ref,
            clip_manifest,
            cfg,
            train,
            size,
            seed,
            data_seed,
            training,
            weights,
            held_out,
        ),
    )


def _compositional_validation(
    train, cnn, train_feats, clip_model, clip_manifest, img, text_fn, tokenize, arch, cfg, data_seed, progress
):
    """((JudgeData, first-stage lists), world-CLIP embeddings of the validation scenes) of the train
    split's compositional validation split: its intents over the gallery of train images and validation
    scenes (the judge's features and world-CLIP's embeddings of both), first stage world-CLIP fusion
    top k as in training. (None, None) when the world has no validation intents."""
    import numpy as np

    from cir_demo.training.data import cached_array, intent_examples, validation_row, world_pixels
    from cir_demo.training.world_clip import ENCODE_CODE, ENCODE_LIBRARIES, encode_pixels
    from cir_demo.training.world_judge import JudgeData, patch_features
    from cir_demo.world.loader import load_validation

    val = load_validation(size=train.world.manifest["size"], seed=train.world.manifest["seed"])
    if not val.intents:
        return None, None
    pixels = world_pixels(val.world, val.image_ids, "validation", progress=progress)
    clip_sha = manifest_clip_sha(clip_manifest)

    def val_emb():
        return encode_pixels(clip_model, pixels, progress=progress, desc="encode validation images (world-CLIP)")

    vimg = cached_array(
        val.world.manifest["checksum"], f"validation-emb-{clip_sha[:16]}", val_emb, ENCODE_CODE, ENCODE_LIBRARIES
    )
    feats = np.concatenate([train_feats, patch_features(cnn, pixels, desc="judge features of the validation images")])
    examples = intent_examples(val, seed=data_seed, row_of=validation_row(len(train.world.train_scenes)))
    fs = fusion_first_stage(examples, np.concatenate([img, vimg]), text_fn, cfg.first_stage_k)
    return (JudgeData(feats, examples, tokenize, arch.context_length), fs), vimg


def _stages_1_2_from(folder: Path, earlier_training: dict) -> dict:
    """The `training` record of a judge whose stages 1-2 come from `folder`: theirs, and where from."""
    from cir_demo.integrity import file_record
    from cir_demo.training.world_judge import WEIGHTS_NAME

    training = {k: v for k, v in earlier_training.items() if k in ("stage1_cnn", "attribute_reader", "stage2_judge")}
    training["stages_1_2_from"] = {
        "manifest": _repo_relative(folder / "manifest.json"),
        "weights_sha256": file_record(folder / WEIGHTS_NAME)["sha256"],
    }
    return training


def _save_judge(model, out: Path, tokenizer_src: Path) -> Path:
    """The judge's weights and tokenizer into `out` (the previous verifier's weights removed); the weights file."""
    import shutil

    from cir_demo.rerank.world_verifier import TOKENIZER_FILE
    from cir_demo.training.world_judge import WEIGHTS_NAME

    weights = out / WEIGHTS_NAME
    (out / TOKENIZER_FILE).parent.mkdir(parents=True, exist_ok=True)
    if tokenizer_src.resolve() != (out / TOKENIZER_FILE).resolve():
        shutil.copyfile(tokenizer_src, out / TOKENIZER_FILE)
    _save_weights(model, weights, {"format": "cir_demo.world_judge/1"})
    for stale in ("world_verifier.safetensors",):  # the previous verifier's weights
        (out / stale).unlink(missing_ok=True)
    return weights


def _judge_manifest(
    arch,
    ranking: tuple[float, float],
    clip_ref: str,
    clip_manifest: dict,
    cfg,
    train,
    size,
    seed,
    data_seed,
    training: dict,
    weights: Path,
    held_out: dict,
) -> dict:
    from cir_demo.integrity import file_record
    from cir_demo.models.preprocess import PREPROCESS
    from cir_demo.rerank.world_verifier import DESCRIPTION, TOKENIZER_FILE

    return {
        "format": MANIFEST_FORMAT,
        "model": "world-verifier",
        "description": DESCRIPTION,
        "architecture": arch.to_json(),
        "preprocess": PREPROCESS,
        "ranking": {
            "near_miss_penalty": ranking[0],
            "first_stage_rank_weight": ranking[1],
            "key": (
                "P(yes) - near_miss_penalty * P(near miss) - first_stage_rank_weight * first-stage rank (0-based)"
                if arch.near_head
                else "P(yes)"
            ),
        },
        "first_stage_for_training": {
            "clip": clip_ref,
            "weights_sha256": clip_manifest["files"]["world_clip.safetensors"],
            "recipe": "early_fusion text_weight 0.8",
            "k": cfg.first_stage_k,
        },
        "world": _world_block(train, size, seed),
        "data_seed": data_seed,
        "training": training,
        "hardware": hardware(),
        "files": {weights.name: file_record(weights), TOKENIZER_FILE: file_record(weights.parent / TOKENIZER_FILE)},
        "held_out": held_out,
        "held_out_note": "test split only (never used for training or model selection)",
    }


def _repo_relative(path: Path) -> str:
    from cir_demo.paths import REPO_ROOT

    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)

"""The judge a world-verifier training run starts from: a fresh judge on a stage-1 CNN (trained and
cached in the pixel cache, or kept from another judge with `cnn_from`), or an earlier judge whose stages
1-2 are kept (`--from-judge`) so that stage 3 alone is trained. training/pipeline.py wires the stages.
"""

from __future__ import annotations

import json
from pathlib import Path


def starting_judge(train, pixels, clip_dir: Path, cfg, from_judge: Path | None, progress: bool):
    """The judge stage 2 or 3 starts from: (model, arch, its tokenizer file, what its earlier stages
    recorded). With `from_judge`: that judge (stages 1-2 trained), its tokenizer and its manifest's
    `training`; else a fresh judge on the stage-1 CNN, world-CLIP's tokenizer and the CNN's record."""
    from cir_demo.models.world_judge import JudgeArch, load_tokenizer
    from cir_demo.rerank.world_verifier import TOKENIZER_FILE
    from cir_demo.training.world_judge import attribute_targets

    if from_judge is not None:
        model, arch, earlier = _earlier_judge(from_judge, train, cfg)
        return model, arch, from_judge / TOKENIZER_FILE, earlier["training"]
    tokenizer_src = clip_dir / "tokenizer" / "tokenizer.json"
    arch = JudgeArch(
        **{
            **cfg.arch,
            "near_head": cfg.near_head,
            "vocab_size": load_tokenizer(tokenizer_src).get_vocab_size(),
            "attr_classes": tuple(attribute_targets(train.scenes)[1]),
        }
    )
    cnn, cnn_info = _judge_cnn(train, pixels, arch, cfg, progress)
    model = _seeded_judge(arch, cfg.seed)
    model.image.load_state_dict(cnn.state_dict())
    model.image.eval()
    return model, arch, tokenizer_src, {"stage1_cnn": cnn_info}


def _judge_cnn(train, pixels, arch, cfg, progress: bool):
    """Stage 1 (the judge's CNN), kept in the pixel cache keyed by its config and the world: an
    interrupted or repeated run resumes at stage 2."""
    from safetensors.torch import load_file, save_file

    from cir_demo.models.world_judge import build_image_encoder
    from cir_demo.training.world_judge import train_cnn
    from cir_demo.utils.io import atomic_path

    if cfg.cnn_from:
        return _cnn_from(Path(cfg.cnn_from), arch)
    path = judge_cnn_path(train.world.manifest["checksum"], arch, cfg)
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
    return cnn, info


def _seeded_judge(arch, seed: int):
    """A judge with fresh weights drawn from `seed`, whatever drew from torch's generator before in this
    process: a run whose stage 1 comes from the cache starts from the weights a fresh stage 1 gives it."""
    import torch

    from cir_demo.models.world_judge_net import build_judge

    torch.manual_seed(seed)
    return build_judge(arch)


# The code that trains the stage-1 CNN (and reaches the pixels' code and the judge's network) and the
# libraries that compute it: a changed trainer, network or renderer trains again, never reuses a CNN
CNN_CODE = ("cir_demo.training.world_judge", "cir_demo.training.data")
CNN_LIBRARIES = ("torch", "numpy", "safetensors")


def judge_cnn_path(world_checksum: str, arch, cfg) -> Path:
    """Where stage 1's CNN is kept: keyed by its config, the architecture it depends on, the world and the
    code and libraries that train it (`CNN_CODE`)."""
    import hashlib

    from cir_demo.training.data import code_tag, pixel_cache_dir

    stage1 = {k: getattr(cfg, k) for k in ("cnn_epochs", "cnn_batch", "cnn_lr", "seed", "cnn_max_steps")}
    eyes = {k: arch.to_json()[k] for k in ("image_size", "channels", "feat_dim")}  # what the CNN depends on
    key = hashlib.sha256(json.dumps([stage1, eyes], sort_keys=True).encode()).hexdigest()[:16]
    return pixel_cache_dir(world_checksum) / f"judge-cnn-{key}-{code_tag(CNN_CODE, CNN_LIBRARIES)}.safetensors"


def _cnn_from(folder: Path, arch):
    """Stage 1 kept from the judge in `folder`: its image encoder and its manifest's stage-1 record."""
    from safetensors.torch import load_file

    from cir_demo.integrity import file_record
    from cir_demo.models.world_judge import JudgeArch, build_image_encoder
    from cir_demo.rerank.world_verifier import read_judge_manifest
    from cir_demo.training.world_judge import WEIGHTS_NAME

    manifest, _ = read_judge_manifest(folder / WEIGHTS_NAME)
    theirs = JudgeArch.from_json(manifest["architecture"]).to_json()
    eyes = ("image_size", "channels", "feat_dim")
    if any(theirs[k] != arch.to_json()[k] for k in eyes):
        raise SystemExit(f"cnn_from {folder}: its CNN does not fit this architecture ({', '.join(eyes)})")
    cnn = build_image_encoder(arch)
    state = load_file(str(folder / WEIGHTS_NAME))
    cnn.load_state_dict({k[len("image.") :]: v for k, v in state.items() if k.startswith("image.")})
    info = dict(manifest.get("training", {}).get("stage1_cnn") or {})
    info["kept_from"] = {
        "world": manifest.get("world"),
        "weights_sha256": file_record(folder / WEIGHTS_NAME)["sha256"],
    }
    return cnn.eval(), info


def _earlier_judge(folder: Path, train, cfg):
    """A trained judge (stages 1-2) from `folder`, given a fresh near-miss head: (model, arch, manifest)."""
    from dataclasses import replace

    from safetensors.torch import load_file

    from cir_demo.models.world_judge import JudgeArch
    from cir_demo.rerank.world_verifier import read_judge_manifest
    from cir_demo.training.world_judge import WEIGHTS_NAME

    earlier, _ = read_judge_manifest(folder / WEIGHTS_NAME)
    if earlier.get("world", {}).get("checksum") != train.world.manifest["checksum"]:
        raise SystemExit(
            f"--from-judge {folder}: trained on another world "
            f"({earlier.get('world', {}).get('checksum')}), not {train.world.manifest['checksum']}"
        )
    arch = replace(JudgeArch.from_json(earlier["architecture"]), near_head=cfg.near_head)
    model = _seeded_judge(arch, cfg.seed)  # its near-miss head fresh from the seed
    state = {k: v for k, v in load_file(str(folder / WEIGHTS_NAME)).items() if not k.startswith("near.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("near.") for k in missing):
        raise SystemExit(
            f"--from-judge {folder}: weights do not fit the architecture "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    return model.eval(), arch, earlier

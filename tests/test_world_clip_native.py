"""world-CLIP built with torch alone (cir_demo/models/world_clip.py) against open_clip on the same
committed weights: the same spec, pixels, token ids and embeddings, bit for bit; loading it imports
neither open_clip nor torchvision nor transformers; other configs still go through open_clip."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from cir_demo.models import world_clip
from cir_demo.retrievers import openclip

ROOT = Path(__file__).resolve().parents[1]
ARGS = ("world-clip", "assets/world-clip/world_clip.safetensors", "assets/world-clip/model_config.json")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = [
    "a red dress",
    "the  same bag,\tbut in BLUE",
    "",
    "café &amp; naïve — “quoted” words",
    "an unknownword zzz qqq",
    " ".join(["long"] * 80),
    "<img1> and <img2> swapped",
]


@pytest.fixture(scope="module")
def both():
    native, native_spec = openclip.load_encoder(*ARGS)
    reference, reference_spec = openclip.load_encoder(*ARGS, native=False)
    return native, native_spec, reference, reference_spec


def images():
    rng = np.random.default_rng(0)
    out = [
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        for h, w in ((64, 64), (80, 64), (64, 97), (33, 50), (200, 130))
    ]
    out.append(Image.fromarray(rng.integers(0, 256, (70, 70), dtype=np.uint8), mode="L").convert("RGB"))
    return out


def test_the_native_world_clip_is_the_open_clip_model_bit_for_bit(both):
    native, native_spec, reference, reference_spec = both
    assert type(native.model).__module__ == world_clip.__name__
    assert type(reference.model).__module__.startswith("open_clip")
    assert native_spec == reference_spec
    for img in images():
        assert torch.equal(native.preprocess(img), reference.preprocess(img)), img.size
    assert torch.equal(native.tokenizer(TEXTS), reference.tokenizer(TEXTS))
    assert np.array_equal(native.encode_image_batch(images()), reference.encode_image_batch(images()))
    assert np.array_equal(native.encode_text_batch(TEXTS), reference.encode_text_batch(TEXTS))
    ref_state = reference.model.state_dict()
    assert set(native.model.state_dict()) == set(ref_state)


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
def test_model_input_pixels_are_open_clips_resize_bit_for_bit(interpolation):
    """`to_model_pixels` (what the world judge and training feed the models) resizes with PIL alone;
    oracle: the PIL stage of open_clip's eval transform (torchvision's Resize and CenterCrop), on
    renders and on images of odd sizes and modes, as uploads give."""
    from cir_demo.models.preprocess import PREPROCESS, resize_stage, to_model_pixels
    from cir_demo.world.render.compose import render_scene
    from cir_demo.world.scene import sample_scene

    import random

    rng = np.random.default_rng(1)
    odd = [
        Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), mode="RGBA")
        for h, w in ((160, 160), (63, 64), (64, 63), (1000, 17), (17, 1000), (129, 257))
    ]
    odd.append(Image.fromarray(rng.integers(0, 256, (90, 120), dtype=np.uint8), mode="L").convert("P"))
    renders = [render_scene(sample_scene(random.Random(i))) for i in range(4)]
    preprocess = {**PREPROCESS, "interpolation": interpolation}
    stage = resize_stage(preprocess)
    for imgs in (images() + odd, renders):
        oracle = np.stack([np.asarray(stage(im.convert("RGB")), dtype=np.uint8) for im in imgs])
        assert np.array_equal(to_model_pixels(imgs, preprocess), oracle)
    arrays = [np.asarray(im.convert("RGB")) for im in renders]  # uint8 arrays take the same path
    assert np.array_equal(to_model_pixels(arrays, preprocess), to_model_pixels(renders, preprocess))


def test_a_config_the_native_file_does_not_build_goes_through_open_clip():
    cfg = openclip.load_model_config(ARGS[2], "test")
    tok = openclip.local_tokenizer_dir(cfg)
    assert world_clip.supported(cfg, tok, "fp32")
    assert not world_clip.supported(cfg, tok, "fp16")
    assert not world_clip.supported(cfg, None, "fp32")
    assert not world_clip.supported({**cfg, "quick_gelu": True}, tok, "fp32")
    assert not world_clip.supported({**cfg, "vision_cfg": {**cfg["vision_cfg"], "ls_init_value": 0.1}}, tok, "fp32")
    assert not world_clip.supported({**cfg, "text_cfg": {**cfg["text_cfg"], "pool_type": "argmax"}}, tok, "fp32")


def test_loading_the_world_retrievers_imports_no_open_clip_torchvision_or_transformers_in_a_fresh_process():
    code = textwrap.dedent("""
        import sys
        from cir_demo.retrievers.registry import load_retriever
        for name in ("world-cir", "world-clip-fusion", "world-clip-image", "world-clip-text"):
            r = load_retriever(name, device="cpu")
            assert r.spec["versions"]["open_clip"], r.spec["versions"]
        heavy = sorted(m for m in ("open_clip", "torchvision", "transformers", "torch._dynamo") if m in sys.modules)
        print("imported:", heavy)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "imported: []", out.stdout

"""transformers adapter on tiny random CLIPModel / SiglipModel saved here: adapter == direct forward."""

import json

import numpy as np
import pytest

import torch

from PIL import Image

from cir_demo.retrievers import registry
from cir_demo.retrievers.base import ComposedQuery
from cir_demo.retrievers.dual_encoder import features_tensor
from cir_demo.testing.tiny_retrievers import build_tiny_hf


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(3)
    return [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in [(40, 50), (32, 32), (64, 48)]]


@pytest.fixture(scope="module", params=["clip", "siglip"])
def tiny(request, tmp_path_factory):
    kind = request.param
    folder = build_tiny_hf(tmp_path_factory.mktemp(f"tiny_{kind}"), kind, seed=0)
    name = f"tiny-hf-{kind}-test"
    registry.register_config(
        {
            "name": name,
            "family": "hf_clip",
            "model": str(folder),
            "recipe": "early_fusion",
            "params": {"text_weight": 0.7, "batch_size": 2},
            "requires": ["transformers", "torch"],
        },
        replace=True,
    )
    yield kind, folder, name
    registry.unregister(name)


def _direct(folder, kind):
    """The oracle: the saved model, processor and tokenizer called directly."""
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(folder).eval()
    proc = AutoImageProcessor.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)

    def img(ims):
        with torch.no_grad():
            out = model.get_image_features(pixel_values=proc(images=ims, return_tensors="pt")["pixel_values"])
            return torch.nn.functional.normalize(features_tensor(out, "img"), dim=-1).numpy()

    def txt(texts):
        if kind == "siglip":  # SigLIP: padded to the full context, no attention mask
            enc = tok(texts, padding="max_length", max_length=16, truncation=True, return_tensors="pt")
            kwargs = {"input_ids": enc["input_ids"]}
        else:
            enc = tok(texts, padding=True, truncation=True, max_length=16, return_tensors="pt")
            kwargs = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        with torch.no_grad():
            return torch.nn.functional.normalize(
                features_tensor(model.get_text_features(**kwargs), "txt"), dim=-1
            ).numpy()

    return img, txt


def test_images_and_queries_match_direct_forward(tiny, images):
    kind, folder, name = tiny
    r = registry.load_retriever(name, device="cpu")
    img_fn, txt_fn = _direct(folder, kind)
    emb = r.encode_images(images)
    np.testing.assert_allclose(emb, img_fn(images), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)

    qs = [
        ComposedQuery((images[0],), "make it a red car"),
        ComposedQuery((images[1], images[2]), "the dog of <img1> with <img2>"),
    ]
    got = r.encode_queries(qs)
    i = img_fn(images)
    refs = np.stack([i[0], (i[1] + i[2]) / np.linalg.norm(i[1] + i[2])])
    t = txt_fn(["make it a red car", "the dog of the first image with the second image"])
    expected = 0.3 * refs + 0.7 * t
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_text_padding_choice_and_spec(tiny):
    kind, folder, name = tiny
    r = registry.load_retriever(name, device="cpu")
    assert r.spec["text"]["padding"] == ("max_length" if kind == "siglip" else "longest")
    assert r.spec["architecture"] == ("SiglipModel" if kind == "siglip" else "CLIPModel")
    assert set(r.spec["weights"]["sha256"]) == {"model.safetensors"}
    json.dumps(r.spec)
    assert r.spec["preprocess"]["image_mean"] == (
        [0.5] * 3 if kind == "siglip" else [0.48145466, 0.4578275, 0.40821073]
    )


def test_batch_size_invariance(tiny, images):
    _, _, name = tiny
    r = registry.load_retriever(name, device="cpu")
    texts = ["a red car", "a blue dog on the tree", "cat"]
    np.testing.assert_allclose(r.encode_texts(texts, batch_size=1), r.encode_texts(texts, batch_size=3), atol=1e-5)
    np.testing.assert_allclose(r.encode_images(images, batch_size=1), r.encode_images(images, batch_size=3), atol=1e-5)


def test_features_tensor_accepts_tensor_and_output_objects():
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    t = torch.ones(2, 3)
    assert features_tensor(t, "x") is t
    assert features_tensor(BaseModelOutputWithPooling(pooler_output=t), "x") is t
    with pytest.raises(TypeError, match="cannot find"):
        features_tensor(object(), "get_image_features")


def test_missing_local_folder_is_clear(tmp_path):
    from cir_demo.retrievers.hf_clip import load_encoder

    with pytest.raises(FileNotFoundError, match="model folder not found"):
        load_encoder(str(tmp_path / "nope"))

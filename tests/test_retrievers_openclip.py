"""open_clip adapter on a tiny random model built here: adapter output == direct open_clip forward."""

import json

import numpy as np
import pytest

import torch
import open_clip

from PIL import Image

from cir_demo.retrievers import recipes, registry
from cir_demo.retrievers.base import ComposedQuery
from cir_demo.retrievers.openclip import preprocess_sidecar_path, read_preprocess_sidecar
from cir_demo.testing.tiny_retrievers import (
    TINY_PREPROCESS,
    build_tiny_open_clip,
    tiny_open_clip_config,
    tiny_open_clip_retriever,
)

MODEL = "cir-demo-tiny-clip"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", autouse=True)
def _forget_tiny_configs():
    yield  # leave the process-wide registry as we found it
    for row in registry.list_retrievers():
        if row["name"].startswith("tiny-clip-"):
            registry.unregister(row["name"])


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_open_clip")
    build_tiny_open_clip(d, seed=0)
    return d


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    sizes = [(40, 50), (32, 32), (64, 48), (20, 70), (33, 33)]
    out = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in sizes]
    out.append(Image.fromarray(rng.integers(0, 255, (30, 30), dtype=np.uint8), mode="L"))  # grey: converted to RGB
    return out


@pytest.fixture(scope="module")
def direct(weights_dir):
    """The oracle: open_clip's own model, transform and tokenizer, used directly."""
    weights = weights_dir / f"{MODEL}-seed0.safetensors"
    model = open_clip.create_model(MODEL, pretrained=str(weights)).eval()
    transform = open_clip.image_transform(
        32,
        is_train=False,
        mean=TINY_PREPROCESS["mean"],
        std=TINY_PREPROCESS["std"],
        interpolation="bicubic",
        resize_mode="shortest",
    )
    tokenizer = open_clip.get_tokenizer(MODEL)

    def img(ims):
        with torch.no_grad():
            x = torch.stack([transform(i.convert("RGB")) for i in ims])
            return torch.nn.functional.normalize(model.encode_image(x), dim=-1).numpy()

    def txt(texts):
        with torch.no_grad():
            return torch.nn.functional.normalize(model.encode_text(tokenizer(texts)), dim=-1).numpy()

    return img, txt


def test_images_match_direct_forward_and_are_normalised(weights_dir, images, direct):
    r = tiny_open_clip_retriever(weights_dir, "image_only")
    emb = r.encode_images(images)
    assert emb.dtype == np.float32 and emb.shape == (len(images), r.dim) and r.dim == 16
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(emb, direct[0](images), atol=1e-5)


def test_batch_size_does_not_change_results(weights_dir, images):
    r = tiny_open_clip_retriever(weights_dir, "early_fusion")
    np.testing.assert_allclose(r.encode_images(images, batch_size=1), r.encode_images(images, batch_size=4), atol=1e-5)
    qs = [ComposedQuery((images[i],), t) for i, t in enumerate(["a red car", "make it blue", "the dog on a tree"])]
    np.testing.assert_allclose(r.encode_queries(qs, batch_size=1), r.encode_queries(qs, batch_size=3), atol=1e-5)


def test_early_fusion_queries_match_direct_recipe(weights_dir, images, direct):
    img_fn, txt_fn = direct
    r = tiny_open_clip_retriever(weights_dir, "early_fusion", text_weight=0.8)
    qs = [
        ComposedQuery((images[0],), "make it a red car", "q1"),
        ComposedQuery((images[1], images[2]), "put the dog from <img1> in <img2>", "q2"),
    ]
    got = r.encode_queries(qs)
    i0 = img_fn([images[0]])[0]
    i12 = img_fn([images[1], images[2]])
    mean12 = (i12[0] + i12[1]) / np.linalg.norm(i12[0] + i12[1])  # normalised mean of two unit vectors
    t = txt_fn(["make it a red car", "put the dog from the first image in the second image"])
    expected = np.stack([0.2 * i0 + 0.8 * t[0], 0.2 * mean12 + 0.8 * t[1]])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_two_image_query_is_normalised_mean_for_image_only(weights_dir, images, direct):
    r = tiny_open_clip_retriever(weights_dir, "image_only")
    got = r.encode_queries([ComposedQuery((images[3], images[4]), "anything")])
    e = direct[0]([images[3], images[4]])
    np.testing.assert_allclose(got[0], (e[0] + e[1]) / np.linalg.norm(e[0] + e[1]), atol=1e-5)


def test_slerp_and_text_only_match_direct(weights_dir, images, direct):
    img_fn, txt_fn = direct
    q = [ComposedQuery((images[0],), "a green tree")]
    slerp = tiny_open_clip_retriever(weights_dir, "slerp", t=0.3).encode_queries(q)
    np.testing.assert_allclose(slerp, recipes.slerp(img_fn([images[0]]), txt_fn(["a green tree"]), 0.3), atol=1e-5)
    text = tiny_open_clip_retriever(weights_dir, "text_only").encode_queries(q)
    np.testing.assert_allclose(text, txt_fn(["a green tree"]), atol=1e-5)


def test_spec_records_weights_preprocess_and_is_stable(weights_dir):
    r1 = tiny_open_clip_retriever(weights_dir, "early_fusion")
    r2 = tiny_open_clip_retriever(weights_dir, "early_fusion")
    spec = r1.spec
    json.dumps(spec)  # JSON-serialisable
    assert spec["family"] == "open_clip" and spec["model"] == MODEL
    assert len(spec["weights"]["sha256"]) == 64
    assert spec["preprocess"]["mean"] == TINY_PREPROCESS["mean"] and spec["preprocess"]["size"] == 32
    assert spec["recipe"] == "early_fusion" and spec["params"] == {"text_weight": 0.8}
    assert "open_clip" in spec["versions"]
    assert r1.spec_hash() == r2.spec_hash()
    r3 = tiny_open_clip_retriever(weights_dir, "early_fusion", text_weight=0.5)
    assert r3.spec_hash() != r1.spec_hash()


def test_pt_weights_load_too(tmp_path, images):
    weights = build_tiny_open_clip(tmp_path, seed=1, suffix=".pt")
    registry.register_config(tiny_open_clip_config(weights, "tiny-pt-test", "image_only"), replace=True)
    r = registry.load_retriever("tiny-pt-test", device="cpu")
    assert r.encode_images(images[:2]).shape == (2, 16)
    registry.unregister("tiny-pt-test")


def test_sidecar_pairing_errors(tmp_path):
    weights = build_tiny_open_clip(tmp_path, seed=2)
    from cir_demo.utils.io import sha256_file

    digest = sha256_file(weights)
    assert read_preprocess_sidecar(weights, MODEL, digest)["size"] == 32
    with pytest.raises(ValueError, match="field 'model'"):
        read_preprocess_sidecar(weights, "some-other-arch", digest)
    with pytest.raises(ValueError, match="weights_sha256"):
        read_preprocess_sidecar(weights, MODEL, "0" * 64)
    sidecar = preprocess_sidecar_path(weights)
    meta = json.loads(sidecar.read_text())
    meta["preprocess"]["colour"] = 1
    sidecar.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="unknown preprocess keys"):
        read_preprocess_sidecar(weights, MODEL, digest)
    sidecar.unlink()
    with pytest.raises(FileNotFoundError, match="sidecar"):
        read_preprocess_sidecar(weights, MODEL, digest)


def test_changed_weights_refused_at_load(tmp_path):
    weights = build_tiny_open_clip(tmp_path, seed=3)
    sidecar = preprocess_sidecar_path(weights)
    meta = json.loads(sidecar.read_text())
    build_tiny_open_clip(tmp_path, seed=4)  # different weights ...
    (tmp_path / f"{MODEL}-seed4.safetensors").replace(weights)  # ... moved over the first file
    sidecar.write_text(json.dumps(meta))
    registry.register_config(tiny_open_clip_config(weights, "tiny-tampered", "image_only"), replace=True)
    with pytest.raises(ValueError, match="weights changed without their preprocessing"):
        registry.load_retriever("tiny-tampered", device="cpu")
    registry.unregister("tiny-tampered")


def test_custom_config_name_clash_with_builtin_is_refused(tmp_path):
    from cir_demo.retrievers.openclip import register_model_config
    from cir_demo.testing.tiny_retrievers import TINY_OPEN_CLIP_CONFIG

    with pytest.raises(ValueError, match="already registered with a different config"):
        register_model_config("ViT-B-32", TINY_OPEN_CLIP_CONFIG)
    register_model_config(MODEL, TINY_OPEN_CLIP_CONFIG)  # same config again: fine


def test_registering_a_config_leaves_no_file_behind(tmp_path, monkeypatch):
    """open_clip parses a config file when it is added: the file is removed before registering returns, so
    a killed process leaves nothing in the temporary folder, and the config stays known after open_clip
    rescans its config paths (the next registration)."""
    import copy
    import tempfile

    import open_clip

    from cir_demo.retrievers.openclip import register_model_config
    from cir_demo.testing.tiny_retrievers import TINY_OPEN_CLIP_CONFIG

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    wider = copy.deepcopy(TINY_OPEN_CLIP_CONFIG)
    wider["embed_dim"] = TINY_OPEN_CLIP_CONFIG["embed_dim"] * 2
    register_model_config("tiny-registered-then-gone", TINY_OPEN_CLIP_CONFIG)
    register_model_config("tiny-registered-second", wider)  # rescans every path added so far
    assert list(tmp_path.iterdir()) == []
    assert open_clip.get_model_config("tiny-registered-then-gone") == TINY_OPEN_CLIP_CONFIG
    assert open_clip.get_model_config("tiny-registered-second")["embed_dim"] == wider["embed_dim"]
    model = open_clip.create_model("tiny-registered-then-gone")
    assert model.visual.output_dim == TINY_OPEN_CLIP_CONFIG["embed_dim"]


def test_unknown_pretrained_tag_suggests_known_tags():
    from cir_demo.retrievers.openclip import load_encoder
    from cir_demo.utils.names import UnknownNameError

    with pytest.raises(UnknownNameError, match="metaclip2_worldwide"):
        load_encoder("ViT-H-14-worldwide-quickgelu", "metaclip2_worldwid")


def test_empty_inputs_give_empty_arrays(weights_dir):
    r = tiny_open_clip_retriever(weights_dir, "early_fusion")
    assert r.encode_images([]).shape == (0, 16)
    assert r.encode_queries([]).shape == (0, 16)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_fp16_close_to_cpu_fp32(weights_dir, images):
    cpu = tiny_open_clip_retriever(weights_dir, "early_fusion")
    registry.register_config(
        {**registry.get_config(cpu.name), "name": "tiny-cuda-fp16", "precision": "fp16"}, replace=True
    )
    gpu = registry.load_retriever("tiny-cuda-fp16", device="cuda")
    assert gpu.spec["precision"] == "fp16" and cpu.spec["precision"] == "fp32"
    np.testing.assert_allclose(gpu.encode_images(images), cpu.encode_images(images), atol=2e-2)
    registry.unregister("tiny-cuda-fp16")


def test_recipes_of_one_encoder_share_text_embeddings_and_others_do_not(weights_dir, direct):
    """Cached against uncached: a second recipe of the same weights reads the memo (no text forward
    for texts seen before) and gets the direct forward's embeddings; other weights never read them."""
    texts = ["memo: a blue mug", "memo: the dog from the first image", "memo: a blue mug"]
    fusion = tiny_open_clip_retriever(weights_dir, "early_fusion")
    slerp = tiny_open_clip_retriever(weights_dir, "slerp", t=0.4)
    other = tiny_open_clip_retriever(weights_dir, "text_only", seed=1)
    calls = []
    for r in (fusion, slerp, other):
        forward = r.encoder.encode_text_batch
        r.encoder.encode_text_batch = lambda batch, forward=forward, r=r: (
            calls.append((r.name, list(batch))) or forward(batch)
        )
    a = fusion.encode_texts(texts)
    b = slerp.encode_texts(texts[:2] + ["memo: a new one"])
    c = other.encode_texts(texts[:1])
    np.testing.assert_allclose(a, direct[1](texts), atol=1e-5)
    np.testing.assert_allclose(b, direct[1](texts[:2] + ["memo: a new one"]), atol=1e-5)
    assert calls[0] == (fusion.name, texts[:2])  # each text once
    assert calls[1] == (slerp.name, ["memo: a new one"])  # the shared texts came from the memo
    assert calls[2] == (other.name, texts[:1])  # other weights: computed, not read from the memo
    assert not np.allclose(c[0], a[0], atol=1e-3)


def test_a_batch_key_hashes_each_image_object_once_and_equals_the_key_of_every_image_hashed(images, monkeypatch):
    """Oracle: the key of a batch whose paraphrases share image objects equals the one built by hashing every
    entry (a copy with the same pixels is a different object: hashed itself, marked as another entry)."""
    from cir_demo.retrievers import dual_encoder

    batch = [images[0], images[1], images[0], images[0], images[0].copy(), images[1], images[2]]
    naive = ("tower", 64, tuple(dual_encoder._pixels_digest(img) for img in batch), (0, 1, 0, 0, 2, 1, 3))
    hashed, digest = [], dual_encoder._pixels_digest
    monkeypatch.setattr(dual_encoder, "_pixels_digest", lambda img: hashed.append(id(img)) or digest(img))
    assert dual_encoder.reference_batch_key("tower", 64, batch) == naive
    assert len(hashed) == 4 and naive[2][0] == naive[2][4]
    assert dual_encoder.reference_batch_key("tower", 64, [images[0], "not an image"]) is None


def test_recipes_of_one_tower_share_reference_batches_bit_for_bit_and_only_whole_batches(
    weights_dir, images, monkeypatch
):
    """Memo against no memo: a second recipe of the same weights encoding the very same reference batch reads
    it (no image forward) and gets exactly the rows a fresh forward gives; a different batch (a subset, or the
    same pixels in another batch size) is encoded afresh; other weights never read it."""
    from cir_demo.retrievers import dual_encoder
    from cir_demo.utils.lru import LRU

    monkeypatch.setattr(dual_encoder, "REFERENCE_MEMO", LRU(16))
    image_only = tiny_open_clip_retriever(weights_dir, "image_only")
    fusion = tiny_open_clip_retriever(weights_dir, "early_fusion")
    other = tiny_open_clip_retriever(weights_dir, "image_only", seed=1)
    calls = []
    for r in (image_only, fusion, other):
        forward = r.encoder.encode_image_batch
        monkeypatch.setattr(
            r.encoder,
            "encode_image_batch",
            lambda batch, forward=forward, r=r: calls.append((r.name, len(batch))) or forward(batch),
        )
    queries = [
        ComposedQuery((images[0],), "a", reference_ids=("r0",)),
        ComposedQuery((images[1], images[2]), "b", reference_ids=("r1", "r2")),
        ComposedQuery((images[0],), "c", reference_ids=("r0",)),
    ]  # a paraphrase: the same image object
    first = image_only.reference_embeddings(queries)
    assert calls == [(image_only.name, 3)]  # the repeated image once
    shared = fusion.reference_embeddings(queries)
    assert calls == [(image_only.name, 3)]  # the very same batch: read, not encoded
    monkeypatch.setattr(dual_encoder, "REFERENCE_MEMO", LRU(16))
    fresh = fusion.reference_embeddings(queries)  # the oracle: the same batch encoded again
    assert np.array_equal(shared, fresh) and np.array_equal(first, fresh)
    fusion.reference_embeddings(queries[:2])
    fusion.reference_embeddings(queries, batch_size=1)
    other.reference_embeddings(queries)
    assert calls[-6:] == [
        (fusion.name, 3),
        (fusion.name, 3),
        (fusion.name, 1),
        (fusion.name, 1),
        (fusion.name, 1),
        (other.name, 3),
    ]
    # texts the same way: the batch of each text once, shared by the encoder's retrievers (world-CIR's too)
    text_calls = []
    for r in (image_only, fusion):
        forward = r.encoder.encode_text_batch
        monkeypatch.setattr(
            r.encoder,
            "encode_text_batch",
            lambda batch, forward=forward: text_calls.append(list(batch)) or forward(batch),
        )
    a = image_only.encode_text_batches(["memo2: x", "memo2: y", "memo2: x"])
    b = fusion.encode_text_batches(["memo2: x", "memo2: y"])
    assert text_calls == [["memo2: x", "memo2: y"]]
    assert np.array_equal(a[:2], b) and np.array_equal(a[2], a[0])

"""The renderer: deterministic bytes, sizes, and that attributes actually change the picture."""

import random

import numpy as np
import pytest

from cir_demo.world import attributes as A
from cir_demo.world.render import RENDER_SIZE, render_scene
from cir_demo.world.scene import sample_scene


def _scenes(n, seed=0, **fixed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = sample_scene(rng, **fixed)
        out.append(s)
    return out


def test_same_scene_same_bytes():
    for s in _scenes(12):
        a = render_scene(s).tobytes()
        b = render_scene(s).tobytes()
        assert a == b


def test_every_value_of_every_attribute_renders():
    rng = random.Random(1)
    base_by_domain = {d: sample_scene(rng, domain=d) for d in A.DOMAINS}
    for t in A.TYPES:
        base = sample_scene(rng, type_name=t)
        for attr in ("color", "pattern", "material", "shape"):
            for v in A.ALLOWED[t][attr + "s"] if attr != "color" else A.COLORS:
                img = render_scene(base.replace(**{attr: v}))
                assert img.size == (RENDER_SIZE, RENDER_SIZE) and img.mode == "RGB"
    person = base_by_domain["fashion"]
    for attr in ("pose", "view", "style", "place", "time", "weather", "hair"):
        for v in A.CATEGORICAL[attr]:
            if v == "none" and attr in ("pose", "hair"):
                continue
            render_scene(person.replace(**{attr: v}))
    for n in A.COUNTS:
        for sec in A.SECONDARIES:
            for d, base in base_by_domain.items():
                rel = "none" if sec == "none" else "left"
                render_scene(base.replace(count=n, secondary=sec, relation=rel))


@pytest.mark.parametrize(
    "attr,values",
    [
        ("color", ("red", "blue")),
        ("pattern", ("plain", "striped")),
        ("material", ("matte", "metallic")),
        ("style", ("photo", "sketch")),
        ("time", ("day", "night")),
        ("weather", ("clear", "snowy")),
        ("place", ("beach", "city")),
        ("view", ("wide", "close-up")),
        ("count", (1, 3)),
        ("pose", ("standing", "waving")),
        ("hat", (False, True)),
        ("secondary", ("none", "cat")),
        ("skin_tone", (1, 10)),
    ],
)
def test_changing_an_attribute_changes_the_image(attr, values):
    s = _scenes(1, seed=7, domain="fashion")[0].replace(secondary="none", relation="none")
    a = s.replace(**{attr: values[0]})
    b = s.replace(**{attr: values[1]})
    if attr == "secondary":
        b = b.replace(relation="left")
    diff = np.abs(np.asarray(render_scene(a), float) - np.asarray(render_scene(b), float)).mean()
    assert diff > 0.5, f"{attr}: {values} look the same (mean abs diff {diff:.2f})"


def test_relation_mirrors_the_secondary_object():
    s = _scenes(1, seed=3, domain="home")[0].replace(count=1, secondary="plant", view="wide", place="room")
    left = np.asarray(render_scene(s.replace(relation="left")), float)
    right = np.asarray(render_scene(s.replace(relation="right")), float)

    # the plant's green shows up on its own side
    def green(img, half):
        part = img[:, : RENDER_SIZE // 2] if half == "left" else img[:, RENDER_SIZE // 2 :]
        return ((part[..., 1] > part[..., 0] + 40) & (part[..., 1] > part[..., 2] + 40)).sum()

    assert green(left, "left") > green(left, "right")
    assert green(right, "right") > green(right, "left")


def test_render_size_and_errors():
    s = _scenes(1)[0]
    assert render_scene(s, 224).size == (224, 224)
    with pytest.raises(ValueError, match="render size"):
        render_scene(s, 8)


def test_rendered_images_are_shared_by_content_never_across_worlds(tmp_path):
    """`render_image` keeps renders by the world's content checksum: a copy of a world in another folder
    gets the same pixels (from the cache), a world of another seed its own, for the very same image id.
    Oracle: `render_scene` of each world's own scene."""
    import shutil

    from cir_demo.world.loader import open_world, render_image

    a = open_world(tmp_path / "a", size="tiny", seed=0, progress=False)
    shutil.copytree(a.root, tmp_path / "copy")
    copy = open_world(tmp_path / "copy", size="tiny", seed=0, progress=False)
    other = open_world(tmp_path / "b", size="tiny", seed=1, progress=False)
    image_id = "w-te-000000"  # the first corpus image: in the other seed's world another scene
    assert copy.root != a.root and other.manifest["checksum"] != a.manifest["checksum"]
    assert other.scene(image_id) != a.scene(image_id)
    for world in (a, copy, other, a):
        got = np.asarray(render_image(image_id, world=world))
        assert np.array_equal(got, np.asarray(render_scene(world.scene(image_id), RENDER_SIZE))), world.root
    assert not np.array_equal(
        np.asarray(render_image(image_id, world=a)), np.asarray(render_image(image_id, world=other))
    )

"""`orch bisect --images` without a registry: each step is its image pinned to the digest
recorded once (never a tag to resolve again), named by an axis of its own in place of the
axis that chose the base's image; a list that cannot be bisected is refused before anything
is asked; the table names images."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.app.bisect import pinned_images
from orchestrator.cell import BenchSpec, Cell, ServerSpec
from orchestrator.config.host import Group, Host, Inventory
from orchestrator.container_pin import ContainerPin
from orchestrator.errors import InputError
from orchestrator.execute.bisect.render import render_bisect
from orchestrator.execute.bisect.run import Bisection, BisectSetup, pinned_image

TAG = "127.0.0.1:5000/orch/sim:v1"
IMAGES: list[dict[str, Any]] = [
    {"image": TAG, "digest": "sha256:" + "1" * 64, "resolved_by": "host h"},
    {"image": "127.0.0.1:5000/orch/sim:v2", "digest": "sha256:" + "2" * 64, "resolved_by": "h"},
    {"image": "127.0.0.1:5000/orch/sim@sha256:" + "3" * 64, "digest": "sha256:" + "3" * 64},
]
HOST = Host(name="h", vars={}, groups=(), connection="local")
INVENTORY = Inventory(hosts={"h": HOST}, groups={"all": Group("all", hosts=("h",))})


def _base(container: bool = True) -> Cell:
    pin = ContainerPin(image=TAG, tls_verify=False) if container else None
    return Cell(
        id="base",
        playbook="p",
        host="h",
        axes={"image": TAG, "conc": 2},
        server=ServerSpec(argv=("serve",), container=pin),
        bench=BenchSpec(argv=("bench",)),
    )


def _bisection() -> Bisection:
    setup = BisectSetup(
        base=_base(),
        host=HOST,
        inventory=INVENTORY,
        good=TAG,
        bad=IMAGES[-1]["image"],
        metric="x",
        results_dir=Path("results"),
        playbook_name="p",
        playbook_files=(),
        playbook_dir=Path(),
        argv=(),
        images=IMAGES,
        image_axes=frozenset({"image"}),
    )
    return Bisection(setup)


def test_each_step_runs_its_image_by_the_digest_pinned_once() -> None:
    job = _bisection()
    steps = [job._step_cell(pinned_image(i), 3, 1) for i in IMAGES]
    for step, image in zip(steps, IMAGES, strict=True):
        assert step.server is not None and step.server.container is not None
        assert step.server.container.digest == image["digest"]
        assert step.server.container.image == image["image"]
        assert step.axes == {"conc": 2, "bisect_image": image["image"], "bisect_run": 1}
        assert step.repo is None  # the commit stays the cell's own
    assert len({s.id for s in steps}) == 3
    assert job._step_cell(pinned_image(IMAGES[1]), 3, 1).id == steps[1].id  # stable
    assert job._step_cell(pinned_image(IMAGES[1]), 3, 2).id != steps[1].id  # a second run


def test_a_list_that_cannot_be_bisected_is_refused_before_any_registry_is_asked() -> None:
    with pytest.raises(InputError, match="2 image"):
        pinned_images(_base(), INVENTORY, [TAG, TAG])
    with pytest.raises(InputError, match="1 image"):
        pinned_images(_base(), INVENTORY, [TAG])
    with pytest.raises(InputError, match="runs in a container"):
        pinned_images(_base(container=False), INVENTORY, [TAG, IMAGES[1]["image"]])


def test_the_table_names_each_image_with_its_short_digest() -> None:
    points = [pinned_image(i) for i in IMAGES]
    result = {
        "message": f"{points[1]} is the first bad image",
        "points": [
            {"index": i, "commit": p, "verdict": v, "values": [1.0], "runs": 1}
            for i, (p, v) in enumerate(zip(points, ("good", "bad", "bad"), strict=True))
        ],
        "good_mean": 1.0,
        "bad_mean": 0.8,
        "noise": 0.01,
        "cell_runs": 3,
    }
    text = render_bisect({"images": IMAGES, "commits": points, "metric": "x", "result": result})
    assert "127.0.0.1:5000/orch/sim:v2 (sha256:222222222222)" in text
    assert "127.0.0.1:5000/orch/sim (sha256:333333333333)" in text
    assert "3 images tested of 3" in text
    assert any(line.split()[:2] == ["#", "image"] for line in text.splitlines())


def test_two_references_to_one_digest_are_refused_naming_both() -> None:
    # a tag and the same image by its digest: pinned as written, no registry asked
    same = "127.0.0.1:5000/orch/sim-copy@sha256:" + "3" * 64
    with pytest.raises(InputError, match="names one image twice") as caught:
        pinned_images(
            _base(), INVENTORY, [IMAGES[2]["image"], "127.0.0.1:5000/a@sha256:" + "4" * 64, same]
        )
    assert caught.value.key_path == "--images"
    assert IMAGES[2]["image"] in caught.value.message and same in caught.value.message
    # different digests pass (written with digests: nothing is asked)
    out = pinned_images(_base(), INVENTORY, [IMAGES[2]["image"], same.replace("3", "5")])
    assert [i["digest"] for i in out] == ["sha256:" + "3" * 64, "sha256:" + "5" * 64]

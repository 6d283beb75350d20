"""The server's image as an investigation factor: GOOD and BAD ran different images, and BAD
with GOOD's image runs GOOD's recorded digest, written into the reference so nothing resolves
the tag again (a tag moved since would otherwise bring back another image)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.analyze.investigate.factors import declared_factors, swapped
from orchestrator.app.plan import load_plan
from orchestrator.cell import Cell
from orchestrator.runner.container import spec_of

ROOT = Path(__file__).resolve().parents[2]
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


@pytest.fixture(scope="module")
def cell() -> dict[str, Any]:
    """One of the demo's cells as a bundle records it."""
    plan = load_plan(ROOT / "playbooks" / "demo.yml", [], ["sim_repo=/srv/sim-repo"])
    return plan.cells[0].model_dump(mode="json")


def _in_image(cell: dict[str, Any], image: str, digest: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {"image": image, "tls_verify": False, "network": "host"}
    if digest:
        container.update(digest=digest, resolved_at=1.0, resolved_by="host h")
    return {**cell, "server": {**cell["server"], "container": container}}


def test_an_image_change_is_the_first_factor_and_is_swapped_back_by_its_recorded_digest(
    cell: dict[str, Any],
) -> None:
    good = _in_image(cell, "127.0.0.1:5000/orch/sim:v1", D1)
    bad = _in_image(cell, "127.0.0.1:5000/orch/sim:v2", D2)
    factors = declared_factors(good, bad)
    assert [f.label for f in factors] == ["image"]
    (image,) = factors
    assert image.testable and image.good == f"127.0.0.1:5000/orch/sim:v1@{D1}"
    assert image.shown(image.good) == "127.0.0.1:5000/orch/sim:v1 (sha256:111111111111)"
    data = swapped(bad, [image])
    pin = data["server"]["container"]
    assert pin["image"] == f"127.0.0.1:5000/orch/sim:v1@{D1}" and pin["digest"] == D1
    assert pin["network"] == "host"  # BAD's other container options kept
    experiment = Cell.model_validate(data)
    assert experiment.id != Cell.model_validate(bad).id
    # the runner runs it by GOOD's digest, and never asks the registry what the tag names now
    spec = spec_of(experiment.model_dump(mode="json")["server"]["container"])
    assert spec.image.digest == D1 and spec.image.run_ref().endswith(f"@{D1}")
    assert declared_factors(good, data) == []  # nothing left to swap


def test_two_tags_of_one_digest_are_one_image(cell: dict[str, Any]) -> None:
    good = _in_image(cell, "127.0.0.1:5000/orch/sim:v1", D1)
    bad = _in_image(cell, "127.0.0.1:5000/orch/sim:latest", D1)
    assert declared_factors(good, bad) == []


def test_an_image_that_cannot_be_set_back_says_why(cell: dict[str, Any]) -> None:
    bad = _in_image(cell, "127.0.0.1:5000/orch/sim:v2", D2)
    (host,) = declared_factors(cell, bad)
    assert not host.testable and host.why_not == "only one side runs its server in a container"
    unpinned = _in_image(cell, "127.0.0.1:5000/orch/sim:v1", None)
    (tag,) = declared_factors(unpinned, bad)
    assert not tag.testable and tag.why_not == "GOOD's record has no digest for its image"
    with pytest.raises(ValueError, match="image cannot be swapped"):
        swapped(bad, [tag])

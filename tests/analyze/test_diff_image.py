"""`orch diff` of two cells whose servers ran in container images: a different image is named
first (before a changed commit), with the packages that differ inside it; the same image
shows no image section at all in the differences."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyze_fixtures import base_cell, write_cell

from orchestrator.analyze.diff.cells import diff_cells
from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import CellEvidence

V1 = "sha256:" + "ab" * 32
V2 = "sha256:" + "cd" * 32
FREEZE = ["foo==1.0", "numpy==2.3.5", "torch==2.13.0+cpu", "vllm==0.32.0"]


def _record(tag: str, digest: str, freeze: list[str] | None) -> dict[str, Any]:
    inside: dict[str, Any] = {"python": "3.11.2", "versions": {"torch": "2.13.0+cpu"}}
    if freeze is None:
        inside = {"error": "podman exec x python3 failed (rc 127): no python3"}
    else:
        inside["freeze"] = freeze
    return {
        "runtime": "podman",
        "runtime_version": "4.3.1",
        "image": f"localhost:5000/orch/sim:{tag}",
        "digest": digest,
        "labels": {"org.opencontainers.image.version": tag},
        "inside": inside,
    }


def _cell(root: Path, record: dict[str, Any] | None, sha: str = "a" * 40) -> CellEvidence:
    path = write_cell(root, repo={"sha": sha, "requested": "main"})
    if record is not None:
        server = json.loads((path / "server.json").read_text())
        server["container"] = record
        (path / "server.json").write_text(json.dumps(server))
    return CellEvidence.load(path)


def test_a_changed_image_is_named_first_with_the_packages_inside(tmp_path: Path) -> None:
    newer = [p.replace("foo==1.0", "foo==1.1") for p in FREEZE] + ["bar==2.0"]
    a = _cell(tmp_path / "a", _record("v1", V1, FREEZE))
    b = _cell(tmp_path / "b", _record("v2", V2, newer), sha="b" * 40)
    diff = diff_cells(a, b)
    assert [s.name for s in diff.differing][:2] == ["image", "code"]  # before the commit
    text = render_diff(diff)
    lines = text.splitlines()
    headline = (
        "image: localhost:5000/orch/sim:v1 (sha256:abababababab) -> "
        "localhost:5000/orch/sim:v2 (sha256:cdcdcdcdcdcd); "
        "packages inside: bar (none) -> 2.0 (added), foo 1.0 -> 1.1"
    )
    assert lines[2] == headline, text
    assert "  label org.opencontainers.image.version: v1 -> v2" in lines
    assert "  packages inside that differ: 2" in lines
    assert text.index("[image]") < text.index("[code]")


def test_the_same_image_is_no_difference(tmp_path: Path) -> None:
    a = _cell(tmp_path / "a", _record("v1", V1, FREEZE))
    b = _cell(tmp_path / "b", _record("v1", V1, FREEZE))
    diff = diff_cells(a, b)
    assert "image" not in [s.name for s in diff.differing]
    assert "image" in diff.unchanged
    assert not render_diff(diff).startswith("image:")


def test_a_read_that_failed_inside_is_said_not_compared(tmp_path: Path) -> None:
    a = _cell(tmp_path / "a", _record("v1", V1, FREEZE))
    b = _cell(tmp_path / "b", _record("v2", V2, None))
    (image,) = [s for s in diff_cells(a, b).sections if s.name == "image"]
    assert image.notes == [
        "packages inside not compared: none read for B "
        "(podman exec x python3 failed (rc 127): no python3)"
    ]


def test_cells_on_the_host_have_no_image_section(tmp_path: Path) -> None:
    diff = diff_cells(_cell(tmp_path / "a", None), _cell(tmp_path / "b", None))
    assert "image" not in [s.name for s in diff.sections]
    assert "image" not in diff.unchanged
    cell = base_cell()
    assert "container" not in (cell["server"] or {})


def test_the_serving_stack_is_the_one_inside_the_image(tmp_path: Path) -> None:
    a = _cell(tmp_path / "a", _record("v1", V1, FREEZE))
    b = _cell(tmp_path / "b", _record("v2", V2, FREEZE))
    assert diff_cells(a, b).stack == {
        "vllm": ["0.32.0", "0.32.0"],
        "torch": ["2.13.0+cpu", "2.13.0+cpu"],
    }


def test_a_server_moved_into_an_image_is_named_first(tmp_path: Path) -> None:
    diff = diff_cells(_cell(tmp_path / "a", None), _cell(tmp_path / "b", _record("v1", V1, FREEZE)))
    assert diff.differing[0].name == "image"
    assert render_diff(diff).splitlines()[2] == (
        "image: (none: on the host) -> localhost:5000/orch/sim:v1 (sha256:abababababab)"
    )

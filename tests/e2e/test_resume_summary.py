"""`orch apply --resume` answers for the whole run: its summary lists the cells an earlier
invocation finished, and its exit status counts them (a failed cell is not rerun, so a resume
with nothing left to do still exits 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

BENCH = "import sys; print('x 1.0'); sys.exit(int(sys.argv[1]) == 2)"  # cell a=2 fails


def _orch(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp / "home")}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_resume_lists_and_counts_the_cells_finished_before(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    playbook = {
        "name": "resume-summary",
        "matrix": {"a": [1, 2]},
        "bench": {
            "command": ["{{ orch_python }}", "-c", BENCH, "{{ matrix.a }}"],
            "metrics": {"x": r"x ([0-9.]+)"},
        },
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    first = _orch(tmp_path, "apply", "playbook.yml", "--results", "results")
    assert first.returncode == 1, first.stdout + first.stderr
    (run,) = (tmp_path / "results").iterdir()
    cells = json.loads((run / "run.json").read_text())["cells"]
    assert sorted(c["status"] for c in cells.values()) == ["failed", "passed"], cells

    again = _orch(tmp_path, "apply", "playbook.yml", "--results", "results", "--resume", str(run))
    assert again.returncode == 1, again.stdout + again.stderr  # the run still holds a failure
    rows = [line for line in again.stdout.splitlines() if any(cid in line for cid in cells)]
    assert len(rows) == 2, again.stdout
    assert all("(earlier)" in row for row in rows), rows
    assert json.loads((run / "run.json").read_text())["status"] == "failed"

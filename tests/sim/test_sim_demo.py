"""playbooks/demo.yml stays a valid 8-cell plan on localhost with the simulator's launchers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def orch(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from orchestrator.cli import main; sys.argv[0] = 'orch'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_playbook_plans_eight_cells(tmp_path: Path) -> None:
    out = orch("plan", "playbooks/demo.yml", "-e", f"sim_repo={tmp_path / 'repo'}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "8 cells on 1 host(s)" in out.stdout
    for axis_value in ("good", "bad", "tuned", "default", "eagle3-2"):
        assert axis_value in out.stdout

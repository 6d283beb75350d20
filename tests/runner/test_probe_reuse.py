"""Within one runner process, a snapshot reuses what an interpreter answered (python, torch, pip
freeze) only while that interpreter and its sys.path directories are unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.runner.probe import gather as probe


def test_answers_are_reused_until_site_packages_change(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    first = probe.snapshot(python=python, pip_freeze=False, topo=False)
    assert first["probe"]["reused"] == []
    assert first["python"]["executable"] == python
    second = probe.snapshot(python=python, pip_freeze=False, topo=False)
    assert second["probe"]["reused"] == ["python", "torch"]
    assert second["python"] == first["python"] and second["torch"] == first["torch"]
    # a package appears (what pip install does to site-packages): asked again
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "newpkg").mkdir()
    third = probe.snapshot(python=python, pip_freeze=False, topo=False)
    assert third["probe"]["reused"] == []
    # pip freeze wanted now, never taken before: taken, the rest reused
    fourth = probe.snapshot(python=python, pip_freeze=True, topo=False)
    assert "pip_freeze" not in fourth["probe"]["reused"]
    assert fourth["probe"]["reused"] == ["python", "torch"]

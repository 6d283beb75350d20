"""`orch bisect` refuses a clone of another repository at repo.dest before it measures anything.

The commit list comes from the host's clone: a fork (or an old repo.url) cloned at the same dest
would give the wrong history, and every step would then fail at the repo step. The same check
as the repo step's (`runner.pyz check-origin`) runs first, on the real CLI and a real git clone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from sim_helpers import eagle3_playbook, free_port

from orchestrator.sim.repo import init_repo

DEST = ".orch/e2e/origin-check"


def test_bisect_refuses_a_clone_of_another_repository(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    first = init_repo(tmp_path / "first", commits=4, seed=1)
    fork = init_repo(tmp_path / "fork", commits=4, seed=2)
    subprocess.run(["git", "clone", "-q", str(first.path), str(home / DEST)], check=True)
    before = (home / DEST / ".git" / "config").read_text()
    data = eagle3_playbook(fork.path, free_port(), name="origin-check", dest=DEST)
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(yaml.safe_dump(data, sort_keys=False))

    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "bisect", str(playbook), "--cell", "commit=good",
         "--good", "good", "--bad", "bad", "--results", str(tmp_path / "results")],
        cwd=tmp_path,
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: repo.dest: localhost: repo dest "), line
    assert f"is a clone of {first.path}, not of repo.url {fork.path}" in line
    assert (home / DEST / ".git" / "config").read_text() == before  # the clone is left alone
    assert not list((tmp_path / "results").glob("*/cells/*"))  # nothing was measured

"""The results history end to end on the simulator: a nightly job (`orch apply --track`, one
commit of the demo repo a night) raises the regression on the night its commit lands, prints
the command that settles it, and that command, run as printed, names the commit; `orch history`
lists the nights in order."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from sim_helpers import ROOT, free_port, orch

from orchestrator.errors import EXIT_REGRESSION
from orchestrator.sim.repo import init_repo

pytestmark = [pytest.mark.slow]


def test_a_nightly_job_raises_the_regression_on_its_night(tmp_path: Path) -> None:
    """playbooks/nightly.yml as shipped (its `track:` on), one commit a night."""
    repo = init_repo(tmp_path / "repo", commits=8, regress_at=6, seed=11)
    playbook = ROOT / "playbooks" / "nightly.yml"
    assert yaml.safe_load(playbook.read_text())["track"] == {"metric": "output_throughput"}
    results, home = tmp_path / "results", tmp_path / "home"
    common = ["-e", f"sim_repo={repo.path}", "-e", f"port={free_port()}", "--results",
              str(results)]  # fmt: skip
    codes = []
    night = None
    for sha in repo.shas[: repo.regress_at]:  # the good nights, then the first bad one
        night = orch("apply", str(playbook), "-e", f"commit={sha}", *common, cwd=tmp_path,
                     home=home)  # fmt: skip
        codes.append(night.returncode)
    assert night is not None
    assert codes[:-1] == [0] * (repo.regress_at - 1), codes
    assert codes[-1] == EXIT_REGRESSION, night.stdout + night.stderr
    assert "track: REGRESSION nightly @localhost: output_throughput" in night.stdout
    settle = re.search(r"settle it with: (orch investigate .*)", night.stdout)
    assert settle, night.stdout
    words = shlex.split(settle.group(1))
    # the last good night's cell and the first bad night's, as the history holds them
    assert all(Path(w).is_dir() for w in words[2:4])

    found = orch(*words[1:], "--results", str(results), cwd=tmp_path, home=home, timeout=400)
    assert found.returncode == 0, found.stdout + found.stderr
    assert f"the change is commit {repo.regress[:12]} '" in found.stdout

    # the history holds every night, in order; the change point needs more nights to be
    # significant (tests/cli/test_history_cli.py), the new run's own test raised it here
    shown = orch("history", "nightly", "--results", str(results), cwd=tmp_path, home=home)
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines() if "-nightly-" in line]
    assert [r[1] for r in rows] == [sha[:12] for sha in repo.shas[: repo.regress_at]]
    medians = [float(r[2]) for r in rows]
    assert medians[-1] < 0.8 * min(medians[:-1])

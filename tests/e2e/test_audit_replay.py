"""Expectations, `orch audit` and `orch replay` end to end on the real sshd test hosts.

One recorded run (module fixture): the simulated SGLang server and bench client, EAGLE-3 2-step
with tuned NCCL at the `good` and `bad` tags of an `orch sim init-repo` repository, on host1,
with `expect: {output_throughput: {min: 75}}`. Each host has the fake `nvidia-smi` in its bin dir
and its own simulator state file ($ORCH_SIM_STATE), so the snapshot sees the GPU clocks the
server runs at. Then: the expectation marks; audit on the untouched bundle (integrity, drift,
rerun); a tampered copy; HEAD moved in host1's clone; host1's GPU clock throttled (drift, and a
rerun that no longer reproduces because the simulator's speed follows the clock); and a replay
of the good cell on host2.

The bound is 75, not the README playbook's 85: at time scale 0.05 a loaded 2-core machine reads the
94 tok/s good cell several percent low (client overheads are magnified by 1 / scale), while the
bad cell sits near 62 either way.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_helpers import eagle3_playbook, free_port
from sshhosts import SSHTestHost, SSHTestHosts

from orchestrator.sim.repo import RepoInfo, init_repo
from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import write_host_state

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

DEST = ".orch/e2e-audit/sglang-sim"
MAX_SM_CLOCK = 1980
THROTTLED_SM_CLOCK = 990  # half the clock: compute-bound steps take about twice as long


def playbook_data(repo: Path, port: int) -> dict[str, Any]:
    """good vs bad, EAGLE-3 2-step, tuned NCCL, tp 8, with an expectation on throughput."""
    data = eagle3_playbook(repo, port, name="audit-e2e", dest=DEST, repeats=6)
    data["expect"] = {"output_throughput": {"min": 75}}
    assert data["env"]["ORCH_SIM_SEED"]  # seeded: a rerun differs from the record by timing only
    return data


@dataclass
class Recorded:
    """The module's recorded run and everything needed to poke at it."""

    tmp: Path
    hosts: SSHTestHosts
    repo: RepoInfo
    inventory: Path
    results: Path
    run: Path
    apply: subprocess.CompletedProcess[str]

    def orch(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """`python -m orchestrator ARGS` to the end."""
        return subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def cell_id(self, commit: str) -> str:
        """The recorded cell at `commit` (good or bad)."""
        plan = json.loads((self.run / "plan.json").read_text())
        (cid,) = [c["id"] for c in plan["cells"] if c["axes"]["commit"] == commit]
        return str(cid)

    def host(self, name: str) -> SSHTestHost:
        """A test host by name."""
        return self.hosts.host(name)

    def clone(self, name: str) -> Path:
        """The repo clone the runner pinned on host `name`."""
        return self.host(name).home / DEST


def git(cwd: Path, *args: str) -> str:
    """git in `cwd` without the user's configuration."""
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture(scope="module")
def recorded(
    ssh_hosts: SSHTestHosts, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Recorded]:
    """The run every test of this module reads (apply exits 1: the bad cell misses min 75)."""
    tmp = tmp_path_factory.mktemp("audit")
    touched: list[Path] = []
    for host in ssh_hosts.hosts[:2]:
        smi = host.bin_dir / "nvidia-smi"
        state = host.state_file
        if not smi.exists():
            install_fake_nvidia_smi(host.bin_dir, sys.executable, state=state)
            touched.append(smi)
        if not state.exists():
            touched.append(state)
        write_host_state(state, sm_clock=MAX_SM_CLOCK, max_sm_clock=MAX_SM_CLOCK)
    try:
        repo = init_repo(tmp / "repo", commits=32, regress_at=21, seed=11)
        port = free_port()
        inventory = ssh_hosts.write_inventory(tmp / "hosts.yml")
        playbook = tmp / "playbook.yml"
        playbook.write_text(yaml.safe_dump(playbook_data(repo.path, port), sort_keys=False))
        results = tmp / "results"
        apply = subprocess.run(
            [sys.executable, "-m", "orchestrator", "apply", str(playbook), "-i", str(inventory),
             "--limit", "host1", "--results", str(results)],
            cwd=tmp, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        runs = [p for p in results.iterdir() if p.is_dir()]
        assert len(runs) == 1, apply.stdout + apply.stderr
        yield Recorded(tmp, ssh_hosts, repo, inventory, results, runs[0], apply)
    finally:
        for path in touched:
            path.unlink(missing_ok=True)
        for host in ssh_hosts.hosts[:2]:
            if host.state_file not in touched:
                write_host_state(host.state_file)  # defaults again


def test_expectations_pass_and_fail_per_cell(recorded: Recorded) -> None:
    """The good cell meets `min: 75`, the bad EAGLE-3 cell misses it: apply exits 1."""
    out = recorded.apply.stdout + recorded.apply.stderr
    assert recorded.apply.returncode == 1, out
    good, bad = recorded.cell_id("good"), recorded.cell_id("bad")
    cells = json.loads((recorded.run / "run.json").read_text())["cells"]
    assert cells[good]["status"] == "passed", cells[good]
    assert cells[bad]["status"] == "failed", cells[bad]
    assert "expectation output_throughput >= 75" in cells[bad]["reason"]
    assert cells[bad]["failed_step"] == "expect" and cells[good]["failed_step"] is None
    cell_json = json.loads((recorded.run / "cells" / bad / "cell.json").read_text())
    assert cell_json["failed_step"] == "expect" and cell_json["runner_status"] == "passed"
    assert f"{bad}" in out and " expect " in out  # the summary's `failed at` column
    for cid, ok in ((good, True), (bad, False)):
        metrics = json.loads((recorded.run / "cells" / cid / "metrics.json").read_text())
        (exp,) = metrics["expectations"]
        assert exp["metric"] == "output_throughput" and exp["ok"] is ok, exp
        assert exp["bound"] == ">= 75"

    report = recorded.orch("report", str(recorded.run))
    assert report.returncode in (0, 1), report.stderr
    rows = {line.split()[0]: line for line in report.stdout.splitlines() if line.strip()}
    assert "✓" in rows["good"] and "✗" not in rows["good"], report.stdout
    assert "✗" in rows["bad"] and "✓" not in rows["bad"], report.stdout
    # and the missed expectation, spelled out under the table
    assert f"✗ {bad} output_throughput" in report.stdout and "expected >= 75" in report.stdout


def test_replay_on_another_host(recorded: Recorded) -> None:
    """The good cell, recorded on host1, runs again on host2 from the bundle alone."""
    good = recorded.cell_id("good")
    results = recorded.tmp / "replays"
    proc = recorded.orch("replay", f"{recorded.run}/{good}", "-i", str(recorded.inventory),
                         "--limit", "host2", "--results", str(results))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (new,) = [p for p in results.iterdir() if p.is_dir()]
    doc = json.loads((new / "run.json").read_text())
    assert doc["replay_of"] == f"{recorded.run.name}/{good}"
    assert doc["status"] == "passed"
    assert doc["cells"][good] == {**doc["cells"][good], "host": "host2", "status": "passed"}
    cell = json.loads((new / "cells" / good / "cell.json").read_text())
    assert cell["cell"]["host"] == "host2"
    old_repo = json.loads((recorded.run / "cells" / good / "repo.json").read_text())
    new_repo = json.loads((new / "cells" / good / "repo.json").read_text())
    assert new_repo["sha"] == old_repo["sha"] == recorded.repo.first
    facts = json.loads((new / "hosts" / "host2" / "facts.json").read_text())
    if recorded.hosts.isolated:
        assert facts.get("hostname") == "host2"

    def median(run: Path) -> float:
        metrics = json.loads((run / "cells" / good / "metrics.json").read_text())
        return float(metrics["summary"]["output_throughput"]["median"])

    before, after = median(recorded.run), median(new)
    assert abs(after / before - 1) < 0.15, (before, after)
    print(f"replay on host2: {after:.1f} tok/s vs {before:.1f} on host1")


def test_audit_integrity_drift_and_rerun(recorded: Recorded) -> None:
    """Untouched: exit 0. Tampered copy: exit 1 naming the file. HEAD moved: code drift.
    Clock throttled: hardware drift, and a rerun that does not reproduce."""
    run, inv = str(recorded.run), str(recorded.inventory)
    res = ["--results", str(recorded.results)]

    clean = recorded.orch("audit", run, "-i", inv, *res)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "integrity: ok" in clean.stdout
    assert "drift host1: none" in clean.stdout
    assert "audit: PASSED" in clean.stdout

    # every cell again: the good one passes again, the bad one misses its bound again, with the
    # same numbers: both reproduce
    rerun = recorded.orch("audit", run, "-i", inv, "--no-drift", "--rerun",
                          "--tolerance", "10%", *res)  # fmt: skip
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "reproduction: ok" in rerun.stdout
    assert recorded.cell_id("good") in rerun.stdout
    status_rows = [line.split() for line in rerun.stdout.splitlines() if "(status)" in line]
    assert status_rows == [[recorded.cell_id("bad"), "(status)", "failed", "failed", "-", "yes"]]

    # a tampered copy of the bundle: integrity names the file
    copy_root = recorded.tmp / "tampered"
    copy = copy_root / recorded.run.name
    shutil.copytree(recorded.run, copy)
    target = copy / "cells" / recorded.cell_id("good") / "metrics.json"
    target.write_text(target.read_text().replace('"median": ', '"median": 1', 1))
    tampered = recorded.orch("audit", str(copy), "--no-drift", "--results", str(copy_root))
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr
    assert "integrity: FAILED" in tampered.stdout
    assert f"changed: cells/{recorded.cell_id('good')}/metrics.json" in tampered.stdout
    (copy / "MANIFEST.sha256").unlink()  # a finished run always wrote one: a failed check
    unsealed = recorded.orch("audit", str(copy), "--no-drift", "--results", str(copy_root))
    assert unsealed.returncode == 1, unsealed.stdout + unsealed.stderr
    assert "integrity: FAILED" in unsealed.stdout and "missing: MANIFEST.sha256" in unsealed.stdout

    # HEAD moved in host1's clone after the run: the code drifted
    clone = recorded.clone("host1")
    head = git(clone, "rev-parse", "HEAD")
    git(clone, "commit", "-q", "--allow-empty", "-m", "local hotfix")
    moved = git(clone, "rev-parse", "HEAD")
    try:
        drift = recorded.orch("audit", run, "-i", inv, *res)
    finally:
        git(clone, "checkout", "-q", head)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert "drift host1: DRIFTED" in drift.stdout
    assert moved[:12] in drift.stdout or moved in drift.stdout, drift.stdout
    assert "integrity: ok" in drift.stdout

    # the clone at the run's other commit, as a later run pinning it leaves it: not drift
    other_sha = recorded.repo.first if head != recorded.repo.first else recorded.repo.shas[-1]
    git(clone, "checkout", "-q", other_sha)
    try:
        other = recorded.orch("audit", run, "-i", inv, *res)
    finally:
        git(clone, "checkout", "-q", head)
    assert other.returncode == 0 and "drift host1: none" in other.stdout, other.stdout

    # host1's GPUs throttled to half their clock after the run
    write_host_state(
        recorded.host("host1").state_file, sm_clock=THROTTLED_SM_CLOCK, max_sm_clock=MAX_SM_CLOCK
    )
    try:
        throttled = recorded.orch("audit", run, "-i", inv, *res)
        slow = recorded.orch("audit", run, "-i", inv, "--no-drift", "--rerun", "--cells",
                             "commit=good", "--tolerance", "10%", *res)  # fmt: skip
    finally:
        write_host_state(
            recorded.host("host1").state_file, sm_clock=MAX_SM_CLOCK, max_sm_clock=MAX_SM_CLOCK
        )
    assert throttled.returncode == 1, throttled.stdout + throttled.stderr
    assert "drift host1: DRIFTED" in throttled.stdout
    assert str(THROTTLED_SM_CLOCK) in throttled.stdout, throttled.stdout
    assert moved[:12] not in throttled.stdout  # HEAD is back: only the clock differs
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "reproduction: FAILED" in slow.stdout
    assert "outside tolerance" in slow.stdout
    # half the clock is far past the tolerance: the rerun is decided (its first look is at 5)
    assert re.search(
        r"rerun decided after [56] of 6 repeats: \S+ lower than recorded", slow.stdout
    ), slow.stdout
    assert "(not judged)" in slow.stdout  # tails are shown, the verdict rests on expect:

"""`orch bisect` end to end: the real CLI, a real `orch sim init-repo` repository, the simulated
SGLang server and bench client on localhost, one one-cell run per step into one bundle.

Two full bisects over 32 commits (about 7 cell runs each), at time scale 0.05 (0.02 reads too
noisy on a loaded 2-core machine: the client's overheads are magnified by 1 / scale) and short
outputs: one with a failing setup on the search path that the search goes around, interrupted with
Ctrl-C after a few steps and resumed; one where the failing setup is the regressing commit
itself, so the honest answer is a range.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_helpers import eagle3_playbook, free_port

from orchestrator.sim.repo import RepoInfo, init_repo

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def write_playbook(path: Path, repo: Path, port: int, *, time_scale: str = "0.05") -> Path:
    """A one-cell sim playbook (tuned NCCL, EAGLE-3 2-step, tp 8) over the `good`/`bad` tags."""
    data = eagle3_playbook(
        repo,
        port,
        name="bisect-e2e",
        dest=".orch/e2e/sglang-sim",
        time_scale=time_scale,
        matrix={"commit": ["good", "bad"], "spec": ["eagle3-2"]},
    )
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Bisect:
    """One test's repo, playbook, HOME and results directory."""

    def __init__(self, tmp: Path, repo: RepoInfo) -> None:
        self.tmp = tmp
        self.repo = repo
        self.results = tmp / "results"
        self.home = tmp / "home"
        self.home.mkdir()
        self.playbook = write_playbook(tmp / "playbook.yml", repo.path, free_port())
        self.env = {**os.environ, "HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        self.env.pop("ORCH_SIM_STATE", None)

    def argv(self, *more: str) -> list[str]:
        """`orch bisect` with the policy the tests use (end repeats 3, repeats 2)."""
        return [sys.executable, "-m", "orchestrator", "bisect", str(self.playbook),
                "--cell", "spec=eagle3-2", "--good", "good", "--bad", "bad",
                "--end-repeats", "3", "--repeats", "2", "--results", str(self.results),
                *more]  # fmt: skip

    def orch(self, *argv: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """Run the CLI to the end."""
        return subprocess.run(
            list(argv),
            cwd=self.tmp,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def run_dir(self) -> Path:
        """The only run under results/."""
        runs = [p for p in self.results.iterdir() if p.is_dir()] if self.results.is_dir() else []
        assert len(runs) == 1, runs
        return runs[0]

    def cell_dirs(self) -> dict[str, Path]:
        """Recorded cell directories (hidden staging dirs excluded)."""
        cells = self.run_dir() / "cells"
        if not cells.is_dir():
            return {}
        return {d.name: d for d in cells.iterdir() if d.is_dir() and not d.name.startswith(".")}

    def doc(self) -> dict[str, Any]:
        """bisect.json."""
        data: dict[str, Any] = json.loads((self.run_dir() / "bisect.json").read_text())
        return data


def finished_cells(b: Bisect) -> dict[str, str]:
    """cell id -> status, for cells whose cell.json says they finished."""
    out = {}
    for cid, path in b.cell_dirs().items() if b.results.is_dir() else []:
        try:
            status = json.loads((path / "cell.json").read_text()).get("status")
        except (OSError, ValueError):
            continue
        if status in ("passed", "failed"):
            out[cid] = status
    return out


def check_story(stdout: str, repo: RepoInfo) -> None:
    """The first bad commit's full message and --stat, never cut."""
    assert f"{repo.regress} is the first bad commit" in stdout
    assert f"commit {repo.regress}" in stdout
    assert "Refactor EAGLE verify to share the target's attention metadata" in stdout
    # the body, whole, on its two lines
    body = (
        "Build the verify batch through the generic forward path instead of the dedicated\n"
        "    cuda-graph runner, so EAGLE and EAGLE-3 share one code path for attention metadata."
    )
    assert body in stdout
    assert "orch_sim_model.json" in stdout and "2 files changed" in stdout


def test_bisect_goes_around_failed_setup_then_resumes_after_ctrl_c(tmp_path: Path) -> None:
    """32 commits, regression at #13, setup broken at #16 (the first inner point tested).

    Ctrl-C once five steps are recorded (the good end and the bad end twice each: two server
    starts; the skipped commit); then `--resume RUN` reuses them, finishes, and names the
    regressing commit within ceil(log2 32) + 2 searched points, confirmed beside its parent;
    `--show RUN` prints the same answer from the bundle.
    """
    repo = init_repo(tmp_path / "repo", commits=32, regress_at=13, setup_fail_at=16, seed=5)
    b = Bisect(tmp_path, repo)
    log = (tmp_path / "first.log").open("w")
    started = time.monotonic()
    proc = subprocess.Popen(b.argv(), cwd=tmp_path, env=b.env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while len(finished_cells(b)) < 5 and proc.poll() is None:
            assert time.monotonic() < deadline, (tmp_path / "first.log").read_text()
            time.sleep(0.1)
        assert proc.poll() is None, (tmp_path / "first.log").read_text()
        # the sixth step is under way: its run has started (reading the five back takes a while)
        while (tmp_path / "first.log").read_text().count("] running\n") < 6:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    first_log = (tmp_path / "first.log").read_text()
    assert rc == 130, first_log  # as `orch apply` on Ctrl-C
    assert "INTERRUPTED" in first_log
    run = b.run_dir()
    # the printed command is whole and runnable as it is: the playbook, options and run path
    hint = shlex.split(first_log.split("continue with: ", 1)[1].splitlines()[0])
    assert hint[0] == "orch" and hint[-2:] == ["--resume", str(run)], hint
    assert not (run / "bisect.json").exists()
    before = finished_cells(b)
    assert len(before) >= 5, first_log
    assert list(before.values()).count("failed") == 1  # the broken setup, recorded as a cell
    stamps = {cid: (b.cell_dirs()[cid] / "cell.json").stat().st_mtime_ns for cid in before}

    resumed = b.orch(sys.executable, "-m", "orchestrator", *hint[1:])
    wall = time.monotonic() - started
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    check_story(resumed.stdout, repo)
    for cid, stamp in stamps.items():  # finished steps were read back, not run again
        assert (b.cell_dirs()[cid] / "cell.json").stat().st_mtime_ns == stamp, cid

    doc = b.doc()
    result = doc["result"]
    assert result["first_bad"] == repo.regress
    assert result["last_good"] == repo.shas[repo.regress_at - 2]
    assert result["skipped"] == [repo.setup_fail]
    measured = [p for p in result["points"] if p["verdict"] != "skip" and not p["probe"]]
    n = len(doc["commits"])
    assert n == 32
    assert len(measured) <= math.ceil(math.log2(n)) + 2, result["points"]
    assert result["confirmed"] is True and "confirmed" in resumed.stdout
    # one cell directory per cell run: nothing ran twice, the interrupted step was redone once
    cells = b.cell_dirs()
    assert len(cells) == result["cell_runs"], sorted(cells)
    ran_again = resumed.stderr.count("bisect: measuring ")
    assert ran_again == result["cell_runs"] - len(before), resumed.stderr
    statuses = {json.loads((d / "cell.json").read_text())["status"] for d in cells.values()}
    assert statuses == {"passed", "failed"}
    # The demo's -33%: the host stops each inner commit's run once the test decides (here the
    # ends' 3 repeats leave the noise loose, so one repeat does not always do)
    ends = {repo.shas[0][:12], repo.shas[-1][:12]}
    stops = [
        json.loads((d / "repeats.json").read_text())
        for d in cells.values()
        if (d / "repeats.json").exists()
    ]
    # every searched run stops on the test; the ends and the confirmation's runs take them all
    end_runs = sum(p["runs"] for p in result["points"] if p["index"] in (0, n - 1))
    paired = sum(2 * c["runs_each"] for c in result["confirmations"])
    assert len(stops) == result["cell_runs"] - end_runs - paired - 1  # the skip
    assert not any(e in d for d in cells if (cells[d] / "repeats.json").exists() for e in ends)
    assert all(s["stopped"] == "decided" for s in stops), stops
    assert any(s["ran"] == 1 for s in stops), stops
    for d in cells.values():
        if (d / "repeats.json").exists():
            ran = json.loads((d / "repeats.json").read_text())["ran"]
            assert len([p for p in (d / "bench").iterdir() if p.name.isdigit()]) == ran
    run_doc = json.loads((run / "run.json").read_text())
    assert run_doc.get("bisect") is True
    assert (run / "MANIFEST.sha256").is_file()

    shown = b.orch(sys.executable, "-m", "orchestrator", "bisect", "--show", run.name,
                   "--results", str(b.results))  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    check_story(shown.stdout, repo)
    assert shown.stdout.strip() == resumed.stdout.split("\nbundle:")[0].strip()
    print(
        f"bisect 32 commits: {len(result['points'])} points ({len(measured)} measured), "
        f"{result['cell_runs']} cell runs, {wall:.1f} s with the interruption"
    )


def test_failed_setup_at_the_regression_gives_the_honest_range(tmp_path: Path) -> None:
    """The regressing commit itself cannot be built: as `git bisect skip`, say it is one of two."""
    repo = init_repo(tmp_path / "repo", commits=32, regress_at=16, setup_fail_at=16, seed=9)
    b = Bisect(tmp_path, repo)
    started = time.monotonic()
    proc = b.orch(*b.argv())
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    regress, after = repo.shas[15], repo.shas[16]
    assert f"could be any of 2: {regress}, {after}" in proc.stdout
    assert "is the first bad commit" not in proc.stdout
    result = b.doc()["result"]
    assert result["first_bad"] is None
    assert result["last_good"] == repo.shas[14]
    assert result["skipped"] == [regress]
    measured = [p for p in result["points"] if p["verdict"] != "skip" and not p["probe"]]
    assert len(measured) <= math.ceil(math.log2(32)) + 2, result["points"]
    print(f"adjacent skip: {len(result['points'])} points, {wall:.1f} s")


def test_misspelt_metric_names_the_reported_ones_and_keeps_the_measurement(
    tmp_path: Path,
) -> None:
    """`--metric output_througput`: exit 1 after the good end, with the metrics the bench did
    report; the printed command resumes with the right name and does not measure it again."""
    repo = init_repo(tmp_path / "repo", commits=4, regress_at=3, seed=3)
    b = Bisect(tmp_path, repo)
    wrong = b.orch(*b.argv("--metric", "output_througput"))
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "Traceback" not in wrong.stderr
    error = [line for line in wrong.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1, wrong.stderr
    assert "produced no 'output_througput' values; the bench reported: " in error[0]
    assert "did you mean 'output_throughput'?" in error[0]
    assert ", n," not in error[0] and "output_throughput" in error[0]  # the repeat number is not
    hint = shlex.split(wrong.stderr.split("continue with: ", 1)[1].splitlines()[0])
    assert hint[0] == "orch" and "output_througput" not in hint, hint
    assert hint[-4:] == ["--metric", "output_throughput", "--resume", str(b.run_dir())], hint
    assert wrong.stderr.count("bisect: measuring ") == 1  # stopped after the first step

    resumed = b.orch(sys.executable, "-m", "orchestrator", *hint[1:])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # the good end's first run, read back (its second start is a new step)
    assert f"measuring {repo.shas[0][:12]} (run 1," not in resumed.stderr
    assert b.doc()["result"]["first_bad"] == repo.regress

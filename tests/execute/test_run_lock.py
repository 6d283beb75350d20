"""Issue 10 item 9: one controller per run. A `--resume` while the run's controller is alive is
refused at once (exit 2, naming the live one) and leaves the run to finish passed; a lock left by
a dead controller is taken over without a word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

# The bench says it started, then holds until the test lets it go (no timing assumed).
BENCH = (
    "import os, sys, time\n"
    "open(sys.argv[1], 'w').close()\n"
    "while not os.path.exists(sys.argv[2]):\n"
    "    time.sleep(0.05)\n"
    "print('x 1.0')\n"
)


def _env(tmp: Path) -> dict[str, str]:
    (tmp / "home").mkdir(exist_ok=True)
    return {**os.environ, "HOME": str(tmp / "home")}


def _orch(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=tmp,
        env=_env(tmp),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _playbook(tmp: Path) -> None:
    playbook = {
        "name": "run-lock",
        "bench": {
            "command": ["{{ orch_python }}", "-c", BENCH, str(tmp / "started"), str(tmp / "go")],
            "metrics": {"x": r"x ([0-9.]+)"},
        },
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp / "playbook.yml").write_text(yaml.safe_dump(playbook))


def test_a_resume_while_the_controller_lives_is_refused(tmp_path: Path) -> None:
    _playbook(tmp_path)
    apply = ["apply", "playbook.yml", "--results", "results"]
    with (tmp_path / "out").open("w") as out, (tmp_path / "err").open("w") as err:
        first = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *apply],
            cwd=tmp_path,
            env=_env(tmp_path),
            stdout=out,
            stderr=err,
        )
        try:
            deadline = time.monotonic() + 90
            while not (tmp_path / "started").exists():
                assert first.poll() is None, (tmp_path / "err").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.05)
            (run,) = (tmp_path / "results").iterdir()

            for _ in range(2):  # refused every time, and nothing recorded by the refused one
                second = _orch(tmp_path, *apply, "--resume", str(run))
                assert second.returncode == 2, second.stdout + second.stderr
                assert f"pid {first.pid} on " in second.stderr, second.stderr
                assert "in use by another orch controller" in second.stderr
                assert "since 20" in second.stderr and "Traceback" not in second.stderr
        finally:
            (tmp_path / "go").touch()
            assert first.wait(timeout=120) == 0, (tmp_path / "err").read_text()

    doc = json.loads((run / "run.json").read_text())
    assert doc["status"] == "passed", doc
    assert [c["status"] for c in doc["cells"].values()] == ["passed"]
    for cell_json in run.glob("cells/*/cell.json"):
        assert json.loads(cell_json.read_text())["status"] == "passed"

    # The controller is gone, its lock file stays behind with a dead pid: taken over silently.
    lock = run / ".controller.lock.tmp"
    assert json.loads(lock.read_text())["pid"] == first.pid
    again = _orch(tmp_path, *apply, "--resume", str(run))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "in use" not in again.stderr
    assert json.loads((run / "run.json").read_text())["status"] == "passed"
    audit = _orch(tmp_path, "audit", str(run))
    assert audit.returncode == 0, audit.stdout + audit.stderr

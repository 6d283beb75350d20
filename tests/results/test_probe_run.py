"""The probe end to end, as the runner and `runner.pyz probe` use it: a subprocess printing JSON."""

from __future__ import annotations

import ast
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from results_helpers import FIXTURES

from orchestrator.execute.ship import runner_hash, write_runner
from orchestrator.runner.probe import gather as probe
from orchestrator.runner.probe import tools as probe_run

PROBE = Path(probe.__file__)
# `runner.pyz probe` is the probe's command line, as the controller's facts step runs it.
RUNNER = write_runner(Path(tempfile.gettempdir()) / f"orch-test-runner-{runner_hash()}")


def _git_repo(path: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args], env=env, check=True, capture_output=True, text=True
        ).stdout.strip()

    path.mkdir()
    git("init", "-q", "-b", "main")
    (path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-q", "-m", "first")
    git("tag", "v0.1")
    git("remote", "add", "origin", "https://github.com/sgl-project/sglang.git")
    (path / "a.py").write_text("x = 2\n")  # dirty
    return git("rev-parse", "HEAD")


def _run_probe(
    args: list[str], path_dirs: list[Path], extra_env: dict[str, str], python: str = sys.executable
) -> dict[str, Any]:
    env = {"PATH": os.pathsep.join(str(d) for d in path_dirs), "HOME": os.environ.get("HOME", "/")}
    env.update(extra_env)
    started = time.monotonic()
    res = subprocess.run(
        [python, str(RUNNER), "probe", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - started < 60
    data = json.loads(res.stdout)
    assert isinstance(data, dict)
    return data


def _git_dir(tmp_path: Path) -> Path:
    """A directory with only `git` in it, so PATH holds nothing else we did not choose."""
    bindir = tmp_path / "gitbin"
    bindir.mkdir()
    git = shutil.which("git")
    assert git is not None
    (bindir / "git").symlink_to(git)
    return bindir


def test_probe_end_to_end_with_fake_nvidia_smi_and_a_real_repo(
    tmp_path: Path, smi_bin: Path
) -> None:
    head = _git_repo(tmp_path / "repo")
    log = tmp_path / "server.log"
    log.write_text("boot\ngpu01:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\nready\n")
    snap = _run_probe(
        ["--repo", str(tmp_path / "repo"), "--python", sys.executable, "--server-log", str(log)],
        [smi_bin, _git_dir(tmp_path)],
        {
            "FAKE_NVIDIA_SMI_DIR": str(FIXTURES / "h100-throttled"),
            "NCCL_ALGO": "Ring",
            "NCCL_MIN_NCHANNELS": "32",
            "VLLM_API_KEY": "sk-secret-value",
            "HF_TOKEN": "hf_not_collected",
        },
    )
    assert snap["schema_version"] == 1
    assert snap["hostname"] and snap["kernel"]["system"] == "Linux"
    assert snap["cpu"]["count"] >= 1 and snap["memory"]["MemTotal_kib"] > 0
    assert "1m" in snap["load"]
    gpus = snap["gpus"]
    assert gpus["count"] == 8 and gpus["fields"] == "current"
    assert gpus["devices"][3]["clocks_event_reasons.names"] == [
        "hw_slowdown",
        "hw_thermal_slowdown",
    ]
    assert len(snap["compute_apps"]) == 8
    assert snap["topo"]["text"].startswith("\tGPU0") and snap["topo"]["links"]["GPU0"]["GPU7"]
    assert snap["driver"] == {"version": "550.54.15"}
    assert snap["cuda"]["driver"] == "12.4"
    assert snap["nccl"]["server_log"] == "2.21.5+cuda12.4"
    assert snap["python"]["executable"] and snap["python"]["requested"] == sys.executable
    assert any(line.lower().startswith("pytest==") for line in snap["pip_freeze"])
    assert snap["pip_freeze"] == sorted(snap["pip_freeze"], key=str.lower)
    assert "absent" in snap["torch"] or "version" in snap["torch"]
    git = snap["git"]
    assert git["head"] == head and git["branch"] == "main"
    assert git["describe"] == "v0.1-dirty" and git["dirty"] is True
    assert git["status_porcelain"] == [" M a.py"]
    assert git["remote_url"] == "https://github.com/sgl-project/sglang.git"
    assert snap["env"] == {
        "NCCL_ALGO": "Ring",
        "NCCL_MIN_NCHANNELS": "32",
        "VLLM_API_KEY": "***REDACTED***",
    }
    assert "sk-secret-value" not in json.dumps(snap)


def test_old_driver_end_to_end_falls_back(tmp_path: Path, smi_bin: Path) -> None:
    snap = _run_probe(
        ["--no-pip-freeze", "--no-topo"],
        [smi_bin],
        {"FAKE_NVIDIA_SMI_DIR": str(FIXTURES / "old-driver")},
    )
    assert snap["gpus"]["fields"] == "legacy" and snap["gpus"]["count"] == 8
    assert snap["driver"]["version"] == "525.125.06"
    assert snap["pip_freeze"] == {"absent": "disabled (snapshot.pip_freeze: false)"}
    assert snap["topo"] == {"absent": "disabled (snapshot.topo: false)"}


def test_no_nvidia_smi_records_absent_and_still_succeeds(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    snap = _run_probe(
        ["--repo", str(tmp_path / "nope"), "--python", str(tmp_path / "no-python")], [empty], {}
    )
    for item in ("gpus", "compute_apps", "topo", "nvidia_smi"):
        assert snap[item] == {"absent": "nvidia-smi not found on PATH"}
    assert snap["driver"] == {"version": None}
    assert snap["cuda"]["driver"] is None
    assert "not a directory" in snap["git"]["absent"]
    assert "not found" in snap["python"]["absent"]
    assert "not found" in snap["pip_freeze"]["absent"]
    assert snap["server_log_nccl"] == {"absent": "no server log given"}
    assert snap["hostname"]  # the rest is still there


def test_snapshot_in_process_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    snap = probe.snapshot(
        repo_dir=str(tmp_path), server_log=str(tmp_path / "missing.log"), pip_freeze=False
    )
    assert "cannot read" in snap["server_log_nccl"]["absent"]
    assert "git not found" in snap["git"]["absent"]
    json.dumps(snap)  # plain JSON all the way down


def test_a_hanging_command_is_killed_with_its_children() -> None:
    started = time.monotonic()
    with pytest.raises(probe_run.Absent, match=r"timed out after 0\.5s"):
        probe_run.run_command(["sh", "-c", "sleep 30 & sleep 30; wait"], timeout=0.5)
    assert time.monotonic() - started < 5


def test_probe_source_is_python38_syntax() -> None:
    ast.parse(PROBE.read_text(), feature_version=(3, 8))
    text = PROBE.read_text()
    for modern in (
        ".removeprefix(",
        ".removesuffix(",
        "strict=True",
        "strict=False",
        "from typing import Self",
    ):
        assert modern not in text


def _old_pythons() -> list[str]:
    found = []
    for cand in ["python3.8", *sorted(glob.glob("/root/.pyenv/versions/3.8*/bin/python3.8"))]:
        path = shutil.which(cand) or cand
        try:
            ok = subprocess.run([path, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                                capture_output=True, timeout=20).returncode == 0  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            found.append(path)
    return found


def test_probe_runs_under_python38(tmp_path: Path, smi_bin: Path) -> None:
    pythons = _old_pythons()
    if not pythons:
        pytest.skip("no Python 3.8 interpreter here")
    snap = _run_probe(
        ["--no-pip-freeze"],
        [smi_bin],
        {"FAKE_NVIDIA_SMI_DIR": str(FIXTURES / "na-values")},
        python=pythons[0],
    )
    assert snap["probe"]["python"].startswith("3.8")
    assert snap["gpus"]["devices"][0]["unavailable"]["power.draw"] == "[N/A]"
    assert "topo -m failed (rc 3)" in snap["topo"]["absent"]

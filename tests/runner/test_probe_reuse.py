"""Within one runner process, a snapshot reuses what an interpreter answered (python, torch, pip
freeze) only while that interpreter and its sys.path directories are unchanged, and what the host
answered (topology, nvidia-smi header, nvcc) while its GPUs and those tools are the same."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runner import interpreters
from orchestrator.runner.probe import gather as probe
from orchestrator.runner.probe import reuse
from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import write_host_state


def _interpreter_items(snap: dict[str, Any]) -> list[str]:
    return [r for r in snap["probe"]["reused"] if r in ("python", "torch", "pip_freeze")]


def test_answers_are_reused_until_site_packages_change(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    first = probe.snapshot(python=python, pip_freeze=False, topo=False)
    assert _interpreter_items(first) == []
    assert first["python"]["executable"] == python
    second = probe.snapshot(python=python, pip_freeze=False, topo=False)
    assert _interpreter_items(second) == ["python", "torch"]
    assert second["python"] == first["python"] and second["torch"] == first["torch"]
    # a package appears (what pip install does to site-packages): asked again
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "newpkg").mkdir()
    third = probe.snapshot(python=python, pip_freeze=False, topo=False)
    assert _interpreter_items(third) == []
    # pip freeze wanted now, never taken before: taken, the rest reused
    fourth = probe.snapshot(python=python, pip_freeze=True, topo=False)
    assert "pip_freeze" not in _interpreter_items(fourth)
    assert _interpreter_items(fourth) == ["python", "torch"]


def test_a_freeze_taken_earlier_is_not_reused_when_it_is_off_now() -> None:
    """The host's facts take the runner's freeze first; a cell whose server runs in a container
    turns it off for its own snapshot: none is recorded there, not the runner's."""
    first = probe.snapshot(python=sys.executable, pip_freeze=True, topo=False)
    assert isinstance(first["pip_freeze"], list)
    second = probe.snapshot(python=sys.executable, pip_freeze=False, topo=False)
    assert second["pip_freeze"] == {"absent": "disabled (snapshot.pip_freeze: false)"}
    assert _interpreter_items(second) == ["python", "torch"]


def test_gpu_items_and_nvcc_are_reused_while_the_gpus_and_tools_stay_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The topology, the nvidia-smi header and nvcc's version are asked once per runner; again
    when the GPUs change (another driver), when nvcc is replaced, or when the answer grows old."""
    bins = tmp_path / "bin"
    state = write_host_state(tmp_path / "state.json")
    install_fake_nvidia_smi(bins, sys.executable, state=state)
    nvcc = bins / "nvcc"
    nvcc.write_text(
        "#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n"
        'echo "$0" >> "$(dirname "$0")/nvcc.calls"\n'
    )
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bins}:{os.environ['PATH']}")
    monkeypatch.setenv("ORCH_SIM_STATE", str(state))
    reuse.forget()
    kept_items = {"nvcc", "nvidia_smi", "topo"}

    first = probe.snapshot(pip_freeze=False, topo=True)
    assert not kept_items & set(first["probe"]["reused"])
    assert "absent" not in first["topo"] and first["nvcc"]["version"] == "12.8.93"
    second = probe.snapshot(pip_freeze=False, topo=True)
    assert kept_items <= set(second["probe"]["reused"])
    for item in kept_items:  # recorded whole, reused or not
        assert second[item] == first[item]
    assert (bins / "nvcc.calls").read_text().count("\n") == 1

    write_host_state(state, driver_version="575.51.03")  # another driver: the GPUs changed
    third = probe.snapshot(pip_freeze=False, topo=True)
    assert not {"nvidia_smi", "topo"} & set(third["probe"]["reused"])
    assert third["driver"]["version"] == "575.51.03"
    assert "nvcc" in third["probe"]["reused"]

    nvcc.write_text(nvcc.read_text().replace("12.8, V12.8.93", "12.9, V12.9.41"))
    fourth = probe.snapshot(pip_freeze=False, topo=True)
    assert "nvcc" not in fourth["probe"]["reused"] and fourth["nvcc"]["version"] == "12.9.41"

    monkeypatch.setattr(reuse, "MAX_AGE", 0.0)
    time.sleep(0.01)
    fifth = probe.snapshot(pip_freeze=False, topo=True)
    assert not kept_items & set(fifth["probe"]["reused"])
    reuse.forget()


def test_pip_freeze_is_taken_again_after_the_checkout_moves(tmp_path: Path) -> None:
    """An editable install of the pinned repo is listed with its commit: a checkout of another
    commit (git rewrites .git/HEAD) asks pip again, the interpreter's other answers still hold."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for n in (1, 2):
        (repo / "f").write_text(str(n))
        subprocess.run([*git, "add", "f"], check=True)
        subprocess.run([*git, "commit", "-qm", str(n)], check=True)
    first = probe.snapshot(python=sys.executable, repo_dir=str(repo), topo=False)
    assert isinstance(first["pip_freeze"], list), first["pip_freeze"]
    second = probe.snapshot(python=sys.executable, repo_dir=str(repo), topo=False)
    assert "pip_freeze" in second["probe"]["reused"]
    time.sleep(0.01)  # a distinct mtime for the rewritten HEAD
    subprocess.run([*git, "checkout", "-q", "HEAD~1"], check=True)
    third = probe.snapshot(python=sys.executable, repo_dir=str(repo), topo=False)
    assert "pip_freeze" not in third["probe"]["reused"]
    assert {"python", "torch"} <= set(third["probe"]["reused"])
    fourth = probe.snapshot(python=sys.executable, repo_dir=str(repo), topo=False)
    assert "pip_freeze" in fourth["probe"]["reused"]


def test_pip_freeze_is_asked_again_when_an_editable_installs_branch_moves(tmp_path: Path) -> None:
    """`git pull` in an editable install's checkout rewrites its branch ref, not HEAD and not
    site-packages: pip freeze would list the new commit, so the kept answer no longer holds."""
    project = tmp_path / "sglang"
    project.mkdir()
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "1"], check=True)
    site = tmp_path / "site-packages"
    info = site / "sglang-0.5.0.dist-info"
    info.mkdir(parents=True)
    url = project.as_uri()
    (info / "direct_url.json").write_text(f'{{"url": "{url}", "dir_info": {{"editable": true}}}}')
    assert interpreters.editable_projects([str(site)]) == [str(project)]
    python = sys.executable + "-fake-for-cache"  # a key of the cache only: nothing runs
    results = {
        "python": {"path": [str(site)]},
        "torch": {"version": "2.9"},
        "pip_freeze": [f"-e git+{url}@aaaa#egg=sglang"],
    }
    interpreters.remember_answers(python, results, True)
    assert "pip_freeze" in interpreters.cached_answers(python, True)
    time.sleep(0.01)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "2"], check=True)  # a pull
    answers = interpreters.cached_answers(python, True)
    assert "pip_freeze" not in answers and answers["torch"] == {"version": "2.9"}

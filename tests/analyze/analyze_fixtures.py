"""Write small cell directories and run bundles in the documented layout (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any


def gpu(index: int, **overrides: Any) -> dict[str, Any]:
    """One GPU as the snapshot probe records it (newest nvidia-smi field names, parsed values)."""
    data: dict[str, Any] = {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-0000000{index}",
        "driver_version": "550.54.15",
        "pci.bus_id": f"00000000:{index + 0x18:02X}:00.0",
        "pstate": "P0",
        "clocks.sm": 1980,
        "clocks.max.sm": 1980,
        "clocks.mem": 2619,
        "clocks.max.memory": 2619,
        "pcie.link.gen.gpucurrent": 5,
        "pcie.link.gen.max": 5,
        "pcie.link.width.current": 16,
        "pcie.link.width.max": 16,
        "power.draw": 120.5,
        "power.limit": 700.0,
        "temperature.gpu": 34,
        "memory.used": 0,
        "memory.total": 81559,
        "persistence_mode": "Enabled",
        "ecc.mode.current": "Enabled",
        "clocks_event_reasons.active": "0x0000000000000000",
        "clocks_event_reasons.names": [],
    }
    data.update(overrides)
    return data


def snapshot(gpus: int = 2, **overrides: Any) -> dict[str, Any]:
    """A snapshot in the probe's shape (orchestrator/runner/probe/gather.py)."""
    snap: dict[str, Any] = {
        "schema_version": 1,
        "hostname": "gpu01",
        "kernel": {"system": "Linux", "release": "5.15.0-105-generic", "machine": "x86_64"},
        "os": {"PRETTY_NAME": "Ubuntu 22.04.4 LTS", "NAME": "Ubuntu"},
        "cpu": {"count": 224, "model": "Intel(R) Xeon(R) Platinum 8480+"},
        "nvidia_smi": {"driver_version": "550.54.15", "cuda_version": "12.4"},
        "gpus": {"count": gpus, "fields": "current", "devices": [gpu(i) for i in range(gpus)]},
        "python": {"executable": "/usr/bin/python3", "version": "3.10.12"},
        "torch": {"version": "2.5.1+cu124", "cuda": "12.4", "nccl": "2.21.5"},
        "pip_freeze": ["numpy==1.26.4", "sglang==0.4.10", "torch==2.5.1"],
        "env": {"CUDA_HOME": "/usr/local/cuda"},
        "driver": {"version": "550.54.15"},
        "cuda": {"driver": "12.4", "nvcc": "12.4.131", "torch": "12.4"},
        "nccl": {"torch": "2.21.5", "server_log": None},
    }
    snap.update(overrides)
    return snap


def env_check(values: dict[str, str | None], processes: int = 3) -> dict[str, Any]:
    """env_check.json where every server process observed `values` (None: unset there)."""
    procs = []
    for i in range(processes):
        procs.append(
            {
                "pid": 1000 + i,
                "ppid": 999 if i else 1,
                "cmdline": ["python3", "-m", "sglang.launch_server"],
                "vars": {
                    name: {"expected": value, "observed": value, "ok": True}
                    for name, value in values.items()
                },
            }
        )
    return {
        "mode": "strict",
        "ok": True,
        "declared": sorted(values),
        "processes": procs,
        "mismatches": [],
    }


def base_cell(
    cell_id: str = "abc-eagle3-2-1a2b3c4d",
    *,
    host: str = "gpu01",
    axes: dict[str, Any] | None = None,
    repo_dest: str = "/nonexistent/sglang",
    repo_url: str = "https://github.com/sgl-project/sglang.git",
    version: str = "main",
    env: dict[str, str] | None = None,
    args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Cell as `Cell.model_dump(mode='json')` gives it."""
    args = args if args is not None else {"model-path": "/models/m", "tp-size": 8, "port": 30000}
    return {
        "schema_version": 1,
        "id": cell_id,
        "playbook": "demo",
        "host": host,
        "axes": axes if axes is not None else {"spec": "eagle3-2"},
        "repo": {"url": repo_url, "dest": repo_dest, "version": version, "setup": None},
        "env": env if env is not None else {"NCCL_ALGO": "Ring"},
        "secrets": [],
        "server": {
            "adapter": "sglang",
            "argv": ["python3", "-m", "sglang.launch_server"]
            + [x for k, v in args.items() for x in (f"--{k}", str(v))],
            "args": args,
        },
        "bench": {"adapter": "sglang.bench_serving", "argv": ["python3"], "repeats": 3},
        "expect": {},
    }


def write_cell(
    root: Path,
    *,
    cell: dict[str, Any] | None = None,
    status: str = "passed",
    reason: str | None = None,
    repo: dict[str, Any] | None = None,
    snapshot_pre: dict[str, Any] | None = None,
    snapshot_post: dict[str, Any] | None = None,
    env: dict[str, Any] | None = None,
    repeats: list[dict[str, float]] | None = None,
    expectations: list[dict[str, Any]] | None = None,
    server_log: str | None = None,
    steps: dict[str, Any] | None = None,
    session: dict[str, Any] | None = None,
) -> Path:
    """Write one cell directory under `root/<cell id>` and return its path.

    The post-run snapshot is the pre-run one unless `snapshot_post` is given. `steps` replaces
    cell.json's steps (default: a repo step only); `session` is cell.json's server session.
    """
    cell = copy.deepcopy(cell) if cell is not None else base_cell()
    path = root / cell["id"]
    path.mkdir(parents=True)
    document: dict[str, Any] = {
        "schema_version": 1,
        "cell": cell,
        "status": status,
        "reason": reason,
        "failed_step": None if status == "passed" else "ready",
        "steps": steps
        if steps is not None
        else {"repo": {"status": "ok", "start": 1.0, "end": 2.0}},
        "runner": {"python": "3.10.12"},
    }
    if session is not None:
        document["session"] = session
    (path / "cell.json").write_text(json.dumps(document))
    if repo is not None:
        (path / "repo.json").write_text(json.dumps(repo))
    if cell["server"] is not None:
        (path / "server.json").write_text(
            json.dumps(
                {
                    "argv": cell["server"]["argv"],
                    "cwd": cell["repo"]["dest"],
                    "pid": 1000,
                    "pgid": 1000,
                    "env_declared": cell["env"],
                }
            )
        )
    (path / "snapshot.pre.json").write_text(json.dumps(snapshot_pre or snapshot()))
    post = snapshot_post or snapshot_pre or snapshot()
    (path / "snapshot.post.json").write_text(json.dumps(post))
    (path / "env_check.json").write_text(json.dumps(env or env_check(cell["env"])))
    if server_log is not None:
        (path / "server.log").write_text(server_log)
    if repeats is not None:
        from orchestrator.analyze.metrics import metrics_document

        doc = metrics_document(repeats, expectations=expectations)
        (path / "metrics.json").write_text(json.dumps(doc))
    return path


def write_run(root: Path, run_id: str, cells: list[dict[str, Any]]) -> Path:
    """A bundle directory `root/run_id` with run.json and one cell per `write_cell` kwargs."""
    run = root / run_id
    (run / "cells").mkdir(parents=True)
    statuses = {}
    for kwargs in cells:
        path = write_cell(run / "cells", **kwargs)
        statuses[path.name] = {"host": "gpu01", "status": kwargs.get("status", "passed")}
    (run / "run.json").write_text(
        json.dumps({"schema_version": 1, "run_id": run_id, "cells": statuses, "status": "passed"})
    )
    return run


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` with a fixed identity; return stdout."""
    result = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
            "HOME": str(repo),
            "PATH": "/usr/bin:/bin:/usr/local/bin",
        },
    )
    return result.stdout


def make_repo(path: Path, messages: list[str]) -> list[str]:
    """A git repo with one commit per message (each touching its own file); returns the SHAs."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    shas = []
    for i, message in enumerate(messages):
        (path / f"file{i}.py").write_text(f"# {message}\n" * (i + 1))
        git(path, "add", ".")
        git(path, "commit", "-q", "-m", message)
        shas.append(git(path, "rev-parse", "HEAD").strip())
    return shas


def repo_json(sha: str, requested: str = "main", **overrides: Any) -> dict[str, Any]:
    """repo.json as the runner writes it."""
    data: dict[str, Any] = {
        "requested": requested,
        "sha": sha,
        "describe": sha[:7],
        "status_porcelain": [],
        "dirty": False,
        "dirty_action": "refuse",
        "reflog": [],
        "fetched": False,
    }
    data.update(overrides)
    return data

"""Helpers for the end-to-end tests that run the simulator through the real `orch` CLI."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVE = ["{{ orch_python }}", "-m", "orchestrator.sim", "serve"]
BENCH = ["{{ orch_python }}", "-m", "orchestrator.sim", "bench"]


def free_port() -> int:
    """A TCP port nobody listens on here right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def orch(
    *args: str,
    cwd: Path,
    home: Path | None = None,
    timeout: float = 240,
    env_extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m orchestrator ARGS` to the end; HOME replaced when `home` is given."""
    env = {**os.environ, **(env_extra or {})}
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def only_run(results: Path) -> Path:
    """The one run directory under `results`."""
    runs = [p for p in results.iterdir() if p.is_dir() and (p / "run.json").exists()]
    assert len(runs) == 1, runs
    return runs[0]


def load(path: Path) -> Any:
    """A JSON file's content."""
    return json.loads(path.read_text())


def axes(run: Path, cell_id: str) -> dict[str, Any]:
    """The matrix point of a cell, from its cell.json."""
    data: dict[str, Any] = load(run / "cells" / cell_id / "cell.json")["cell"]["axes"]
    return data


def median(run: Path, cell_id: str, metric: str) -> float:
    """The median over repeats of `metric` in a cell's metrics.json."""
    return float(load(run / "cells" / cell_id / "metrics.json")["summary"][metric]["median"])


def table_rows(text: str) -> list[list[str]]:
    """A plain `tabulate` table as rows of cells (columns split on two or more spaces)."""
    rows = []
    for line in text.splitlines():
        if not line.strip() or set(line.strip()) <= {"-", " "}:
            continue
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def leading_number(text: str) -> float | None:
    """The number at the start of a report cell such as `61.60 ± 1.28`, else None."""
    found = re.match(r"\s*(-?[\d.]+(?:e[-+]?\d+)?)", text)
    return float(found.group(1)) if found else None


def eagle3_playbook(
    repo: Path,
    port: int,
    *,
    name: str,
    dest: str,
    time_scale: str = "0.05",
    repeats: int = 2,
    matrix: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """good vs bad of an `orch sim init-repo` repo: EAGLE-3 2-step, tuned NCCL, tp 8, short runs,
    a seeded server."""
    return {
        "name": name,
        "vars": {"sim_repo": str(repo), "port": port, "time_scale": time_scale},
        "matrix": matrix or {"commit": ["good", "bad"]},
        "repo": {
            "url": "{{ sim_repo }}",
            "dest": dest,
            "version": "{{ matrix.commit }}",
            "setup": "sh setup.sh",
        },
        "env": {
            "ORCH_SIM_TIME_SCALE": "{{ time_scale }}",
            # Seeded: every run draws the same draft acceptances, so two runs of one commit
            # differ only by the machine's timing (2 prompts unseeded swing EAGLE-3 by ~10%).
            "ORCH_SIM_SEED": "11",
            "NCCL_MIN_NCHANNELS": 32,
            "NCCL_CROSS_NIC": 1,
            "NCCL_ALGO": "Ring",
        },
        "server": {
            "adapter": "sglang",
            "launcher": SERVE,
            "args": {
                "model-path": "/models/Kimi-K2.5",
                "host": "127.0.0.1",
                "port": "{{ port }}",
                "tp-size": 8,
                "disable-custom-all-reduce": True,
                "speculative-algorithm": "EAGLE3",
                "speculative-draft-model-path": "/models/Kimi-K2.5-EAGLE3",
                "speculative-num-steps": 2,
                "speculative-eagle-topk": 1,
                "speculative-num-draft-tokens": 3,
            },
            "ready": {"timeout": 60},
        },
        "bench": {
            "adapter": "sglang.bench_serving",
            "launcher": BENCH,
            "args": {
                "dataset-name": "random-ids",
                "random-input-len": 1024,
                "random-output-len": 128,
                "random-range-ratio": 1,
                "num-prompts": 2,
                "max-concurrency": 1,
            },
            "warmup": 1,
            "repeats": repeats,
        },
        "snapshot": {"pip_freeze": False, "topo": False},
        "timeouts": {"cell": 120},
    }

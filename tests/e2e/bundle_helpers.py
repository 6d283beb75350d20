"""Helpers for the bundle, report, diff and GPU-snapshot end-to-end tests.

Every test drives `python -m orchestrator ...` as a subprocess. Local runs get their own $HOME
(the runner keeps its state under `$HOME/.orch`) and a free port each, so they can run beside
other test sessions on the same machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TIME_SCALE = "0.02"  # real seconds per simulated second: a few seconds per sim cell

# A generic server that prints its whole environment into its log, serves the secret back on
# /info (captured at ready) and answers /health; and a bench that prints its environment too.
ECHO_SERVER = r"""
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port = int(sys.argv[1])
for key, value in sorted(os.environ.items()):
    print(f"env {key}={value}", flush=True)
print(f"argv {sys.argv}", flush=True)
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"ok": True, "hf_token": os.environ.get("HF_TOKEN"),
                "access": os.environ.get("MODEL_ACCESS")}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, fmt, *args):
        print("request", fmt % args, flush=True)
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""
ECHO_BENCH = r"""
import json, os, sys, time, urllib.request
url = sys.argv[1]
start = time.monotonic()
for _ in range(5):
    answer = json.loads(urllib.request.urlopen(url + "/info", timeout=5).read())
seconds = time.monotonic() - start
print("server said", json.dumps(answer), flush=True)
print("bench env HF_TOKEN=" + os.environ.get("HF_TOKEN", ""), flush=True)
print("bench env", file=sys.stderr, flush=True)
for key, value in sorted(os.environ.items()):
    print(f"{key}={value}", file=sys.stderr, flush=True)
with open("result.json", "w") as f:
    json.dump({"requests_per_s": 5 / max(seconds, 1e-6), "echo": answer}, f)
"""


def orch(
    *args: str,
    home: Path | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m orchestrator ARGS` to the end; `home` becomes its $HOME."""
    full_env = dict(os.environ)
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        full_env["HOME"] = str(home)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def ok(result: subprocess.CompletedProcess[str], code: int = 0) -> str:
    """stdout of a finished CLI run that exited with `code` (else fail with both streams)."""
    assert result.returncode == code, (
        f"exit {result.returncode} (wanted {code}) for {result.args}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    return result.stdout


def write_yaml(path: Path, data: Mapping[str, Any]) -> Path:
    """Write `data` as YAML (keys in the given order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path


def sim_playbook(
    path: Path,
    *,
    name: str,
    port: int,
    repo: Path | None,
    matrix: Mapping[str, Any] | None = None,
    version: str = "{{ commit }}",
    env: Sequence[Any] = (),
    extra_vars: Mapping[str, Any] | None = None,
    repeats: int = 2,
    tp_size: int = 2,
    dest: str = ".orch/e2e-sim",
    verify_env: str = "strict",
) -> Path:
    """A small SGLang-shaped playbook against `orch sim serve` (no GPU, a few seconds a cell)."""
    data: dict[str, Any] = {
        "name": name,
        "hosts": "all",
        "vars": {"port": port, "commit": "good", **(extra_vars or {})},
        "matrix": dict(matrix or {"spec": ["off"]}),
    }
    if repo is not None:
        data["repo"] = {"url": str(repo), "dest": dest, "version": version, "setup": "sh setup.sh"}
    data["env"] = [{"ORCH_SIM_TIME_SCALE": TIME_SCALE, "NCCL_DEBUG": "INFO"}, *env]
    data["server"] = {
        "adapter": "sglang",
        "launcher": ["{{ orch_python }}", "-m", "orchestrator.sim", "serve"],
        "args": {
            "model-path": "/models/sim",
            "host": "127.0.0.1",
            "port": "{{ port }}",
            "tp-size": tp_size,
        },
        "ready": {"timeout": 60},
        "verify_env": verify_env,
    }
    data["bench"] = {
        "adapter": "sglang.bench_serving",
        "launcher": ["{{ orch_python }}", "-m", "orchestrator.sim", "bench"],
        "args": {
            "dataset-name": "random-ids",
            "random-input-len": 128,
            "random-output-len": 24,
            "random-range-ratio": 1,
            "num-prompts": 2,
            "max-concurrency": 1,
        },
        "warmup": 0,
        "repeats": repeats,
    }
    data["snapshot"] = {"pip_freeze": False, "topo": False}
    data["timeouts"] = {"cell": 120}
    return write_yaml(path, data)


def apply(
    playbook: Path,
    results: Path,
    *more: str,
    home: Path,
    code: int | None = 0,
    timeout: float = 180,
) -> Path:
    """`orch apply` to the end; returns the new run's directory (checks the exit code)."""
    before = {p.name for p in results.iterdir()} if results.is_dir() else set()
    result = orch(
        "apply", str(playbook), "--results", str(results), *more, home=home, timeout=timeout
    )
    if code is not None:
        ok(result, code)
    new = [p for p in results.iterdir() if p.is_dir() and p.name not in before]
    assert len(new) == 1, (new, result.stdout, result.stderr)
    return new[0]


def cell_dirs(run: Path) -> list[Path]:
    """The complete cell directories of a run (not the `.<id>.tmp` ones)."""
    return sorted(p for p in (run / "cells").iterdir() if p.is_dir() and not p.name.startswith("."))


def read_json(path: Path) -> Any:
    """A JSON file's content."""
    return json.loads(path.read_text())


def files_under(root: Path) -> Iterator[Path]:
    """Every regular file below `root`, hidden ones included."""
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


def files_holding(root: Path, needles: Sequence[bytes]) -> list[str]:
    """`relative path: needle` for each file under `root` whose bytes contain a needle."""
    found = []
    for path in files_under(root):
        data = path.read_bytes()
        for needle in needles:
            if needle in data:
                found.append(f"{path.relative_to(root)}: {needle!r}")
    return found


def tar_members_holding(archive: Path, needles: Sequence[bytes]) -> tuple[int, list[str]]:
    """(regular files in a .tar.gz, `member: needle` for each one holding a needle)."""
    found, count = [], 0
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            count += 1
            handle = tar.extractfile(member)
            assert handle is not None
            data = handle.read()
            found += [f"{member.name}: {n!r}" for n in needles if n in data]
    return count, found


def git(repo: Path, *args: str) -> str:
    """`git -C repo ARGS` stdout (no pager, fixed locale)."""
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GIT_PAGER": "cat", "LC_ALL": "C"},
    ).stdout


def section_order(text: str) -> list[str]:
    """Section names (`[code]`, `[environment]`, ...) in the order a text diff prints them."""
    names = []
    for line in text.splitlines():
        if line.startswith("[") and "]" in line:
            names.append(line[1 : line.index("]")])
    return names

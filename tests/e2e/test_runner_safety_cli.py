"""`orch apply` on a local host with short secrets that lie in every path, a token in the
controller's own environment, and a bench that leaves a symlink (issue 10 items 1, 2, 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sim_helpers import free_port

HOST_TOKEN = "ghp_controllerEnvToken42abc"  # in the environment the server inherits

SERVER = (
    "import os, sys, http.server as h\n"
    "print('GITHUB_TOKEN=' + os.environ.get('GITHUB_TOKEN', ''), flush=True)\n"
    "print('API_KEY=' + os.environ.get('API_KEY', ''), flush=True)\n"
    "h.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), h.SimpleHTTPRequestHandler)"
    ".serve_forever()\n"
)
BENCH = (
    "import os, sys\n"
    "os.symlink('/etc/hostname', 'host')\n"
    "print('token', os.environ.get('GITHUB_TOKEN'), file=sys.stderr)\n"
    "print('x 1.0')\n"
)


@pytest.mark.slow
def test_short_secrets_in_paths_and_host_env_tokens(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    playbook = {
        "name": "runner-safety",
        "vars": {"port": free_port()},
        "env": {"API_KEY": "runs"},  # `runs` lies in every archive path on the host
        "server": {
            "command": ["{{ orch_python }}", "-c", SERVER, "{{ port }}"],
            "port": "{{ port }}",
            "ready": {"path": "/", "timeout": 30},
        },
        "bench": {
            "command": ["{{ orch_python }}", "-c", BENCH, "{{ my_password }}"],
            "metrics": {"x": r"x ([0-9.]+)"},
        },
    }
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    env = {**os.environ, "HOME": str(home), "GITHUB_TOKEN": HOST_TOKEN}
    argv = ["apply", "playbook.yml", "--results", "results", "-e", "my_password=orch"]
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # Before: every cell failed at collect (the archive path said `.orch/***REDACTED***/...`).
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (cell,) = (tmp_path / "results").glob("*/cells/*")
    info = json.loads((cell / "cell.json").read_text())
    assert info["status"] == "passed", info
    # Short secrets: hidden by name, left inside text.
    assert info["cell"]["env"]["API_KEY"] == "***REDACTED***"
    # The host environment's token: in no file of the bundle or the host, nor on the terminal.
    log = (cell / "server.log").read_text()
    assert "GITHUB_TOKEN=***REDACTED***" in log
    for root in (tmp_path / "results", home / ".orch" / "runs"):
        leaks = [
            p for p in root.rglob("*") if p.is_file() and HOST_TOKEN.encode() in p.read_bytes()
        ]
        assert not leaks, leaks
    assert HOST_TOKEN not in proc.stdout + proc.stderr
    # The bench's symlink is recorded as a link, the rest of its folder collected.
    bench = cell / "bench" / "1"
    assert json.loads((bench / "links.json").read_text()) == [
        {"name": "host", "target": "/etc/hostname"}
    ]
    assert not (bench / "host").exists() and (bench / "stdout").is_file()

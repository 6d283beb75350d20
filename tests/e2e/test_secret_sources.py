"""Secrets that are not environment variables: inventory host vars, vars listed under
`secrets:`, and a token inside a repo URL. None may reach a bundle file or the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sim_helpers import free_port

HOST_SECRET = "s3cretHostPass99xyz"  # inventory var `db_password`: secret by name
LISTED_SECRET = "LIC-7731-ZXQ-4412"  # playbook var `license`: secret because listed
URL_TOKEN = "ghp_tokenInTheRepoUrl123"  # var `gh_token`, inside repo.url

SERVER = (
    "import sys, http.server as h\n"
    "print('argv', sys.argv, flush=True)\n"
    "h.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), h.SimpleHTTPRequestHandler)"
    ".serve_forever()\n"
)


def _orch(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp / "home")}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _assert_nowhere(root: Path, text: str, *outputs: str) -> None:
    needle = text.encode()
    leaks = [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]
    assert not leaks, leaks
    for out in outputs:
        assert text not in out


@pytest.mark.slow
def test_host_var_and_listed_var_secrets_are_redacted(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "inventory.yml").write_text(
        yaml.safe_dump(
            {"all": {"hosts": {"box": {"connection": "local", "db_password": HOST_SECRET}}}}
        )
    )
    playbook = {
        "name": "secret-sources",
        "secrets": ["license"],
        "vars": {"port": free_port(), "license": LISTED_SECRET},
        "server": {
            "command": [
                "{{ orch_python }}",
                "-c",
                SERVER,
                "{{ port }}",
                "{{ db_password }}",
                "--license={{ license }}",
            ],
            "port": "{{ port }}",
            "ready": {"path": "/", "timeout": 30},
        },
        "bench": {
            "command": ["{{ orch_python }}", "-c", "print('x 1.0')", "{{ license }}"],
            "metrics": {"x": r"x ([0-9.]+)"},
        },
    }
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    proc = _orch(tmp_path, "apply", "playbook.yml", "-i", "inventory.yml", "--results", "results")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for secret in (HOST_SECRET, LISTED_SECRET):
        _assert_nowhere(tmp_path / "results", secret, proc.stdout, proc.stderr)
        # nor on the host, in the runner's own copy of the cell
        _assert_nowhere(tmp_path / "home" / ".orch" / "runs", secret)
    log = next((tmp_path / "results").glob("*/cells/*/server.log")).read_text()
    assert "***REDACTED***" in log, log


@pytest.mark.slow
def test_token_in_a_failing_repo_url_is_not_printed(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    playbook = {
        "name": "secret-url",
        "secrets": ["gh_token"],
        "vars": {"gh_token": URL_TOKEN},
        "repo": {
            "url": "https://x:{{ gh_token }}@127.0.0.1:1/nonexist.git",
            "dest": "src/nonexist",
            "version": "main",
        },
        "bench": {"command": ["true"]},
    }
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    proc = _orch(tmp_path, "apply", "playbook.yml", "--results", "results")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "repo" in proc.stdout  # the failed step is named
    _assert_nowhere(tmp_path / "results", URL_TOKEN, proc.stdout, proc.stderr)

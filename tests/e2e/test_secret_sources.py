"""Secrets that are not environment variables: inventory host vars, vars listed under
`secrets:`, and a token inside a repo URL. None may reach a bundle file or the terminal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from bundle_helpers import sim_playbook
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


# One secret var set in every layer a playbook has: each layer's value is a secret, whether
# the run used it or a later layer overrode it.
LAYERED = {
    "base": "hf_BASE_layer_1a2b3c",  # extends: base file
    "playbook": "hf_SUPERSECRETVALUE123",  # the playbook's own vars
    "vars_file": "hf_VARSFILE_layer_4d5e",  # vars_files
    "at_file": "hf_ATFILE_layer_6f7a",  # -e @file
    "cli_first": "hf_CLI_overridden_8b9c",  # an -e a later -e overrides
    "cli_used": "hf_CLI_SECRET_555",  # the value the run used
    "listed_base": "LIC-BASE-0001",  # `license`, listed under secrets:
    "listed_used": "LIC-USED-0002",
    "nested": "nested-api-key-3xq9",  # creds.api_key, a secret name inside a var
}


@pytest.mark.slow
def test_overridden_secret_values_reach_no_bundle_file(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "inventory.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"box": {"connection": "local"}}}})
    )
    (tmp_path / "base.yml").write_text(
        "# the shared base\n"
        "vars:\n"
        f"  hf_token: {LAYERED['base']}\n"
        f"  license: {LAYERED['listed_base']}\n"
        f"  creds: {{api_key: {LAYERED['nested']}}}\n"
    )
    (tmp_path / "vars").mkdir()
    (tmp_path / "vars" / "common.yml").write_text(f"hf_token: '{LAYERED['vars_file']}'\n")
    (tmp_path / "at.yml").write_text(f"hf_token: {LAYERED['at_file']}\n")
    (tmp_path / "playbook.yml").write_text(
        "name: layered-secrets\n"
        "extends: base.yml\n"
        "secrets: [license]\n"
        "vars:\n"
        f"  hf_token: {LAYERED['playbook']}\n"
        "vars_files: [vars/common.yml]\n"
        "bench:\n"
        "  command:\n"
        "    - '{{ orch_python }}'\n"
        "    - -c\n"
        "    - print('x 1.0')\n"
        "    - '{{ hf_token }}'\n"
        "    - '{{ license }}'\n"
        "    - '{{ creds.api_key }}'\n"
        "  metrics: {x: 'x ([0-9.]+)'}\n"
    )
    proc = _orch(
        tmp_path,
        "apply", "playbook.yml", "-i", "inventory.yml", "--results", "results",
        "-e", "@at.yml",
        "-e", f"hf_token={LAYERED['cli_first']}",
        "-e", f"hf_token={LAYERED['cli_used']}",
        "-e", f"license={LAYERED['listed_used']}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    for layer, secret in LAYERED.items():
        leaks = [p for p in run.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
        assert not leaks, (layer, leaks)
        _assert_nowhere(tmp_path / "home" / ".orch" / "runs", secret)
    # The copies keep their layout and stay YAML, with the marker where a secret was.
    copies = run / "playbook"
    assert yaml.safe_load((copies / "base.yml").read_text())["vars"] == {
        "hf_token": "***REDACTED***",
        "license": "***REDACTED***",
        "creds": {"api_key": "***REDACTED***"},
    }
    assert "# the shared base" in (copies / "base.yml").read_text()
    assert yaml.safe_load((copies / "vars" / "common.yml").read_text()) == {
        "hf_token": "***REDACTED***"
    }
    played = yaml.safe_load((copies / "playbook.yml").read_text())
    assert played["vars"] == {"hf_token": "***REDACTED***"}
    assert played["bench"]["command"][3] == "{{ hf_token }}"  # references stay readable


SERVED = "served-model-Zk81qW"  # a server arg's value, held in a var named like a secret
# The simulator launched with one more `--served-model-name` after orch's flags: it reports
# another name than the one declared (argparse keeps the last).
RENAMING_LAUNCHER = [
    "{{ orch_python }}",
    "-c",
    "import runpy, sys; sys.argv += ['--served-model-name', 'another-model-name'];"
    " runpy.run_module('orchestrator.sim', run_name='__main__')",
    "serve",
]


def _served_playbook(tmp: Path, var: str, *, renaming: bool = False) -> Path:
    path = sim_playbook(
        tmp / f"{var}.yml",
        name="secret-server-arg",
        port=free_port(),
        repo=None,
        extra_vars={var: SERVED},
        repeats=1,
    )
    data = yaml.safe_load(path.read_text())
    data["server"]["args"]["served-model-name"] = "{{ " + var + " }}"
    if renaming:
        data["server"]["launcher"] = RENAMING_LAUNCHER
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("var", ["served_key", "served_name"])  # secret by name, and not
def test_a_secret_server_arg_the_server_reports_back_passes(tmp_path: Path, var: str) -> None:
    (tmp_path / "home").mkdir()
    playbook = _served_playbook(tmp_path, var)
    proc = _orch(tmp_path, "apply", str(playbook), "--results", "results")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (metrics,) = (tmp_path / "results").glob("*/cells/*/metrics.json")
    checks = json.loads(metrics.read_text())["checks"]
    assert [c["name"] for c in checks] == ["server_args"], checks
    assert checks[0]["ok"] is True
    if var == "served_key":  # compared, and still written redacted
        _assert_nowhere(tmp_path / "results", SERVED, proc.stdout, proc.stderr)
        (info,) = (tmp_path / "results").glob("*/cells/*/captures/server_info.ready.json")
        assert json.loads(info.read_text())["served_model_name"] == "***REDACTED***"


@pytest.mark.slow
def test_a_secret_server_arg_the_server_reports_otherwise_fails(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    playbook = _served_playbook(tmp_path, "served_key", renaming=True)
    proc = _orch(tmp_path, "apply", str(playbook), "--results", "results")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "server_arg:served-model-name" in proc.stdout
    assert "another-model-name" in proc.stdout and "***REDACTED***" in proc.stdout
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    (cell,) = json.loads((run / "run.json").read_text())["cells"].values()
    assert cell["failed_step"] == "checks", cell  # `failed at` says which kind of failure
    _assert_nowhere(tmp_path / "results", SERVED, proc.stdout, proc.stderr)


# Cell a=2 holds its benchmark while the file exists: Ctrl-C lands in it, after a=1 finished.
HOLD_BENCH = (
    "import os, sys, time\n"
    "while sys.argv[2] == '2' and os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.05)\n"
    "print('x 1.0')\n"
)
FIRST_TOKEN = "hf_first_value_Qm3Lp9"
SECOND_TOKEN = "hf_second_value_Vx7Rt2"


@pytest.mark.slow
def test_resume_takes_the_secret_again_with_any_value(tmp_path: Path) -> None:
    home, hold = tmp_path / "home", tmp_path / "hold"
    home.mkdir()
    hold.write_text("")
    command = [
        "{{ orch_python }}", "-c", HOLD_BENCH, "{{ hold }}", "{{ matrix.a }}",
        "{{ label }}", "--token={{ hf_token }}",
    ]  # fmt: skip
    playbook = {
        "name": "resume-secret",
        "vars": {"hold": str(hold), "label": "a"},
        "matrix": {"a": [1, 2]},
        "env": {"HF_TOKEN": "{{ hf_token }}"},
        "bench": {"command": command, "metrics": {"x": r"x ([0-9.]+)"}},
    }
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    argv = ["apply", "playbook.yml", "--results", "results"]
    with (tmp_path / "out").open("w") as out, (tmp_path / "err").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *argv, "-e", f"hf_token={FIRST_TOKEN}"],
            cwd=tmp_path,
            env={**os.environ, "HOME": str(home)},
            stdout=out,
            stderr=err,
        )
        try:
            deadline = time.monotonic() + 60
            while not list((tmp_path / "results").glob("*/cells/1-*/cell.json")):
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(1.0)  # a=2 is holding in its benchmark
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    said = (tmp_path / "out").read_text() + (tmp_path / "err").read_text()
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    # The hint asks for the secret again; it never prints it, nor the marker as a value.
    assert "-e 'hf_token=<secret>'" in said and "give each <secret> its value again" in said
    assert FIRST_TOKEN not in said and "***REDACTED***" not in said
    # Other non-secret arguments plan other cells: refused, with the run's own command.
    refused = _orch(tmp_path, *argv, "-e", "hf_token=x", "-e", "label=b", "--resume", str(run))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "-e 'hf_token=<secret>'" in refused.stderr, refused.stderr
    assert "***REDACTED***" not in refused.stderr
    # The same arguments with another token value: the same cells, resumed.
    hold.unlink()
    resumed = _orch(tmp_path, *argv, "-e", f"hf_token={SECOND_TOKEN}", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    doc = json.loads((run / "run.json").read_text())
    assert len(doc["resumed"]) == 1
    assert sorted(c["status"] for c in doc["cells"].values()) == ["passed", "passed"]
    for secret in (FIRST_TOKEN, SECOND_TOKEN):
        _assert_nowhere(run, secret, resumed.stdout, resumed.stderr)


@pytest.mark.slow
def test_credentials_inside_a_repo_url_reach_no_bundle_file(tmp_path: Path) -> None:
    """user:password@ in repo.url is secret though no var or name says so: masked in plan.json,
    run.json's argv, repo.json, the snapshots, cell.json and whatever the bench prints."""
    home = tmp_path / "home"
    home.mkdir()
    src = tmp_path / "origin"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True)
    (src / "README").write_text("hello\n")
    subprocess.run([*git, "-C", str(src), "add", "README"], check=True)
    subprocess.run([*git, "-C", str(src), "commit", "-q", "-m", "one"], check=True)
    password = "plainPw42"
    url = f"https://bob:{password}@git.example.invalid/team/repo.git"
    # git reaches the local origin through the credentialed URL, as a real host's config would
    (home / ".gitconfig").write_text(f'[url "{src}"]\n\tinsteadOf = {url}\n')
    playbook = {
        "name": "url-credentials",
        "repo": {"url": "{{ repo_url }}", "dest": "src/repo", "version": "main"},
        # prints the clone's origin (the URL with its credentials) into the bench's stdout
        "bench": {
            "command": ["git", "-C", str(home / "src" / "repo"), "config", "remote.origin.url"]
        },
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    proc = _orch(tmp_path, "apply", "playbook.yml", "-e", f"repo_url={url}", "--results", "results")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    (cell,) = [p for p in (run / "cells").iterdir() if p.is_dir()]
    assert "***REDACTED***@git.example.invalid" in (cell / "bench" / "1" / "stdout").read_text()
    _assert_nowhere(tmp_path / "results", password, proc.stdout, proc.stderr)
    _assert_nowhere(tmp_path / "results", "bob:", proc.stdout, proc.stderr)


@pytest.mark.slow
def test_a_matrix_axis_of_secrets_shows_in_no_id_plan_or_bundle(tmp_path: Path) -> None:
    """An axis whose name is secret (`api_key: [...]`): ids say `secret`, `orch plan` and the
    bundle hide the values by name, the long one is swept from every file."""
    (tmp_path / "home").mkdir()
    long_value, short_value = "sk-matrixSecretValue77", "k9x"
    playbook = {
        "name": "secret-axis",
        "matrix": {"api_key": [long_value, short_value], "n": [1]},
        "env": {"API_KEY": "{{ matrix.api_key }}"},  # by name, as a client would read it
        "bench": {"command": ["true"]},
        "snapshot": {"pip_freeze": False, "topo": False},
    }
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    plan = _orch(tmp_path, "plan", "playbook.yml")
    assert plan.returncode == 0, plan.stderr
    plan_json = _orch(tmp_path, "plan", "playbook.yml", "--json")
    cells = json.loads(plan_json.stdout)
    assert [c["id"].split("-")[0] for c in cells] == ["secret", "secret"]
    assert len({c["id"] for c in cells}) == 2  # still one id per point
    for out in (plan.stdout, plan_json.stdout):
        assert long_value not in out and short_value not in out
    proc = _orch(tmp_path, "apply", "playbook.yml", "--results", "results")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _assert_nowhere(tmp_path / "results", long_value, proc.stdout, proc.stderr)
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    for cell in json.loads((run / "plan.json").read_text())["cells"]:
        assert cell["axes"]["api_key"] == "***REDACTED***"
    for cell_json in run.glob("cells/*/cell.json"):
        assert json.loads(cell_json.read_text())["cell"]["axes"]["api_key"] == "***REDACTED***"

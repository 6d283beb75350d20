"""`orch validate`, `plan` and `apply` warn on stderr about what they do not refuse: misspelled
NCCL variables, secrets too short to hide inside logs, and a server with no readiness check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import run_orch

NCCL_PLAYBOOK = """\
name: nccl
matrix:
  ch: [4]
vars:
  extra: {NCCL_ALGOO: Ring}
env:
  - NCCL_DEBUG: INFO
    NCCL_MIN_NCHANNEL: "{{ matrix.ch }}"
    NCCL_NOT_A_THING_AT_ALL: "1"
  - "{{ extra }}"
bench:
  command: [echo, hi]
"""


orch = run_orch


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_unknown_nccl_names_are_warned_with_the_nearest_known_one(
    tmp_path: Path, command: str
) -> None:
    (tmp_path / "pb.yml").write_text(NCCL_PLAYBOOK)
    proc = orch(tmp_path, command, "pb.yml")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert (
        "warning: pb.yml:8:5: env.NCCL_MIN_NCHANNEL: NCCL does not know this variable "
        "(did you mean NCCL_MIN_NCHANNELS?)" in lines
    ), proc.stderr
    far = "warning: pb.yml:9:5: env.NCCL_NOT_A_THING_AT_ALL: NCCL does not know this variable"
    assert far in lines, proc.stderr
    # A name only a template gives is checked as rendered, located at that template.
    assert (
        "warning: pb.yml:10:5: env.NCCL_ALGOO: NCCL does not know this variable "
        "(did you mean NCCL_ALGO?)" in lines
    ), proc.stderr
    assert "NCCL_DEBUG" not in proc.stderr
    assert len([line for line in lines if line.startswith("warning:")]) == 3
    assert "warning" not in proc.stdout


def test_known_nccl_names_give_no_warning(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(
        "name: ok\nenv:\n  NCCL_MIN_NCHANNELS: '4'\n  NCCL_ALGO: Ring\nbench:\n  command: [echo]\n"
    )
    proc = orch(tmp_path, "validate", "pb.yml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


SECRET_PLAYBOOK = """\
name: secrets
vars:
  my_password: pw
  long_token: long-enough-token-value
env:
  API_KEY: short
  HF_TOKEN: "{{ long_token }}"
bench:
  command: [echo, hi]
"""


@pytest.mark.parametrize("args", [["plan"], ["plan", "-v"], ["validate"]])
def test_short_secrets_are_named_once_and_never_shown(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "pb.yml").write_text(SECRET_PLAYBOOK)
    proc = orch(tmp_path, *args, "pb.yml", "-e", "MY_PASSWORD=tiny")
    assert proc.returncode == 0, proc.stderr
    warning = (
        "warning: secret values of API_KEY, MY_PASSWORD, my_password are shorter than 8 "
        "characters: hidden where orch writes them by name, not inside logs"
    )
    assert proc.stderr.splitlines().count(warning) == 1, proc.stderr
    for value in ("short", "tiny", "pw", "long-enough-token-value"):  # `shorter` is no leak
        assert not re.search(rf"\b{value}\b", proc.stdout + proc.stderr), value
    assert "HF_TOKEN" not in proc.stderr and "long_token" not in proc.stderr


def test_plan_notes_a_server_without_a_readiness_check(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(
        "name: srv\nserver:\n  command: [sleep, '60']\nbench:\n  command: [echo]\n"
    )
    proc = orch(tmp_path, "plan", "pb.yml")
    assert proc.returncode == 0, proc.stderr
    assert "note: pb.yml:2:1: server: no readiness check is declared" in proc.stdout, proc.stdout
    assert "stayed up 1s" in proc.stdout
    (tmp_path / "ready.yml").write_text(
        "name: srv\nserver:\n  command: [sleep, '60']\n  ready:\n    log: started\n"
        "bench:\n  command: [echo]\n"
    )
    proc = orch(tmp_path, "plan", "ready.yml")
    assert proc.returncode == 0, proc.stderr
    assert "readiness" not in proc.stdout


def test_apply_warns_once_per_run_about_short_secrets(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(
        "name: run\nmatrix:\n  n: [1, 2]\nenv:\n  API_KEY: short\nbench:\n  command: [echo, hi]\n"
    )
    proc = orch(tmp_path, "apply", "pb.yml", "--results", "res")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.count("warning: secret values of API_KEY are shorter than 8") == 1
    assert not re.search(r"\bshort\b", proc.stdout + proc.stderr)


VLLM_SESSION_PLAYBOOK = """\
name: vllm-sessions
matrix:
  prompts: [8, 16]
env: {env}
server:
  adapter: vllm
  args: {{model: /models/tiny}}
bench:
  adapter: vllm.bench_serve
  args: {{num-prompts: "{{{{ matrix.prompts }}}}"}}
"""


@pytest.mark.parametrize(
    ("env", "warned"),
    [("{}", True), ("{VLLM_SERVER_DEV_MODE: '1'}", False)],
)
def test_cells_sharing_a_vllm_server_that_refuses_resets_are_warned(
    tmp_path: Path, env: str, warned: bool
) -> None:
    (tmp_path / "pb.yml").write_text(VLLM_SESSION_PLAYBOOK.format(env=env))
    proc = orch(tmp_path, "plan", "pb.yml")
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stderr.splitlines() if "reset_prefix_cache" in line]
    if not warned:
        assert warning == [], proc.stderr
        return
    (line,) = warning
    assert line.startswith("warning: pb.yml:5:1: server: 1 vLLM server session(s) are shared")
    assert "VLLM_SERVER_DEV_MODE" in line and "restart: per_cell" in line


def test_plan_v_shows_what_the_adapter_adds_to_the_servers_environment(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(VLLM_SESSION_PLAYBOOK.format(env="{}"))
    proc = orch(tmp_path, "plan", "pb.yml", "-v")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.count("  env SPT_NOENV=1 (server only, set by the adapter)") == 2
    declared = VLLM_SESSION_PLAYBOOK.format(env="{SPT_NOENV: ''}")
    (tmp_path / "pb.yml").write_text(declared)
    proc = orch(tmp_path, "plan", "pb.yml", "-v")
    assert "set by the adapter" not in proc.stdout
    assert "  env SPT_NOENV=''" in proc.stdout.splitlines()

"""One secret rule: every path that asks "is this name a secret?" gives the same answer, and
rotating a secret never changes a cell id (ARCHITECTURE.md promises it)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cell import BenchSpec, Cell
from orchestrator.config.playbook import is_secret_name as playbook_is_secret_name
from orchestrator.runner.context import CellContext
from orchestrator.runner.probe import gather as probe
from orchestrator.runner.redaction import REDACTED, Redactor, is_secret_name
from orchestrator.secrets.redact import Redactor as BundleRedactor
from orchestrator.secrets.redact import redact_mapping, redact_text
from orchestrator.secrets.redact import secret_values as bundle_secret_values
from orchestrator.secrets.values import secret_values as controller_secret_values

# name -> secret? Every name is a valid env name, so it can travel every path.
NAMES = {
    "HF_TOKEN": True,
    "HFTOKEN": True,
    "hfToken": True,
    "GITHUB_AUTHTOKEN": True,
    "OPENAI_API_KEY": True,
    "OPENAI_APIKEY": True,
    "apiKey": True,
    "AWS_SECRET_ACCESS_KEY": True,
    "DB_PASSWORD": True,
    "MYSQL_PASSWD": True,
    "GOOGLE_APPLICATION_CREDENTIALS": True,
    "MY_SECRET": True,
    "SSH_KEYS": True,
    "KEY_PATH": True,  # a KEY part is secret even next to PATH (documented in the rule)
    "TOKENIZER_PATH": False,
    "TOKENIZERS_PARALLELISM": False,
    "MAX_TOKENS": False,
    "KEYBOARD": False,
    "MONKEY": False,
    "HOTKEYS": False,
    "NCCL_ALGO": False,
    "tp_size": False,
}
VALUE = "value-of-{}-1234"


def _value(name: str) -> str:
    return VALUE.format(name)


def _cell(env: dict[str, str]) -> Cell:
    return Cell(id="c", playbook="p", host="h", axes={}, env=env, bench=BenchSpec(argv=("true",)))


@pytest.mark.parametrize(("name", "secret"), sorted(NAMES.items()))
def test_the_rule_itself(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret
    assert playbook_is_secret_name(name) is secret  # the planner's import is the rule
    assert is_secret_name(name, declared=[name])  # a listed name is always secret


def test_every_path_gives_the_same_answer(tmp_path: Path) -> None:
    env = {name: _value(name) for name in NAMES}
    expected = {name for name, secret in NAMES.items() if secret}

    # planner: the cell's secret set, as `orch plan` plans it
    planned = _plan(tmp_path, env)[0]
    assert set(planned["secrets"]) == expected
    assert {k for k, v in planned["env"].items() if v == REDACTED} == expected

    # controller: the values it redacts from a cell that lists no secrets of its own
    values = set(controller_secret_values([_cell(env)]))
    assert {n for n in NAMES if _value(n) in values} == expected

    # bundle writer: by name in structured data, and the values it collects by name
    redacted = redact_mapping({"env": env}, ())["env"]
    assert {n for n, v in redacted.items() if v == REDACTED} == expected
    collected = set(bundle_secret_values(env))
    assert {n for n in NAMES if _value(n) in collected} == expected
    assert BundleRedactor is Redactor  # one value redactor on both sides

    # runner: the env it records (cell.json, server.json) and the values it scrubs
    payload: dict[str, Any] = {"run_id": "r", "cell": {"id": "c", "env": env, "bench": {}}}
    context = CellContext(payload, io.BytesIO())
    assert {n for n, v in context.redacted_env().items() if v == REDACTED} == expected
    scrubbed = context.redactor.text(" ".join(env.values()))
    assert {n for n in NAMES if _value(n) not in scrubbed} == expected

    # probe: the env it snapshots (only prefixed names are collected; VLLM_ is no secret part)
    snap = probe.collect_env({"VLLM_" + n: v for n, v in env.items()})
    assert {n for n in NAMES if snap["VLLM_" + n] == REDACTED} == expected


def test_one_value_redactor_for_text_and_files(tmp_path: Path) -> None:
    secret = 'p@ss"word-9'
    text = f"raw {secret} json {json.dumps(secret)}"
    assert redact_text(text, [secret]) == Redactor([secret]).text(text)
    assert secret not in Redactor([secret]).text(text)
    assert json.dumps(secret)[1:-1] not in Redactor([secret]).text(text)


PLAYBOOK = """\
name: rotate
vars:
  gh: ghp_first_value_1111
env:
  GITHUB_AUTHTOKEN: "{{ gh }}"
  HFTOKEN: hf_first_value_2222
  hfToken: hf_camel_value_3333
  MODEL: m
server:
  command: "python3 -m http.server 8000"
  port: 8000
bench:
  command: [echo, hi]
"""
INVENTORY = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"


def _plan(tmp_path: Path, env: dict[str, str] | None = None, *args: str) -> list[dict[str, Any]]:
    text = PLAYBOOK
    if env is not None:
        body = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in env.items())
        text = text.replace(text[text.index("env:\n") : text.index("server:")], "env:\n" + body)
    (tmp_path / "pb.yml").write_text(text)
    (tmp_path / "inv.yml").write_text(INVENTORY)
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", "pb.yml", "-i", "inv.yml", "--json", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    cells: list[dict[str, Any]] = json.loads(proc.stdout)
    return cells


def test_rotating_any_secret_keeps_every_cell_id(tmp_path: Path) -> None:
    first = _plan(tmp_path)
    rotated_var = _plan(tmp_path, None, "-e", "gh=ghp_rotated_value_9999")
    (tmp_path / "b").mkdir()
    env = {
        "GITHUB_AUTHTOKEN": "ghp_other_in_file_8888",
        "HFTOKEN": "hf_rotated_7777",
        "hfToken": "hf_rotated_camel_6666",
        "MODEL": "m",
    }
    rotated_env = _plan(tmp_path / "b", env)
    assert (
        [c["id"] for c in first] == [c["id"] for c in rotated_var] == [c["id"] for c in rotated_env]
    )
    assert set(first[0]["secrets"]) == {"GITHUB_AUTHTOKEN", "HFTOKEN", "hfToken"}
    (tmp_path / "c").mkdir()
    changed = _plan(tmp_path / "c", {**env, "MODEL": "n"})  # a value that is not secret counts
    assert changed[0]["id"] != first[0]["id"]


def test_the_runner_hides_every_node_parts_secrets_in_cell_json_and_by_value() -> None:
    """Issue 23 item 4: a head's cell.json listed the other nodes' env as planned."""
    part = {"host": "h2", "rank": 1, "env": {"NODE_API_KEY": "key-of-host-two-222", "N": "1"}}
    payload: dict[str, Any] = {
        "run_id": "r",
        "cell": {
            "id": "c",
            "env": {"NODE_API_KEY": "head-key-000000"},
            "bench": {},
            "nodes": [part],
        },
    }
    context = CellContext(payload, io.BytesIO())
    assert context.redacted_part(part)["env"] == {"NODE_API_KEY": REDACTED, "N": "1"}
    assert "key-of-host-two-222" not in context.redactor.text("log: key-of-host-two-222")

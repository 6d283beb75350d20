"""Redaction by name and by value: a planted token reaches no file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from results_helpers import PLANTED, files_containing, make_cell_dir

from orchestrator.runner.probe import gather as probe
from orchestrator.secrets import redact
from orchestrator.secrets.redact import (
    REDACTED,
    is_secret_name,
    redact_file,
    redact_mapping,
    redact_text,
    redact_tree,
    secret_values,
)


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "MYSQL_PASSWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "api-key",
        "apiKey",
        "hfToken",
        "GITHUB_AUTHTOKEN",
        "VLLM_API_KEY",
        "client_secret",
        "SSH_KEY",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "KEYBOARD_LAYOUT",
        "TOKENIZERS_PARALLELISM",
        "MAX_TOKENS",
        "max-total-tokens",
        "MONKEY_PATCH",
        "NCCL_ALGO",
        "CUDA_VISIBLE_DEVICES",
        "tokenizer-path",
        "PATH",
    ],
)
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_probe_and_redact_share_the_marker_and_the_rule() -> None:
    assert probe.REDACTED == REDACTED
    assert probe.is_secret_name("HF_TOKEN") and not probe.is_secret_name("MAX_TOKENS")


def test_redact_mapping_by_name_everywhere() -> None:
    data: dict[str, Any] = {
        "env": {"HF_TOKEN": "hf_abc", "NCCL_ALGO": "Ring", "EMPTY_TOKEN": ""},
        "secrets": ["HF_TOKEN", "MY_PRIVATE"],
        "argv": ["python3", "-m", "vllm", "--api-key", "sk-123", "--port", "8000"],
        "argv2": ["serve", "--api-key=sk-456", "--hf-token", "hf_x"],
        "command": "HF_TOKEN=hf_abc python3 serve.py --api-key sk-789 --tp 8",
        "nested": [{"password": 1234, "enabled": True, "ok": None}],
        "custom": {"MY_PRIVATE": "v1"},
        "flag": "--my-private v2 --x=1",
        "tuple": ("--api-key", "sk-tuple"),
    }
    out = redact_mapping(data, ["MY_PRIVATE"])
    assert out["env"] == {"HF_TOKEN": REDACTED, "NCCL_ALGO": "Ring", "EMPTY_TOKEN": ""}
    assert out["secrets"] == ["HF_TOKEN", "MY_PRIVATE"]  # names are not secrets
    assert out["argv"] == ["python3", "-m", "vllm", "--api-key", REDACTED, "--port", "8000"]
    assert out["argv2"] == ["serve", f"--api-key={REDACTED}", "--hf-token", REDACTED]
    assert out["command"] == f"HF_TOKEN={REDACTED} python3 serve.py --api-key {REDACTED} --tp 8"
    assert out["nested"] == [{"password": REDACTED, "enabled": True, "ok": None}]
    assert out["custom"] == {"MY_PRIVATE": REDACTED}
    assert out["flag"] == f"--my-private {REDACTED} --x=1"
    assert out["tuple"] == ("--api-key", REDACTED)
    assert data["env"]["HF_TOKEN"] == "hf_abc"  # a copy: the input is untouched


def test_secret_values_and_redact_text() -> None:
    env = {"HF_TOKEN": "hf_longer_value", "X_TOKEN": "abc", "MINE": 'p@ss"word', "A": "hf_x"}
    values = secret_values(env, ["MINE"])
    assert values == ["hf_longer_value", 'p@ss"word']  # short ones left out, longest first
    text = 'token hf_longer_value and {"v": "p@ss\\"word"} and raw p@ss"word'
    assert (
        redact_text(text, values)
        == f'token {REDACTED} and {{"v": "{REDACTED}"}} and raw {REDACTED}'
    )
    assert redact_text("héllo ünïcode-secret", ["ünïcode-secret"]) == f"héllo {REDACTED}"


def test_redact_tree_leaves_the_planted_token_in_no_file(tmp_path: Path) -> None:
    cell = make_cell_dir(tmp_path, "cell-1")
    (cell / "binary.bin").write_bytes(b"\x00\x01\xff" + PLANTED.encode() + b"\x00\xfe")
    (cell / "latin1.log").write_bytes(b"caf\xe9 " + PLANTED.encode() + b"\n")
    outside = tmp_path / "outside.txt"
    outside.write_text(PLANTED)
    (cell / "link.txt").symlink_to(outside)
    untouched = cell / "setup.log"
    before = untouched.stat().st_mtime_ns
    assert len(files_containing(cell, PLANTED)) >= 4

    report = redact_tree(cell, [PLANTED])

    assert files_containing(cell, PLANTED) == []
    assert report.replacements >= 5 and cell / "server.log" in report.files
    assert outside.read_text() == PLANTED  # links are not followed
    assert untouched.stat().st_mtime_ns == before  # files without secrets are not rewritten
    for path in cell.rglob("*.json"):
        json.loads(path.read_text())  # still valid JSON
    check = json.loads((cell / "env_check.json").read_text())
    assert check["processes"][0]["vars"]["HF_TOKEN"]["observed"] == REDACTED
    assert (cell / "binary.bin").read_bytes() == b"\x00\x01\xff" + REDACTED.encode() + b"\x00\xfe"
    assert not [p for p in cell.rglob("*") if p.name.endswith(".tmp")]


def test_redact_file_catches_a_value_straddling_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redact, "_CHUNK", 7)
    path = tmp_path / "big.log"
    body = ("x" * 5 + PLANTED + "y" * 3) * 20
    path.write_text(body)
    os.chmod(path, 0o640)
    assert redact_file(path, [PLANTED]) == 20
    assert path.read_text() == ("x" * 5 + REDACTED + "y" * 3) * 20
    assert path.stat().st_mode & 0o777 == 0o640


def test_nothing_to_redact_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("abc")
    assert redact_tree(tmp_path, []).files == []
    assert redact_tree(tmp_path, ["ab"]).files == []  # too short to be treated as a secret
    assert (tmp_path / "a").read_text() == "abc"


def test_secret_values_in_finds_values_under_secret_names_at_any_depth() -> None:
    data = {
        "vars": {"db": {"password": "pw-deep-1"}, "model": "public"},
        "env": [{"HF_TOKEN": "hf_listitem"}, {"HF_TOKEN": "{{ hf_token }}"}],
        "server": {"args": {"api-key": 123456, "use-api-key": True, "license": "LIC-1"}},
        "secrets": ["license"],
    }
    got = redact.secret_values_in(data, ["license"])
    # a template that only names a variable, a bool and the `secrets:` list are no secrets
    assert got == ["hf_listitem", "pw-deep-1", "123456", "LIC-1"]


def test_redact_yaml_text_hides_every_style_and_stays_yaml() -> None:
    import yaml

    text = (
        "# a comment stays\n"
        "vars:\n"
        "  hf_token: hf_plain_AAA1   # inline comment\n"
        "  api_key: 'single-q-BBB2'\n"
        '  nested: {password: "dq-\\u00e9-CCC3", model: m}\n'
        "  pass_token: &tok anchored-DDD4\n"
        "  again: *tok\n"
        "  license: |\n"
        "    block-EEE5\n"
        "    second line\n"
        "  after: kept\n"
        "  use_key: true\n"
        "  empty_key: ~\n"
        "env: {HF_TOKEN: '{{ hf_token }}'}\n"
    )
    out, values = redact.redact_yaml_text(text, ["license"])
    for secret in ("hf_plain_AAA1", "single-q-BBB2", "CCC3", "anchored-DDD4", "block-EEE5"):
        assert secret not in out
    assert "# a comment stays" in out and "# inline comment" in out
    data = yaml.safe_load(out)
    assert data["vars"] == {
        "hf_token": REDACTED,
        "api_key": REDACTED,
        "nested": {"password": REDACTED, "model": "m"},
        "pass_token": REDACTED,
        "again": REDACTED,
        "license": REDACTED,
        "after": "kept",
        "use_key": True,
        "empty_key": None,
    }
    assert data["env"] == {"HF_TOKEN": "{{ hf_token }}"}  # a reference, not a secret
    assert set(values) == {
        "hf_plain_AAA1",
        "single-q-BBB2",
        "dq-é-CCC3",
        "anchored-DDD4",
        "block-EEE5\nsecond line\n",
    }


def test_redact_yaml_text_keeps_json_json_and_leaves_non_yaml_alone() -> None:
    out, values = redact.redact_yaml_text('{"hf_token": "hf_json_value", "n": 1}')
    assert json.loads(out) == {"hf_token": REDACTED, "n": 1}
    assert values == ["hf_json_value"]
    broken = "vars: {hf_token: [unclosed\n"
    assert redact.redact_yaml_text(broken) == (broken, [])


def test_redact_yaml_file_rewrites_in_place_keeping_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "base.yml"
    path.write_text("vars:\n  hf_token: hf_in_a_base_file\n")
    path.chmod(0o640)
    assert redact.redact_yaml_file(path) == ["hf_in_a_base_file"]
    assert path.read_text() == f'vars:\n  hf_token: "{REDACTED}"\n'
    assert path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["base.yml"]


def test_hide_secret_extra_vars_shows_a_placeholder_for_every_secret_form() -> None:
    import shlex

    argv = [
        "orch", "apply", "p.yml",
        "-e", 'hf_token=hf_real model=m "note=a b"',
        "-e", "@secrets.yml",
        "-e", '{"api_key": "k-real", "db": {"password": 7}, "n": 1}',
        "--extra-vars=license=LIC-real",
        "-ehf_token=***REDACTED***",  # as run.json records it
        "-e", "url=https://u:***REDACTED***@host/r.git",
        "--limit", "h1",
    ]  # fmt: skip
    shown = shlex.join(redact.hide_secret_extra_vars(argv, ["license"]))
    assert shown == (
        "orch apply p.yml -e 'hf_token=<secret> model=m '\"'\"'note=a b'\"'\"'' -e @secrets.yml "
        '-e \'{"api_key": "<secret>", "db": {"password": "<secret>"}, "n": 1}\' '
        "'--extra-vars=license=<secret>' '-ehf_token=<secret>' -e 'url=<secret>' --limit h1"
    )
    for secret in ("hf_real", "k-real", "LIC-real", REDACTED):
        assert secret not in shown
    assert shlex.split(shown)[4] == "hf_token=<secret> model=m 'note=a b'"  # one -e, as given


@pytest.mark.parametrize("side", ["controller", "host"])
def test_a_json_file_stays_json_when_a_secret_is_a_number(tmp_path: Path, side: str) -> None:
    """`db_password: 12345678` is a YAML int: replaced as bytes it would leave
    `"password": ***REDACTED***`, and the cell's JSON could no longer be read."""
    from orchestrator.runner.redaction import Redactor

    doc = {"password": 12345678, "port": 30000, "url": "http://u:s3cr3t-pw@h/x", "n": [12345678]}
    path = tmp_path / "server_info.json"
    path.write_text(json.dumps(doc))
    secrets = ["12345678", "s3cr3t-pw"]
    if side == "controller":
        assert redact_file(path, secrets) == 3
    else:
        assert Redactor(secrets).file(str(path)) is True
    assert json.loads(path.read_text()) == {
        "password": "***REDACTED***",
        "port": 30000,
        "url": "http://u:***REDACTED***@h/x",
        "n": ["***REDACTED***"],
    }
    twice = tmp_path / "twice.json"  # parsing keeps the last duplicate: redacted as bytes
    twice.write_text('{"token": "s3cr3t-pw", "token": "other"}')
    if side == "controller":
        assert redact_file(twice, secrets) == 1
    else:
        assert Redactor(secrets).file(str(twice)) is True
    assert "s3cr3t-pw" not in twice.read_text()
    broken = tmp_path / "broken.json"  # not JSON after all: redacted as bytes
    broken.write_text('{"password": 12345678,')
    if side == "controller":
        assert redact_file(broken, secrets) == 1
    else:
        assert Redactor(secrets).file(str(broken)) is True
    assert broken.read_text() == '{"password": ***REDACTED***,'


def test_every_scalar_under_a_secret_name_is_secret_but_the_secrets_list_is_names() -> None:
    text = (
        "secrets: [opaque_name, other_name]\n"
        "vars:\n"
        "  api_keys: [sk-listsecret-0001, sk-listsecret-0002]\n"
        "  credentials:\n"
        "    primary: {user: bench, pass: pw-nested-0003}\n"
        "  model: /models/x\n"
    )
    out, values = redact.redact_yaml_text(text)
    assert sorted(values) == ["bench", "pw-nested-0003", "sk-listsecret-0001", "sk-listsecret-0002"]
    loaded = yaml.safe_load(out)
    assert loaded["vars"]["api_keys"] == ["***REDACTED***", "***REDACTED***"]
    assert loaded["vars"]["credentials"]["primary"]["pass"] == "***REDACTED***"
    assert loaded["secrets"] == ["opaque_name", "other_name"]  # names, kept
    assert loaded["vars"]["model"] == "/models/x"
    data = yaml.safe_load(text)
    assert set(redact.secret_values_in(data)) == set(values)

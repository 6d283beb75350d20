"""Error messages name the key, never a secret's value nor the lines of a file that is not ours.

Issue 10, item 4: `ready.timeout: "{{ hf_token }}"` printed the token; `-e 'hf_token=X junk'`
echoed X; `vars_files: [/etc/shadow]`, `-e @/etc/shadow`, `-i /etc/shadow` and
`--limit @/etc/shadow` printed the file's lines. Each is driven through the real CLI here, with
a shadow-like file of our own (the real one is not readable everywhere).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_helpers import run_orch

TOKEN = "hf_ERRSECRET_5150abcdef"
RAW = "RAWPIECE_77aa88bb99"  # not secret by name: a secret's template reads it
SHADOW_LINES = [
    "root:$6$Zr8sQpLm$Qh7wYt2kP0vN9cXbR4eA1uJ6dS3fG5hK8lM0nB2vC4xZ7qW9eR1tY3uI5oP7aS9dF:19000:0:99999:7:::",
    "daemon:*:19000:0:99999:7:::",
    "alice:$y$j9T$abcdefghijklmnopqrstuv$SECRETHASHxyz0123456789ABCDEFG:19001:0:99999:7:::",
]
PASSWD_LINES = [
    "root:x:0:0:root:/root:/bin/bash",
    "list:x:38:38:Mailing List Manager:/var/list:/usr/sbin/nologin",
]
PLAYBOOK = """
name: leaks
vars:
  hf_token: {token}
  tok: {raw}
env:
  HF_TOKEN: "Bearer {{{{ tok }}}}"
server:
  command: ["python3", "-m", "http.server", "18431"]
  port: 18431
  ready: {{path: /, timeout: {timeout}}}
bench:
  command: [echo, "x 1"]
  metrics: {{x: 'x ([0-9]+)'}}
"""


_orch = run_orch


def _playbook(tmp: Path, timeout: str = "30", head: str = "") -> Path:
    text = PLAYBOOK.format(token=TOKEN, raw=RAW, timeout=timeout)
    path = tmp / "pb.yml"
    path.write_text(head + text)
    return path


def _refused(proc: subprocess.CompletedProcess[str], *never: str) -> str:
    """The message of an exit-2 refusal, checked to hold none of `never` and no traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and "internal error" not in out, out
    for text in never:
        assert text not in out, f"{text!r} leaked: {out}"
    return out


def _shadow_pieces() -> list[str]:
    """The hashes, the day counts and each line's start (`root:$6$`): none may be printed."""
    fields = {f for line in SHADOW_LINES for f in line.split(":") if "$" in f or f.isdigit()}
    return sorted((fields - {"0", "7"}) | {line[: line.index(":") + 3] for line in SHADOW_LINES})


@pytest.mark.parametrize("timeout", ['"{{ hf_token }}"', '"{{ tok }}"'])
def test_a_secret_rendered_into_a_checked_field_is_named_not_shown(
    tmp_path: Path, timeout: str
) -> None:
    out = _refused(_orch(tmp_path, "plan", str(_playbook(tmp_path, timeout))), TOKEN, RAW)
    assert "server.ready.timeout: expected a number, got a secret value" in out


def test_a_short_secret_from_the_command_line_is_named_not_shown(tmp_path: Path) -> None:
    # under 8 characters: never replaced inside text, but a message showing it whole hides it
    pb = _playbook(tmp_path, '"{{ tok }}"')
    out = _refused(_orch(tmp_path, "validate", str(pb), "-e", "tok=abc12"), "abc12")
    assert "got a secret value" in out


@pytest.mark.parametrize(
    ("argument", "never"),
    [
        ("hf_token=X junk", ["hf_token=X", "junk"]),
        ("a=1 hf_token=sk-live-9 zebra quokka", ["sk-live-9", "zebra", "quokka"]),
        ("hf_token: hf_yaml_style_secret", ["hf_yaml_style_secret"]),
        ('{"hf_token": hf_flow_secret_77, x', ["hf_flow_secret_77"]),
        ('hf_token={"nested": "hf_nested_secret"}', ["hf_nested_secret"]),
    ],
)
def test_a_bad_extra_var_never_echoes_a_secret(
    tmp_path: Path, argument: str, never: list[str]
) -> None:
    out = _refused(_orch(tmp_path, "validate", str(_playbook(tmp_path)), "-e", argument), *never)
    assert "hf_token" in out  # the key is named


def test_a_bad_extra_var_without_secrets_is_still_quoted(tmp_path: Path) -> None:
    out = _refused(_orch(tmp_path, "validate", str(_playbook(tmp_path)), "-e", "junk"))
    assert "'junk' is not name=value" in out


def test_files_that_are_not_ours_are_never_echoed(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.write_text("\n".join(SHADOW_LINES) + "\n")
    passwd = tmp_path / "passwd"
    passwd.write_text("\n".join(PASSWD_LINES) + "\n")
    never = _shadow_pieces()
    pb = _playbook(tmp_path)
    with_vars_file = _playbook(tmp_path, head=f"vars_files: [{shadow}]\n")
    cases = [
        ("validate", str(with_vars_file)),
        ("plan", str(pb), "-e", f"@{shadow}"),
        ("plan", str(pb), "-i", str(shadow)),
        ("plan", str(pb), "--limit", f"@{shadow}"),
        ("validate", str(shadow)),
        ("facts", "--limit", f"@{shadow}"),
    ]
    for args in cases:
        out = _refused(_orch(tmp_path, *args), *never)
        assert str(shadow) in out, out  # where: the file is named
    passwd_never = ["root:x", "/bin/bash", "Mailing", "List"]
    for args in [
        ("plan", str(pb), "-i", str(passwd)),
        ("plan", str(pb), "-e", f"@{passwd}"),
        ("validate", str(passwd)),
    ]:
        out = _refused(_orch(tmp_path, *args), *passwd_never)
        assert str(passwd) in out, out


def test_a_limit_file_line_that_matches_nothing_is_named_by_number(tmp_path: Path) -> None:
    limit = tmp_path / "retry"
    limit.write_text("localhost\nno-such-host-xyz\n")
    out = _refused(_orch(tmp_path, "plan", str(_playbook(tmp_path)), "--limit", f"@{limit}"))
    assert f"--limit @{limit}: line 2 matches no host" in out
    assert "no-such-host-xyz" not in out
    limit.write_text("localhost\n")
    ok = _orch(tmp_path, "plan", str(_playbook(tmp_path)), "--limit", f"@{limit}")
    assert ok.returncode == 0, ok.stderr

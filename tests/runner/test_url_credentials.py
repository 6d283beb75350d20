"""URL credentials are secret wherever they are written: one rule in the Redactor, used by the
runner (every file and event of a cell) and the controller (plan, run, inventory, messages)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runner.redaction import REDACTED, Redactor, mask_url_credentials


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("https://user:pw@host/r.git", f"https://{REDACTED}@host/r.git"),
        ("clone https://ghp_abc123@github.com/o/r", f"clone https://{REDACTED}@github.com/o/r"),
        ("ssh://git:pw@host/r", f"ssh://git:{REDACTED}@host/r"),
        ("ssh://git@host/r", "ssh://git@host/r"),  # a login name, not a secret
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),  # scp form: no password possible
        ("https://host/r.git, mail me@example.com", "https://host/r.git, mail me@example.com"),
        (f"https://{REDACTED}@host/r", f"https://{REDACTED}@host/r"),  # already masked
    ],
)
def test_url_credentials_are_masked(text: str, want: str) -> None:
    assert mask_url_credentials(text)[0] == want
    assert Redactor([]).text(text) == want


def test_files_are_masked_even_without_secret_values(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"x" * 5000 + b" fetching https://bob:hunter2@git.example/r.git\n" * 3)
    doc = tmp_path / "repo.json"
    doc.write_text('{"url": "https://bob:hunter2@git.example/r.git", "n": 1}\n')
    plain = tmp_path / "plain.txt"
    plain.write_text("nothing to see at https://git.example/r.git\n")
    before = plain.stat().st_mtime_ns
    changed = dict(Redactor([]).tree(str(tmp_path), chunk=1024))
    assert changed == {str(log): 3, str(doc): 1}
    assert b"hunter2" not in log.read_bytes() and b"bob" not in log.read_bytes()
    assert f"https://{REDACTED}@git.example/r.git" in doc.read_text()
    assert plain.stat().st_mtime_ns == before  # a file with nothing to hide is not rewritten


def test_a_match_across_chunks_is_masked(tmp_path: Path) -> None:
    path = tmp_path / "f"
    head = b"a" * 1020
    path.write_bytes(head + b" https://user:secretpw@h/r\n")
    assert Redactor([]).count_file(str(path), chunk=1024) == 1
    assert b"secretpw" not in path.read_bytes()

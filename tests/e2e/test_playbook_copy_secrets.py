"""The bundle's `playbook/` copy keeps no raw value a secret is built from (issue 10, item 4).

`HF_TOKEN: "Bearer {{ tok }}"` made the rendered token secret, but `tok`'s own value stayed in
the copied playbook and vars file. A variable a secret's template reads is secret too, in
whichever copied file defines it, and the copies stay valid YAML.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from bundle_helpers import ok, orch

IN_VARS_FILE = "TOKVALUEraw99887766"  # read by HF_TOKEN's template, defined in a vars file
INLINE = "INLINEraw55443322"  # read through a chain: key_part -> inline_tok
FROM_CLI = "CLIVALUEraw11223344"  # -e value of a variable a secret's template reads

PLAYBOOK = """\
name: copy-secrets
vars_files: [vars.yml]
vars:
  inline_tok: INLINEraw55443322
  key_part: "k-{{ inline_tok }}"
  cli_part: unset
env:
  HF_TOKEN: "Bearer {{ tok }}"
  OTHER_KEY: "{{ key_part }}"
  THIRD_TOKEN: "x{{ cli_part }}"
bench:
  command: ["{{ orch_python }}", "-c", "print('x 1')"]
  metrics: {x: 'x ([0-9]+)'}
"""


@pytest.mark.slow
def test_values_read_by_a_secret_template_leave_no_trace(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    (tmp_path / "vars.yml").write_text(f"tok: {IN_VARS_FILE}\n")
    result = orch(
        "apply",
        "pb.yml",
        "--results",
        "results",
        "-e",
        f"cli_part={FROM_CLI}",
        home=tmp_path / "home",
        cwd=tmp_path,
    )
    ok(result)
    (bundle,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    for value in (IN_VARS_FILE, INLINE, FROM_CLI):
        leaks = [p for p in bundle.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]
        assert leaks == [], (value, leaks)
        assert value not in result.stdout + result.stderr
    copies = bundle / "playbook"
    assert yaml.safe_load((copies / "vars.yml").read_text()) == {"tok": "***REDACTED***"}
    copied = yaml.safe_load((copies / "pb.yml").read_text())
    assert copied["vars"]["inline_tok"] == "***REDACTED***"
    assert copied["bench"]["command"][-1] == "print('x 1')"  # the rest is kept as written

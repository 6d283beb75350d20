"""`orch plan` never prints a secret value: its output ends up in CI logs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PLAYBOOK = """
name: demo
vars:
  hf_token: hf_PLANSECRET_4242
  db_password: pw-hunter2-xyz
  opaque: zz-opaque-val-4242
  api_key: "sk-it's-a-secret"
secrets: [opaque]
env:
  HF_TOKEN: "{{ hf_token }}"
  MY_API_KEY: sk-plainsecret-998877
server:
  command: "python3 -m http.server --bind {{ db_password }} {{ opaque }} {{ api_key }}"
  port: 8000
bench:
  command: [echo, "{{ hf_token }}"]
"""
SECRETS = ["hf_PLANSECRET_4242", "pw-hunter2-xyz", "zz-opaque-val-4242", "sk-plainsecret-998877",
           "sk-it", "s-a-secret"]  # fmt: skip


def test_plan_output_in_every_form_hides_secret_values(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                         "      node_password: host-secret-777\n")  # fmt: skip
    for args in ([], ["-v"], ["--json"], ["-e", "hf_token=hf_FROM_CLI_1234"]):
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", "plan", "pb.yml", "-i", "inv.yml", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        for secret in [*SECRETS, "hf_FROM_CLI_1234"]:
            assert secret not in proc.stdout + proc.stderr, (args, secret)
        if args in (["-v"], ["--json"]):
            assert "***REDACTED***" in proc.stdout

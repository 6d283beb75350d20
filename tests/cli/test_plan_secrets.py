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


NODE_PLAYBOOK = """
name: two-node
hosts: all
env:
  NODE_API_KEY: "{{ node_key }}"
  NODE_PASSWORD: "k{{ node_rank }}x"
server:
  command: "python3 -m http.server {{ head_port }}"
  port: 8000
  nodes: 2
bench:
  command: [echo, hi]
"""


def test_each_node_parts_secrets_are_hidden_in_every_view(tmp_path: Path) -> None:
    """Issue 23 item 4: host2's own `node_key` (and a short value built in a template) was
    printed under the node part's env by `plan --json` and written to plan.json."""
    (tmp_path / "pb.yml").write_text(NODE_PLAYBOOK)
    (tmp_path / "inv.yml").write_text(
        "all:\n  hosts:\n"
        "    h1: {ansible_connection: local, node_key: key-of-host-one-111}\n"
        "    h2: {ansible_connection: local, node_key: key-of-host-two-222}\n"
    )
    for args in (["--json"], ["-v"], []):
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", "plan", "pb.yml", "-i", "inv.yml", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        for secret in ("key-of-host-one-111", "key-of-host-two-222", "k1x"):
            assert secret not in proc.stdout + proc.stderr, (args, secret)
    from orchestrator.app.plan import load_plan
    from orchestrator.secrets.redact import cell_json_by_name

    plan = load_plan(tmp_path / "pb.yml", [tmp_path / "inv.yml"])
    (cell,) = plan.cells
    assert cell.nodes[0].env["NODE_API_KEY"] == "key-of-host-two-222"  # as the node runs it
    shown = cell_json_by_name(cell)  # plan.json's and `plan --json`'s form
    assert shown["nodes"][0]["env"] == {
        "NODE_API_KEY": "***REDACTED***",
        "NODE_PASSWORD": "***REDACTED***",
    }
    assert "key-of-host-two-222" in plan.secrets  # and swept by value wherever else it lands

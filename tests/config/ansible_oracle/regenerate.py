"""Write expected.json: ansible-core's own resolution of the oracle inventory (not a test).

Run with ansible-core installed (`pip install ansible-core`, kept out of orch's dependencies):
`python tests/config/ansible_oracle/regenerate.py`. It resolves inventory/hosts.yml and
inventory/hosts.ini with playbook/ as the playbook directory, checks that Ansible reads both
forms alike, and records every host's vars, every group and the hosts of each pattern.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PATTERNS = [
    "gpu",
    "gpu:!h200",
    "gpu:&canary",
    "h100-0*",
    "~h200-[ab]",
    "canary,sparse",
    "gpu[0]",
    "cpu[1:2]",
    "all:!gpu:!cpu",
    "canary:sparse:&cpu",
]


def _run(*argv: str) -> str:
    return subprocess.run(
        argv, cwd=HERE / "playbook", check=True, capture_output=True, text=True
    ).stdout


def resolve(inventory: str) -> dict[str, Any]:
    """Hostvars, groups and pattern results as ansible-core gives them for one inventory file."""
    source = str(HERE / "inventory" / inventory)
    listed = json.loads(_run("ansible-inventory", "-i", source, "--playbook-dir", ".", "--list"))
    meta = listed.pop("_meta")
    patterns = {}
    for pattern in PATTERNS:
        out = _run("ansible", "-i", source, "--playbook-dir", ".", pattern, "--list-hosts")
        patterns[pattern] = [line.strip() for line in out.splitlines()[1:] if line.strip()]
    return {"hostvars": meta["hostvars"], "groups": listed, "patterns": patterns}


def main() -> None:
    """Resolve both forms, insist they agree, and write expected.json."""
    yaml_form, ini_form = resolve("hosts.yml"), resolve("hosts.ini")
    assert yaml_form == ini_form, "ansible-core reads hosts.yml and hosts.ini differently"
    version = _run("ansible", "--version").splitlines()[0]
    text = json.dumps({"ansible": version, **yaml_form}, indent=2, sort_keys=True)
    (HERE / "expected.json").write_text(text + "\n")


if __name__ == "__main__":
    main()

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


def _run(*argv: str, cwd: Path = HERE / "playbook") -> str:
    return subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True).stdout


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


# Edges where orch once differed from ansible-core: IPv6 with a port, one vars file per name
# (the first found), host order (a group's own hosts before its children's; `ungrouped` first)
EDGES: dict[str, list[str]] = {
    "edges/ipv6.ini": ["all", "v6"],
    "[::1]:2200,gpu:22,[::3],": ["all"],
    "edges/vars/hosts.ini": ["all"],
    "edges/order.ini": ["all", "gpu", "gpu,zeta", "g*", "all:!h100", "ungrouped", "gpu[0]"],
    "edges/order.yml": ["all", "*", "gpu_nodes", "web1,h100", "spot,gpu_nodes", "all[0]"],
}


def resolve_edges() -> dict[str, Any]:
    """Hostvars and pattern results of each edge source, as ansible-core gives them."""
    out: dict[str, Any] = {}
    for name, patterns in EDGES.items():
        source = str(HERE / name) if (HERE / name).exists() else name
        listed = json.loads(_run("ansible-inventory", "-i", source, "--list", cwd=HERE / "edges"))
        found = {}
        for pattern in patterns:
            text = _run("ansible", "-i", source, pattern, "--list-hosts", cwd=HERE / "edges")
            found[pattern] = [line.strip() for line in text.splitlines()[1:] if line.strip()]
        out[name] = {"hostvars": listed["_meta"]["hostvars"], "patterns": found}
    return out


def main() -> None:
    """Resolve both forms, insist they agree, and write expected.json and edges.json."""
    yaml_form, ini_form = resolve("hosts.yml"), resolve("hosts.ini")
    assert yaml_form == ini_form, "ansible-core reads hosts.yml and hosts.ini differently"
    version = _run("ansible", "--version").splitlines()[0]
    text = json.dumps({"ansible": version, **yaml_form}, indent=2, sort_keys=True)
    (HERE / "expected.json").write_text(text + "\n")
    edges = {"ansible": version, **resolve_edges()}
    (HERE / "edges.json").write_text(json.dumps(edges, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

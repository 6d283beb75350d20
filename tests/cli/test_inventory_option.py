"""`-i` through the real CLI: directories, repeated -i, INI files, host lists, ANSIBLE_INVENTORY
and the group_vars/ beside the playbook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLAYBOOK = "name: demo\nhosts: gpus\nbench:\n  command: [echo, '{{ inventory_hostname }}']\n"


def plan(
    cwd: Path, *args: str, env: dict[str, str] | None = None, playbook: str = "pb.yml"
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "ANSIBLE_INVENTORY"}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", playbook, "--json", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, **(env or {})},
    )


def test_a_directory_and_a_file_make_one_inventory(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "hosts.yml").write_text("gpus:\n  hosts:\n    g1:\n")
    (tmp_path / "extra.yml").write_text("gpus:\n  hosts:\n    g2:\n")

    both = plan(tmp_path, "-i", "site", "-i", "extra.yml")
    assert both.returncode == 0, both.stderr
    cells = json.loads(both.stdout)
    assert [(c["host"], c["bench"]["argv"]) for c in cells] == [
        ("g1", ["echo", "g1"]),
        ("g2", ["echo", "g2"]),
    ]

    one = plan(tmp_path, "-i", "site")
    assert one.returncode == 0, one.stderr
    assert [c["host"] for c in json.loads(one.stdout)] == ["g1"]


def test_an_empty_directory_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    (tmp_path / "inv").mkdir()
    proc = plan(tmp_path, "-i", "inv")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[0] == (
        "error: inv: inventory directory inv holds no inventory files"
        " (put a YAML or JSON inventory such as hosts.yml in it; group_vars/, host_vars/ and"
        " ignored extensions (.md, .cfg, .bak, ...) do not count)"
    )
    assert "Traceback" not in proc.stderr


VARS_PLAYBOOK = (
    "name: demo\nhosts: all\nbench:\n  command:\n"
    "    [echo, '{{ inventory_hostname }}', '{{ nccl }}', '{{ ansible_port | default(22) }}']\n"
)


def cells_of(proc: subprocess.CompletedProcess[str]) -> list[tuple[str, list[str]]]:
    assert proc.returncode == 0, proc.stderr
    return [(c["host"], c["bench"]["argv"]) for c in json.loads(proc.stdout)]


def test_an_ini_inventory_a_host_list_and_playbook_group_vars(tmp_path: Path) -> None:
    play = tmp_path / "play"
    (play / "group_vars").mkdir(parents=True)
    (play / "pb.yml").write_text(VARS_PLAYBOOK)
    (play / "group_vars" / "all.yml").write_text("nccl: ring\n")
    (play / "group_vars" / "gpu.yml").write_text("nccl: tree\n")  # beats the inventory's
    (tmp_path / "site" / "group_vars").mkdir(parents=True)
    (tmp_path / "site" / "hosts.ini").write_text("[gpu]\ng1 ansible_port=2201\n")
    (tmp_path / "site" / "group_vars" / "gpu.yml").write_text("nccl: inventory\n")

    from_ini = plan(play, "-i", "../site/hosts.ini")
    assert cells_of(from_ini) == [("g1", ["echo", "g1", "tree", "2201"])]

    listed = plan(play, "-i", "h1,h2:2222,")
    assert cells_of(listed) == [
        ("h1", ["echo", "h1", "ring", "22"]),
        ("h2", ["echo", "h2", "ring", "2222"]),
    ]

    one = plan(play, "-i", "h1,")
    assert cells_of(one) == [("h1", ["echo", "h1", "ring", "22"])]


def test_ansible_inventory_is_the_default_inventory(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    (tmp_path / "a.yml").write_text("gpus:\n  hosts:\n    g1:\n")
    (tmp_path / "b.ini").write_text("[gpus]\ng2\n")
    both = plan(tmp_path, env={"ANSIBLE_INVENTORY": "a.yml,b.ini"})
    assert [host for host, _ in cells_of(both)] == ["g1", "g2"]
    given = plan(tmp_path, "-i", "b.ini", env={"ANSIBLE_INVENTORY": "a.yml,b.ini"})
    assert [host for host, _ in cells_of(given)] == ["g2"]  # -i wins, as in Ansible


def test_an_ini_error_is_one_located_message(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts").write_text("[gpus]\ng1\n\n[gpus:var]\nx=1\n")
    proc = plan(tmp_path, "-i", "hosts")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: hosts:4:1: section [gpus:var] has unknown type 'var' (a section is [group],"
        " [group:vars] or [group:children]) (did you mean 'vars'?)"
    ]


def test_ipv6_hosts_with_ports_and_the_heads_order_follow_ansible(tmp_path: Path) -> None:
    """Issue 23 item 13: `[fe80::1]:2224` in INI was refused and `-i '[::1]:2200,'` made a host
    named `[::1]:2200`; a group's own hosts come before its children's, as in ansible-core."""
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.ini").write_text(
        "[gpus:children]\nold\n[old]\nh-old\n[gpus]\n[fe80::1]:2224\n"
    )
    ini = plan(tmp_path, "-i", "hosts.ini")
    assert ini.returncode == 0, ini.stderr
    assert [c["host"] for c in json.loads(ini.stdout)] == ["fe80::1", "h-old"]
    (tmp_path / "all.yml").write_text("name: demo\nhosts: all\nbench:\n  command: [echo, x]\n")
    listed = plan(tmp_path, "-i", "[::1]:2200,", playbook="all.yml")
    assert listed.returncode == 0, listed.stderr
    assert [c["host"] for c in json.loads(listed.stdout)] == ["::1"]

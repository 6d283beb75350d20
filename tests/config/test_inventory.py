"""Ansible inventories: ranges, precedence, group_vars/host_vars, the JSON form, connection vars."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.config.inventory.load import expand_host_range, load_inventory
from orchestrator.errors import InputError, SourceLocation

REPO = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("gpu[01:03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[8:10]", ["gpu8", "gpu9", "gpu10"]),
        ("node[a:c].lan", ["nodea.lan", "nodeb.lan", "nodec.lan"]),
        ("x[1:10:4]", ["x1", "x5", "x9"]),
        ("r[1:2]n[a:b]", ["r1na", "r1nb", "r2na", "r2nb"]),
        ("[:2]x", ["0x", "1x", "2x"]),
        ("plain", ["plain"]),
    ],
)
def test_host_ranges(pattern: str, names: list[str]) -> None:
    assert expand_host_range(pattern) == names


@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        ("gpu[3:1]", "runs backwards"),
        ("gpu[1]", "[begin:end]"),
        ("gpu[1:]", "has no end"),
        ("gpu[1:5:0]", "step must be 1 or more"),
        ("gpu[01:100]", "same width"),
        ("gpu[a:3]", "numbers (01:16) or single letters"),
        ("gpu[1:3", "unbalanced brackets"),
    ],
)
def test_bad_ranges(pattern: str, needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        expand_host_range(pattern)


def test_the_example_inventory() -> None:
    inv = load_inventory(REPO / "inventories" / "example.yml")
    assert list(inv.hosts)[:5] == ["h100-01", "h100-02", "h100-03", "h100-04", "h200-01"]
    h100 = inv.hosts["h100-02"]
    assert h100.groups == ("gpu_nodes", "h100")
    assert h100.user == "bench" and h100.python == "/usr/bin/python3"
    assert h100.key_file == "~/.ssh/bench_ed25519"  # from group_vars/h100.yml
    h200 = inv.hosts["h200-02"]
    assert (h200.address, h200.port, h200.target) == ("10.20.0.12", 2222, "10.20.0.12")
    assert inv.hosts["localhost"].connection == "local"
    assert inv.group_members("gpu_nodes") == tuple(list(inv.hosts)[:6])


PRECEDENCE = """\
all:
  vars: {v: all, only_all: 1}
  children:
    parent:
      vars: {v: parent, p: 1}
      children:
        child:
          vars: {v: child}
          hosts:
            h1: {v: host}
            h2:
    zeta:
      vars: {v: zeta}
      hosts:
        h2:
    alpha:
      vars: {v: alpha}
      hosts:
        h2:
"""


def test_precedence_all_parent_child_host(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path / "inv.yml", PRECEDENCE))
    h1 = inv.hosts["h1"]
    assert h1.vars == {"v": "host", "only_all": 1, "p": 1}
    assert h1.groups == ("child", "parent")
    # h2: child (depth 2) beats alpha and zeta (depth 1); alpha < zeta alphabetically.
    assert inv.hosts["h2"].vars["v"] == "child"
    assert inv.hosts["h2"].groups == ("alpha", "child", "parent", "zeta")


def test_same_depth_groups_merge_alphabetically(tmp_path: Path) -> None:
    text = "zeta:\n  vars: {v: zeta}\n  hosts: {h: }\nalpha:\n  vars: {v: alpha}\n  hosts: {h: }\n"
    assert load_inventory(write(tmp_path / "inv.yml", text)).hosts["h"].vars["v"] == "zeta"


def test_group_vars_and_host_vars_files(tmp_path: Path) -> None:
    inv_file = write(tmp_path / "inv.yml", PRECEDENCE)
    write(tmp_path / "group_vars" / "all.yml", "from_all_file: 1\nv: all-file\n")
    write(tmp_path / "group_vars" / "parent" / "a.yml", "dir_a: 1\n")
    write(tmp_path / "group_vars" / "parent" / "b.yaml", "dir_a: 2\n")
    write(tmp_path / "group_vars" / "child.json", '{"v": "child-file"}')
    write(tmp_path / "host_vars" / "h1.yml", "ansible_host: 10.0.0.1\nansible_port: '2200'\n")
    write(tmp_path / "group_vars" / "nosuchgroup.yml", "ignored: 1\n")
    inv = load_inventory(inv_file)
    h1 = inv.hosts["h1"]
    # host vars written in the inventory still lose to host_vars/ files, and group_vars/ files
    # override the inventory file's group vars (Ansible's order).
    assert h1.vars["v"] == "host"
    assert inv.hosts["h2"].vars["v"] == "child-file"
    assert h1.vars["from_all_file"] == 1 and h1.vars["dir_a"] == 2
    assert (h1.address, h1.port) == ("10.0.0.1", 2200)
    assert "ignored" not in h1.vars
    assert inv.groups["child"].vars == {"v": "child-file"}


def test_plain_connection_names_and_host_key_checking(tmp_path: Path) -> None:
    text = (
        "all:\n  hosts:\n    a:\n      host: 10.0.0.9\n      port: 2022\n      user: me\n"
        "      key: ~/.ssh/k\n      python: /opt/py/bin/python3\n      connection: ssh\n"
        "      host_key_checking: 'no'\n      orch_known_hosts: /etc/kh\n      orch_workdir: w\n"
        "    b:\n      ansible_python_interpreter: auto_silent\n      ansible_connection: local\n"
    )
    inv = load_inventory(write(tmp_path / "inv.yml", text))
    a = inv.hosts["a"]
    assert (a.address, a.port, a.user, a.key_file, a.python) == (
        "10.0.0.9",
        2022,
        "me",
        "~/.ssh/k",
        "/opt/py/bin/python3",
    )
    assert a.host_key_checking is False and a.known_hosts == "/etc/kh" and a.workdir == "w"
    b = inv.hosts["b"]
    assert (b.connection, b.python, b.host_key_checking, b.workdir) == (
        "local",
        "python3",
        True,
        ".orch",
    )
    assert inv.hosts["a"].groups == ("ungrouped",)
    assert inv.groups["ungrouped"].hosts == ("a", "b")


def test_host_in_several_groups_and_name_with_port(tmp_path: Path) -> None:
    text = "g1:\n  hosts:\n    'h:2200':\ng2:\n  hosts:\n    h: {x: 1}\n"
    inv = load_inventory(write(tmp_path / "inv.yml", text))
    assert list(inv.hosts) == ["h"]
    assert inv.hosts["h"].port == 2200 and inv.hosts["h"].vars["x"] == 1
    assert inv.hosts["h"].groups == ("g1", "g2")


def test_ansible_inventory_list_json(tmp_path: Path) -> None:
    listing = {
        "_meta": {"hostvars": {"gpu01": {"ansible_host": "10.0.0.1", "x": 1}, "ghost": {}}},
        "all": {"children": ["ungrouped", "gpu"]},
        "gpu": {"hosts": ["gpu01", "gpu02"], "vars": {"x": 0, "y": 2}, "children": ["big"]},
        "big": {"hosts": ["gpu03"]},
        "ungrouped": {},
    }
    inv = load_inventory(write(tmp_path / "inv.json", json.dumps(listing, indent=4)))
    assert list(inv.hosts) == ["gpu01", "gpu02", "gpu03"]
    assert inv.hosts["gpu01"].address == "10.0.0.1"
    assert inv.hosts["gpu01"].vars == {"x": 1, "y": 2, "ansible_host": "10.0.0.1"}
    assert inv.hosts["gpu03"].groups == ("big", "gpu")
    assert inv.group_members("gpu") == ("gpu01", "gpu02", "gpu03")


def test_none_is_the_local_default() -> None:
    inv = load_inventory(None)
    assert list(inv.hosts) == ["localhost"] and inv.hosts["localhost"].connection == "local"


def test_errors_carry_the_host_and_the_file_that_set_the_value(tmp_path: Path) -> None:
    inv_file = write(tmp_path / "inv.yml", "gpu:\n  hosts:\n    gpu01:\n    gpu02:\n")
    write(tmp_path / "host_vars" / "gpu02.yml", "ansible_port: [22]\n")
    with pytest.raises(InputError) as info:
        load_inventory(inv_file)
    assert info.value.location == SourceLocation(str(tmp_path / "host_vars/gpu02.yml"), 1, 15)
    assert "host 'gpu02': expected a port number" in info.value.message


@pytest.mark.parametrize(
    ("text", "needle", "line", "col"),
    [
        ("all:\n  hosts: [a, b]\n  vars: [1]\n", "vars of group 'all' must be a mapping", 3, 9),
        ("all:\n  children: [a]\n", "declares no hosts", 1, 1),
        ("all:\n  children:\n    - a\n", "declares no hosts", 1, 1),
        ("g:\n  hosts:\n    a: [1]\n", "vars of host 'a' must be a mapping", 3, 8),
        ("g:\n  hosts: 3\n", "hosts must be a mapping of host names", 2, 10),
        ("g:\n  host:\n    a:\n", "did you mean 'hosts'?", 2, 3),
        ("'a b':\n  hosts: {h: }\n", "holds a character that host patterns use", 1, 1),
        ("g:\n  children:\n    g:\n", "group 'g' is its own ancestor: g -> g", 3, 5),
        ("g: 5\n", "group 'g' must be a mapping", 1, 4),
        ("g:\n  hosts:\n    h:\n      ansible_host: '{{ x }}'\n", "connection variables", 4, 21),
        ("[a, b]\n", "an inventory is a mapping of groups", 1, 1),
    ],
)
def test_inventory_errors(tmp_path: Path, text: str, needle: str, line: int, col: int) -> None:
    path = write(tmp_path / "inv.yml", text)
    with pytest.raises(InputError) as info:
        load_inventory(path)
    assert needle in info.value.render()
    assert info.value.location == SourceLocation(str(path), line, col)


@pytest.mark.parametrize(
    ("text", "hosts", "error"),
    [
        ("# hosts\n\n[gpu]\ngpu01 ansible_host=10.0.0.1\n", ["gpu01"], None),
        ("gpu01 ansible_host=10.0.0.1 ansible_port=2222\n[gpu]\n", ["gpu01"], None),
        ("; comment\n[h200:children]\ngpu\n", [], (3, "names group 'gpu', which no [gpu]")),
        ("[gpu:vars]  # shared\nansible_user=root\n", [], (1, "[gpu:vars] is for group 'gpu'")),
    ],
)
def test_an_ini_inventory_is_read_as_ansible_reads_it(
    tmp_path: Path, text: str, hosts: list[str], error: tuple[int, str] | None
) -> None:
    path = tmp_path / "hosts"  # Ansible's default name for its INI inventory
    path.write_text(text)
    if error is None:
        assert list(load_inventory(path).hosts) == hosts
        return
    with pytest.raises(InputError) as info:
        load_inventory(path)
    assert info.value.exit_code == 2
    assert info.value.location == SourceLocation(str(path), error[0], 1)
    assert error[1] in info.value.message


def test_yaml_and_json_inventories_are_not_taken_for_ini(tmp_path: Path) -> None:
    path = tmp_path / "inv.yml"
    path.write_text("gpu:\n  hosts:\n    gpu01: {ansible_host: 10.0.0.1}\n    h[01:02]:\n")
    assert sorted(load_inventory(path).hosts) == ["gpu01", "h01", "h02"]
    path = tmp_path / "inv.json"
    path.write_text('{"gpu": {"hosts": ["gpu01"]}, "_meta": {"hostvars": {"gpu01": {}}}}')
    assert list(load_inventory(path).hosts) == ["gpu01"]

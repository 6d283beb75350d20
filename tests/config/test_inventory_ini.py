"""Ansible INI inventories: the oracle (ansible-core's resolution), values, sections, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.inventory.ini import ini_value
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.patterns import select_hosts
from orchestrator.errors import InputError, SourceLocation

ORACLE = Path(__file__).resolve().parent / "ansible_oracle"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("form", ["hosts.yml", "hosts.ini"])
def test_the_oracle_inventory_resolves_as_ansible_core_resolves_it(form: str) -> None:
    # expected.json is what ansible-core printed for this inventory (ansible_oracle/regenerate.py):
    # children, ranges, group priority, group_vars/host_vars beside the inventory and the playbook.
    expected = json.loads((ORACLE / "expected.json").read_text())
    inventory = load_inventory(ORACLE / "inventory" / form, playbook_dir=ORACLE / "playbook")

    assert {name: dict(host.vars) for name, host in inventory.hosts.items()} == expected["hostvars"]
    assert sum(len(v) for v in expected["hostvars"].values()) == 83
    for name, group in expected["groups"].items():
        assert list(inventory.groups[name].hosts) == group.get("hosts", []), name
        assert sorted(inventory.groups[name].children) == sorted(group.get("children", [])), name
    assert set(inventory.groups) == set(expected["groups"])
    assert len(expected["patterns"]) == 10
    for pattern, hosts in expected["patterns"].items():
        assert select_hosts(inventory, pattern) == hosts, pattern
    assert inventory.hosts["h200-a"].port == 2223  # host_vars/ beside the playbook win
    assert inventory.hosts["h200-b"].address == "10.0.2.2"


EDGES = json.loads((ORACLE / "edges.json").read_text())


@pytest.mark.parametrize("source", sorted(k for k in EDGES if k != "ansible"))
def test_the_edges_resolve_as_ansible_core_resolves_them(source: str) -> None:
    """Issue 23 item 13: IPv6 with a port (INI and `-i` host lists), one vars file per name
    (the first found), and host order (a group's own hosts first, `ungrouped` first)."""
    expected = EDGES[source]
    path = ORACLE / source if (ORACLE / source).exists() else Path(source)
    inventory = load_inventory(path)
    hostvars = {}
    for name, host in inventory.hosts.items():
        values = dict(host.vars)
        if host.port is not None:
            values["ansible_port"] = host.port
        if values:  # ansible-inventory --list leaves hosts without vars out of hostvars
            hostvars[name] = values
    assert hostvars == expected["hostvars"]
    for pattern, hosts in expected["patterns"].items():
        assert select_hosts(inventory, pattern) == hosts, pattern


def test_the_two_oracle_forms_resolve_alike_without_a_playbook() -> None:
    def resolved(form: str) -> dict[str, Any]:
        inventory = load_inventory(ORACLE / "inventory" / form)
        return {n: (dict(h.vars), h.groups, h.port) for n, h in inventory.hosts.items()}

    yaml_form = resolved("hosts.yml")
    assert yaml_form == resolved("hosts.ini")
    assert yaml_form["h100-01"][0]["tier"] == "h100"  # no playbook group_vars/h100.yml now
    assert yaml_form["cpua"][0]["tier"] == "canary"  # canary's priority beats cpu at one depth
    assert yaml_form["h200-a"][2] == 2222


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        ("1.5", 1.5),
        ("True", True),
        ("true", "true"),  # not a Python literal: the text
        ("None", None),
        ("'07'", "07"),
        ("07", "07"),  # a leading zero is no Python int
        ("[1, 'a']", [1, "a"]),
        ("(1, 2)", [1, 2]),
        ("{'b', 'a'}", ["a", "b"]),
        ("{'k': (1,)}", {"k": [1]}),
        ("1+2j", "(1+2j)"),
        ("...", "..."),
        ("b'x'", "x"),
        ("hello world", "hello world"),
        ("x ; y", "x ; y"),
        ("8 # eight", 8),  # Python's own comment
        ("", ""),
    ],
)
def test_values_are_python_literals_or_text_as_ansible_core_reads_them(
    text: str, value: Any
) -> None:
    assert ini_value(text) == value
    assert type(ini_value(text)) is type(value)


def test_sections_hosts_and_vars(tmp_path: Path) -> None:
    path = write(
        tmp_path / "hosts",
        "# lab\n"
        "bastion ansible_host=10.0.0.1\n"
        "gpu01  # listed here and in [h100]: not ungrouped\n"
        "\n"
        "[h100]\n"
        "gpu[01:02] ansible_user=bench label=\"rack 3\" port_s='2222' tp=4 pass=ab#c\n"
        "gpu03:2202 ansible_port=2203\n"
        "gpu04:2204\n"
        "[h100:vars]\n"
        "  nccl = ring tree  \n"
        "; a comment\n"
        "flag=False\n"
        "[gpus:children]   # comment\n"
        "h100\n"
        "later\n"
        "[later]\n"
        "[all:vars]\n"
        "site=lab\n",
    )
    inv = load_inventory(path)
    assert list(inv.hosts) == ["bastion", "gpu01", "gpu02", "gpu03", "gpu04"]
    assert inv.groups["ungrouped"].hosts == ("bastion",)
    assert inv.group_members("gpus") == ("gpu01", "gpu02", "gpu03", "gpu04")
    assert sorted(inv.groups["all"].children) == ["gpus", "ungrouped"]
    assert inv.groups["later"].hosts == ()
    gpu01 = inv.hosts["gpu01"]
    assert gpu01.user == "bench"
    assert {k: gpu01.vars[k] for k in ("label", "port_s", "tp", "pass", "nccl", "flag")} == {
        "label": "rack 3",
        "port_s": 2222,  # the shell-style split drops the quotes, then 2222 is an int
        "tp": 4,
        "pass": "ab",  # '#' starts a comment in a host line, as in ansible-core
        "nccl": "ring tree",  # a :vars value is the whole rest of the line
        "flag": False,
    }
    assert gpu01.groups == ("gpus", "h100")
    assert inv.hosts["gpu03"].port == 2203  # an explicit ansible_port beats name:port
    assert inv.hosts["gpu04"].port == 2204
    assert inv.hosts["bastion"].vars == {"ansible_host": "10.0.0.1", "site": "lab"}
    location = inv.hosts["gpu02"].location
    assert location == SourceLocation(str(path), 6, 1)


def test_a_quoted_number_stays_text_only_when_quoted_twice(tmp_path: Path) -> None:
    # ansible-core's documented quirk: the shell-style split drops one level of quotes.
    path = write(tmp_path / "hosts.ini", '[g]\nh a="5" b="\'5\'" c=\'"x y"\'\n')
    assert load_inventory(path).hosts["h"].vars == {"a": 5, "b": "5", "c": "x y"}


def test_vars_in_a_later_ini_source_reach_a_group_of_an_earlier_yaml_one(tmp_path: Path) -> None:
    first = write(tmp_path / "a.yml", "gpus:\n  hosts:\n    g1:\n")
    second = write(tmp_path / "b.ini", "[gpus:vars]\nansible_user=bench\n[gpus]\ng2\n")
    inv = load_inventory([first, second])
    assert [h.user for h in inv.hosts.values()] == ["bench", "bench"]


def test_group_vars_and_host_vars_beside_an_ini_file(tmp_path: Path) -> None:
    path = write(tmp_path / "site" / "hosts.ini", "[gpu]\ng1 tp=2\ng2\n[gpu:vars]\ntp=1\n")
    write(tmp_path / "site" / "group_vars" / "gpu.yml", "tp: 8\nansible_user: bench\n")
    write(tmp_path / "site" / "host_vars" / "g2" / "net.yml", "ansible_port: 2222\n")
    inv = load_inventory(path)
    assert inv.hosts["g1"].vars["tp"] == 2  # the host's own var beats group_vars/
    assert inv.hosts["g2"].vars["tp"] == 8  # group_vars/ beat [gpu:vars]
    assert inv.hosts["g2"].port == 2222
    assert inv.groups["gpu"].vars == {"tp": 8, "ansible_user": "bench"}


def test_group_priority_orders_groups_and_is_no_variable(tmp_path: Path) -> None:
    text = "[a]\nh\n[b]\nh\n[a:vars]\nx=a\n"
    path = write(tmp_path / "hosts.ini", text + "ansible_group_priority=5\n[b:vars]\nx=b\n")
    assert load_inventory(path).hosts["h"].vars == {"x": "a"}  # a outranks b by priority
    path.write_text(text + "[b:vars]\nx=b\n")
    assert load_inventory(path).hosts["h"].vars == {"x": "b"}  # same depth and priority: name


@pytest.mark.parametrize(
    ("text", "line", "col", "needle"),
    [
        ("[gpu:hostz]\ng1\n", 1, 1, "section [gpu:hostz] has unknown type 'hostz'"),
        ("[gpu] ; comment\ng1\n", 1, 1, "invalid section header '[gpu] ; comment'"),
        ("[gpu name]\n", 1, 1, "invalid section header"),
        ("[gpu]\ng1\n[all:children]\ngpu\nghost\n", 5, 1, "names group 'ghost', which no [ghost]"),
        ("[gpu]\ng1\n[h200:vars]\nx=1\n", 3, 1, "section [h200:vars] is for group 'h200'"),
        ("[gpu]\ng1\n[gpu:vars]\n  ansible_user\n", 4, 3, "expected key=value in [gpu:vars]"),
        ("[gpu]\ng1 ansible_user\n", 2, 4, "expected key=value after host 'g1', got"),
        ("[gpu]\ng1 =x\n", 2, 4, "expected key=value after host 'g1', got '=x'"),
        ('[gpu]\ng1 label="rack 3\n', 2, 1, "cannot read host line"),
        ("[gpu]\ng1:\n", 2, 1, "host 'g1:' ends in ':' with no port"),
        ("[gpu]\ng[3:1]\n", 2, 1, "host range [3:1] runs backwards"),
        ("[gpu]\ng1\n[all:children]\ngpu extra\n", 4, 1, "expected one group name"),
        ("[g,h]\ng1\n", 1, 2, "group name 'g,h' holds a character that host patterns use"),
        ("---\n[gpu]\n", 1, 1, "'---' starts a YAML document"),
        ("[a:children]\nb\n[b:children]\na\n", 4, 1, "group 'a' is its own ancestor"),
        ("[g]\nh\n[g:vars]\nansible_group_priority=high\n", 4, 1, "must be an integer"),
        ("[g]\nh ansible_port=http\n", 2, 3, "expected a port number"),
    ],
)
def test_ini_errors_are_located(
    tmp_path: Path, text: str, line: int, col: int, needle: str
) -> None:
    path = write(tmp_path / "hosts.ini", text)
    with pytest.raises(InputError) as info:
        load_inventory(path)
    assert info.value.exit_code == 2
    assert needle in info.value.render()
    assert info.value.location == SourceLocation(str(path), line, col)


@pytest.mark.parametrize(
    ("name", "text", "hosts"),
    [
        ("hosts", "gpu01\ngpu02:2222\n", ["gpu01", "gpu02"]),  # a bare host list is INI
        ("hosts", "# lab\n[gpu]\ngpu01\n", ["gpu01"]),
        ("inventory", "gpu:\n  hosts:\n    gpu01:\n", ["gpu01"]),  # `name:` opens YAML
        ("inventory", '{"gpu": {"hosts": ["gpu01"]}}', ["gpu01"]),
        ("hosts.yml", "[gpu]\ngpu01 ansible_host=10.0.0.1\n", ["gpu01"]),  # INI lines, any name
        ("hosts.ini", "gpu01\n", ["gpu01"]),
    ],
)
def test_the_format_is_told_by_name_and_content(
    tmp_path: Path, name: str, text: str, hosts: list[str]
) -> None:
    assert list(load_inventory(write(tmp_path / name, text)).hosts) == hosts

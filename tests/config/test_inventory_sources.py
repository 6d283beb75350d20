"""Inventory directories and repeated -i: which files count, in which order, and whose vars win."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.inventory.sources import inventory_files
from orchestrator.errors import InputError, SourceLocation


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_directory_is_its_inventory_files_in_name_order(tmp_path: Path) -> None:
    inv = tmp_path / "prod"
    write(inv / "20-h200.yml", "h200:\n  hosts:\n    h200-0[1:2]:\n")
    write(inv / "10-h100.yaml", "h100:\n  hosts:\n    h100-01:\n")
    write(inv / "30-extra.json", '{"spare": {"hosts": ["s1"]}}')
    write(inv / "nested" / "40-more.yml", "edge:\n  hosts:\n    e1:\n")
    # none of these are inventories: Ansible's ignored extensions, hidden files, vars folders
    write(inv / "README.md", "# the production GPU hosts\n")
    write(inv / "ansible.cfg", "[defaults]\nforks = 5\n")
    write(inv / "hosts.yml.bak", "old:\n  hosts:\n    gone:\n")
    write(inv / "hosts.yml~", "old:\n  hosts:\n    gone:\n")
    write(inv / ".hidden.yml", "old:\n  hosts:\n    gone:\n")
    write(inv / "group_vars" / "h200.yml", "ansible_user: bench\n")
    write(inv / "host_vars" / "h100-01.yml", "ansible_port: 2222\n")

    assert [p.relative_to(inv).as_posix() for p in inventory_files(inv)] == [
        "10-h100.yaml", "20-h200.yml", "30-extra.json", "nested/40-more.yml",
    ]  # fmt: skip
    loaded = load_inventory(inv)
    assert list(loaded.hosts) == ["h100-01", "h200-01", "h200-02", "s1", "e1"]
    assert loaded.hosts["h200-02"].user == "bench"  # group_vars/ inside the directory
    assert loaded.hosts["h100-01"].port == 2222  # host_vars/ inside the directory
    assert loaded.source == str(inv)


def test_one_group_across_files_is_one_group_and_later_files_win(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    write(inv / "a.yml", "gpus:\n  vars: {ansible_user: first, nccl: a}\n  hosts:\n    g1:\n")
    write(inv / "b.yml", "gpus:\n  vars: {ansible_user: second}\n  hosts:\n    g2:\n")
    loaded = load_inventory(inv)
    assert loaded.group_members("gpus") == ("g1", "g2")
    for name in ("g1", "g2"):
        assert loaded.hosts[name].user == "second"
        assert loaded.hosts[name].vars["nccl"] == "a"


def test_repeated_sources_combine_in_order_with_each_ones_vars_folders(tmp_path: Path) -> None:
    first = write(tmp_path / "site-a" / "hosts.yml", "gpus:\n  hosts:\n    a1:\n")
    write(tmp_path / "site-a" / "group_vars" / "gpus.yml", "ansible_user: alice\nzone: a\n")
    second = tmp_path / "site-b"
    write(second / "hosts.yml", "gpus:\n  hosts:\n    b1:\n")
    write(second / "group_vars" / "gpus.yml", "zone: b\n")
    loaded = load_inventory([first, second])
    assert list(loaded.hosts) == ["a1", "b1"]
    # site-b's group_vars/ come after site-a's: its zone wins, site-a's user stays
    assert {h.vars["zone"] for h in loaded.hosts.values()} == {"b"}
    assert {h.user for h in loaded.hosts.values()} == {"alice"}
    assert loaded.source == f"{first}, {second}"


def test_an_error_in_a_later_file_points_at_that_file(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    write(inv / "a.yml", "gpus:\n  hosts:\n    g1:\n")
    bad = write(inv / "b.yml", "gpus:\n  hots:\n    g2:\n")
    with pytest.raises(InputError) as info:
        load_inventory(inv)
    assert info.value.location == SourceLocation(str(bad), 2, 3)
    assert "did you mean 'hosts'?" in info.value.render()


def test_an_empty_directory_says_what_counts(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    write(inv / "README.md", "nothing here yet\n")
    write(inv / "group_vars" / "all.yml", "ansible_user: x\n")
    with pytest.raises(InputError) as info:
        load_inventory(inv)
    assert info.value.exit_code == 2
    assert info.value.message == f"inventory directory {inv} holds no inventory files"
    assert "group_vars/" in str(info.value.hint)


def test_a_script_in_a_directory_says_how_to_save_its_output(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    write(inv / "00-good.yml", "gpus:\n  hosts:\n    g1:\n")
    bad = write(inv / "ec2.py", "#!/usr/bin/env python3\nprint('{}')\n")
    os.chmod(bad, 0o755)
    with pytest.raises(InputError) as info:
        load_inventory(inv)
    assert info.value.location == SourceLocation(str(bad), 1, 1)
    assert info.value.message.startswith("inventory scripts are not run")
    assert f"ansible-inventory -i {bad} --list > inventory.json" in str(info.value.hint)


def test_ini_files_in_a_directory_are_read_with_the_yaml_ones(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    write(inv / "00-good.yml", "gpus:\n  hosts:\n    g1:\n")
    write(inv / "10-hosts.ini", "[gpus]\ng2 ansible_host=h2\n")
    write(inv / "20-hosts", "# prod\n[gpus]\ng3\n")
    loaded = load_inventory(inv)
    assert loaded.group_members("gpus") == ("g1", "g2", "g3")
    assert loaded.hosts["g2"].address == "h2"


def test_no_sources_is_the_builtin_localhost(tmp_path: Path) -> None:
    assert list(load_inventory(None).hosts) == ["localhost"]
    assert list(load_inventory([]).hosts) == ["localhost"]
    assert load_inventory(()).source is None


def test_a_missing_source_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        load_inventory([tmp_path / "nope.yml"])
    assert info.value.message == f"inventory not found: {tmp_path / 'nope.yml'}"


def test_a_host_list_is_ungrouped_hosts_without_vars(tmp_path: Path) -> None:
    loaded = load_inventory([Path("gpu01, gpu02:2222,,h[1:2]")])
    assert list(loaded.hosts) == ["gpu01", "gpu02", "h[1:2]"]  # no ranges, as Ansible's list
    assert loaded.groups["ungrouped"].hosts == ("gpu01", "gpu02", "h[1:2]")
    assert loaded.groups["all"].children == ("ungrouped",)
    assert loaded.hosts["gpu01"].vars == {}
    assert loaded.hosts["gpu02"].vars == {"ansible_port": 2222}
    assert loaded.hosts["gpu02"].port == 2222
    assert loaded.hosts["gpu01"].groups == ("ungrouped",)
    assert list(load_inventory(Path("one,")).hosts) == ["one"]  # the trailing comma marks it


def test_a_host_list_combines_with_files_and_their_vars(tmp_path: Path) -> None:
    hosts = write(tmp_path / "hosts.yml", "gpus:\n  hosts:\n    g1:\n")
    write(tmp_path / "group_vars" / "all.yml", "ansible_user: bench\n")
    loaded = load_inventory([hosts, Path("g1,extra,")])
    assert list(loaded.hosts) == ["g1", "extra"]
    assert loaded.groups["ungrouped"].hosts == ("extra",)  # g1 is in gpus, so not ungrouped
    assert {h.user for h in loaded.hosts.values()} == {"bench"}


def test_a_file_whose_name_holds_a_comma_is_a_file(tmp_path: Path) -> None:
    path = write(tmp_path / "a,b.yml", "gpus:\n  hosts:\n    g1:\n")
    assert list(load_inventory(path).hosts) == ["g1"]


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("gpu 01,gpu02,", "host 'gpu 01' in the host list holds a space"),
        (",", "the inventory declares no hosts"),
    ],
)
def test_bad_host_lists(source: str, needle: str) -> None:
    with pytest.raises(InputError) as info:
        load_inventory([Path(source)])
    assert needle in info.value.render()
    assert info.value.location == SourceLocation(f"-i {source}")


def test_a_missing_source_without_a_comma_hints_at_the_host_list_form(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        load_inventory([Path("gpu01")])
    assert info.value.hint == "a list of hosts ends with a comma: -i gpu01,"


def test_ansible_inventory_names_the_sources_when_no_i_is_given(tmp_path: Path) -> None:
    first = write(tmp_path / "a.yml", "gpus:\n  hosts:\n    g1:\n")
    second = write(tmp_path / "b" / "hosts.ini", "[gpus]\ng2\n")
    environ = {"ANSIBLE_INVENTORY": f" {first} ,,{second},"}
    loaded = load_inventory(None, environ=environ)
    assert loaded.group_members("gpus") == ("g1", "g2")
    assert loaded.source == f"{first}, {second}"
    assert list(load_inventory([first], environ=environ).hosts) == ["g1"]  # -i wins
    assert list(load_inventory([], environ={"ANSIBLE_INVENTORY": ""}).hosts) == ["localhost"]
    with pytest.raises(InputError) as info:
        load_inventory(None, environ={"ANSIBLE_INVENTORY": str(tmp_path / "gone.yml")})
    assert info.value.message == f"inventory not found: {tmp_path / 'gone.yml'}"


def test_vars_beside_the_playbook_follow_ansible_precedence(tmp_path: Path) -> None:
    site = tmp_path / "site"
    hosts = write(site / "hosts.ini", "[gpu]\ng1 own=host\ng2\n[gpu:vars]\nlevel=inline\n")
    write(site / "group_vars" / "all.yml", "a: inv-all\nb: inv-all\nlevel: inv-all\n")
    write(site / "group_vars" / "gpu.yml", "b: inv-gpu\nc: inv-gpu\nd: inv-gpu\n")
    write(site / "host_vars" / "g1.yml", "own: inv-host\ne: inv-host\n")
    play = tmp_path / "play"
    write(play / "group_vars" / "all.yml", "a: pb-all\nb: pb-all\nc: pb-all\n")
    write(play / "group_vars" / "gpu.yml", "d: pb-gpu\n")
    write(play / "host_vars" / "g1.yml", "e: pb-host\n")
    loaded = load_inventory(hosts, playbook_dir=play)
    assert loaded.hosts["g1"].vars == {
        "level": "inv-all",  # group_vars/all beats every inventory-file group var
        "a": "pb-all",  # the playbook's group_vars/all beats the inventory's
        "b": "inv-gpu",  # ... but not the inventory's group_vars/<group>
        "c": "inv-gpu",
        "d": "pb-gpu",  # the playbook's group_vars/<group> beat the inventory's
        "own": "inv-host",  # host_vars/ beat the host's inventory line
        "e": "pb-host",  # the playbook's host_vars/ beat the inventory's
    }
    assert loaded.groups["gpu"].vars == {
        "level": "inline",
        "b": "inv-gpu",
        "c": "inv-gpu",
        "d": "pb-gpu",
    }
    assert load_inventory(hosts).hosts["g1"].vars["d"] == "inv-gpu"  # no playbook, no play vars


def test_the_implicit_localhost_takes_the_playbooks_all_and_localhost_vars(tmp_path: Path) -> None:
    assert load_inventory(None, playbook_dir=tmp_path, environ={}) == load_inventory(None)
    write(tmp_path / "group_vars" / "all.yml", "nccl: ring\nansible_user: x\n")
    write(tmp_path / "host_vars" / "localhost.yml", "ansible_python_interpreter: /opt/py\n")
    write(tmp_path / "group_vars" / "ungrouped.yml", "ignored: true\n")  # localhost is in none
    host = load_inventory(None, playbook_dir=tmp_path, environ={}).hosts["localhost"]
    assert host.vars == {
        "nccl": "ring",
        "ansible_user": "x",
        "ansible_python_interpreter": "/opt/py",
    }
    assert (host.connection, host.python, host.user) == ("local", "/opt/py", "x")

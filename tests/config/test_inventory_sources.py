"""Inventory directories and repeated -i: which files count, in which order, and whose vars win."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.config.inventory import load_inventory
from orchestrator.config.inventory_sources import inventory_files
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

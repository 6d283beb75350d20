"""Ansible host patterns: each operator, evaluation order and ansible-core's order of the result."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.host import Inventory
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.patterns import select_hosts, select_hosts_checked, split_pattern
from orchestrator.errors import InputError, SourceLocation

INVENTORY = """\
all:
  children:
    gpu_nodes:
      children:
        h100:
          hosts:
            h100-[01:03]:
        h200:
          hosts:
            h200-01:
            h200-02:
    spot:
      hosts:
        h200-02:
        cpu.example.com:
    web:
      hosts:
        web1:
"""


@pytest.fixture(scope="module")
def inv(tmp_path_factory: pytest.TempPathFactory) -> Inventory:
    path = tmp_path_factory.mktemp("inv") / "inv.yml"
    path.write_text(INVENTORY)
    return load_inventory(path)


ALL = ["h100-01", "h100-02", "h100-03", "h200-01", "h200-02", "cpu.example.com", "web1"]
# ansible-core's order for `all`: each group's own hosts before its children's, level by level
ALL_ANSIBLE = ["h200-02", "cpu.example.com", "web1", "h100-01", "h100-02", "h100-03", "h200-01"]


@pytest.mark.parametrize(
    ("pattern", "hosts"),
    [
        ("all", ALL_ANSIBLE),
        ("*", ALL_ANSIBLE),
        ("gpu_nodes", ALL[:5]),
        ("h200-01", ["h200-01"]),
        ("web1,h100", ["web1", "h100-01", "h100-02", "h100-03"]),  # the pattern's order
        ("h100:web", ["h100-01", "h100-02", "h100-03", "web1"]),  # old colon style
        ("h2*", ["h200-01", "h200-02"]),  # a glob matches groups and hosts
        ("*.example.com", ["cpu.example.com"]),
        ("~h\\d00-0[13]", ["h100-01", "h100-03", "h200-01"]),
        ("~eb", []),  # a regex matches from the start of a name
        ("~web", ["web1"]),
        ("gpu_nodes,!h100", ["h200-01", "h200-02"]),
        ("!gpu_nodes", ["cpu.example.com", "web1"]),  # only exclusions: start from all
        ("gpu_nodes,&spot", ["h200-02"]),
        ("&spot,!h200", ["cpu.example.com"]),
        ("!h200,gpu_nodes", ["h100-01", "h100-02", "h100-03"]),  # plain first, then !
        ("&h100,h200,gpu_nodes", ["h100-01", "h100-02", "h100-03"]),  # plain first, then &
        ("gpu_nodes[0]", ["h100-01"]),
        ("gpu_nodes[-1]", ["h200-02"]),
        ("gpu_nodes[1:2]", ["h100-02", "h100-03"]),
        ("gpu_nodes[3:]", ["h200-01", "h200-02"]),
        (" h100-01 , web1 ", ["h100-01", "web1"]),
        ("nothing", []),
    ],
)
def test_select_hosts(inv: Inventory, pattern: str, hosts: list[str]) -> None:
    assert select_hosts(inv, pattern) == hosts


def test_split_pattern() -> None:
    assert split_pattern("a,b,,!c") == ["a", "b", "!c"]
    assert split_pattern("a:b:&c") == ["a", "b", "&c"]
    assert split_pattern("gpu[1:3]:web") == ["gpu[1:3]", "web"]
    assert split_pattern("~a:b") == ["~a:b"]


def test_no_match_names_what_exists_and_suggests(inv: Inventory) -> None:
    where = SourceLocation("pb.yml", 2, 1)
    with pytest.raises(InputError) as info:
        select_hosts_checked(inv, "h300", location=where, key_path="hosts")
    text = info.value.render()
    assert text.startswith("pb.yml:2:1: hosts: pattern 'h300' matches no host (known groups: ")
    assert "gpu_nodes" in text and "h100-01" in text
    assert info.value.hint in ("did you mean 'h100'?", "did you mean 'h200'?")


def test_a_misspelt_term_among_others_is_an_error(inv: Inventory) -> None:
    with pytest.raises(InputError, match="'wbe' in pattern 'h100,wbe' names no group or host"):
        select_hosts_checked(inv, "h100,wbe")
    with pytest.raises(InputError, match="'h10' in pattern 'all,!h10'"):
        select_hosts_checked(inv, "all,!h10")
    assert select_hosts_checked(inv, "h100,web*") == ["h100-01", "h100-02", "h100-03", "web1"]


def test_empty_pattern_and_bad_regex(inv: Inventory) -> None:
    with pytest.raises(InputError, match="matches no host"):
        select_hosts_checked(inv, " ")
    with pytest.raises(InputError, match="invalid regex"):
        select_hosts(inv, "~h[")
    with pytest.raises(InputError) as info:
        select_hosts_checked(inv, "~h[", key_path="--limit")
    assert info.value.render().startswith("--limit: invalid regex 'h[' in host pattern '~h['")


def test_long_host_lists_are_cut_in_the_message(tmp_path: Path) -> None:
    path = tmp_path / "inv.yml"
    path.write_text("big:\n  hosts:\n    n[001:100]:\n")
    with pytest.raises(InputError) as info:
        select_hosts_checked(load_inventory(path), "zzz")
    assert "... (92 more)" in info.value.message

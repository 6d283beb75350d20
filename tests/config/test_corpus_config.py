"""Bad-input corpus for loading: each tests/corpus/config-*/ case must fail with one message.

A case is a directory with `playbook.yml` (maybe `inventory.yml` or `inventory.json`, and other
files) and `expect.yml` naming the file, line and column the error points at, the key path, and a
substring of the message. `args:` are `-e` extra vars and `-i` inventories (files or
directories), paths relative to the case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.patterns import select_hosts_checked
from orchestrator.config.playbook import load_playbook, parse_extra_vars
from orchestrator.errors import InputError

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
CASES = sorted(p for p in CORPUS.glob("config-*") if p.is_dir())


def _split_args(args: list[str]) -> tuple[list[str], list[Path]]:
    """(extra vars, inventory paths) from a case's `args`."""
    extra: list[str] = []
    inventories: list[Path] = []
    for flag, value in zip(args[::2], args[1::2], strict=True):
        assert flag in ("-e", "--extra-vars", "-i"), f"unsupported corpus arg {flag!r}"
        if flag == "-i":
            inventories.append(Path(value))
        else:
            extra.append(value)
    return extra, inventories


def _load_case(case: Path, expect: dict[str, Any]) -> None:
    extra_args, inventories = _split_args(list(expect.get("args", [])))
    extra = parse_extra_vars(extra_args)
    found = [case / n for n in ("inventory.yml", "inventory.json") if (case / n).exists()]
    inventory = load_inventory(inventories or found[:1])
    playbook = load_playbook(case / "playbook.yml", extra)
    select_hosts_checked(
        inventory,
        str(playbook.data.get("hosts", "all")),
        location=playbook.locate(("hosts",)),
        key_path="hosts",
    )


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 25


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_config_case(case: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expect = yaml.safe_load((case / "expect.yml").read_text())
    monkeypatch.chdir(case)  # `-e @file` paths are relative to where orch runs, as in Ansible
    with pytest.raises(InputError) as info:
        _load_case(case, expect)
    rendered = info.value.render()
    position = f":{expect['line']}:{expect['col']}: "
    # Files named on the command line (-e @file) are reported as given; the rest as found.
    prefixes = (f"{case / expect['file']}{position}", f"{expect['file']}{position}")
    assert rendered.startswith(prefixes), rendered
    if expect.get("key_path"):
        assert f" {expect['key_path']}: " in rendered, rendered
    assert expect["contains"] in rendered, rendered
    assert "\n" not in rendered

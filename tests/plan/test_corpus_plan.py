"""The planning bad-input corpus (tests/corpus/plan-*): loader + inventory + build_cells in-process.

Each case's expect.yml names the file, line, column, key path and a substring of the message;
`args` may hold `-e k=v` and `--limit PATTERN` as on the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook, parse_extra_vars
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CASES = sorted(CORPUS.glob("plan-*/expect.yml"))


def _cli_args(args: list[Any]) -> tuple[list[str], str | None]:
    extra: list[str] = []
    limit: str | None = None
    items = [str(a) for a in args]
    for flag, value in zip(items[::2], items[1::2], strict=True):
        if flag in ("-e", "--extra-vars"):
            extra.append(value)
        elif flag in ("-l", "--limit"):
            limit = value
        else:
            raise AssertionError(f"unsupported corpus arg {flag}")
    return extra, limit


def test_the_plan_corpus_has_the_cases_it_promises() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize("expect_file", CASES, ids=[c.parent.name for c in CASES])
def test_plan_bad_input(expect_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = expect_file.parent
    expect = yaml.safe_load(expect_file.read_text())
    monkeypatch.chdir(case)  # locations are printed relative, as the user typed the path
    extra, limit = _cli_args(expect.get("args", []))
    inventory = Path("inventory.yml") if (case / "inventory.yml").exists() else None
    with pytest.raises(InputError) as err:
        playbook = load_playbook(Path("playbook.yml"), parse_extra_vars(extra))
        build_cells(playbook, load_inventory(inventory), limit=limit)
    message = err.value.render()
    assert message.startswith(f"{expect['file']}:{expect['line']}:{expect['col']}: "), message
    if expect.get("key_path"):
        assert f" {expect['key_path']}: " in message, message
    assert expect["contains"] in message, message

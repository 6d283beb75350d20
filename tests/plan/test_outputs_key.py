"""`bench.fingerprint` and `bench.accuracy`: off, the cell and its id stay as they were; on,
the runner gets the server's URL; what cannot be done is refused where it is written, and
`expect:` on them is checked against what they record."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.cell import Cell
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.playbook import load_playbook
from orchestrator.errors import InputError
from orchestrator.plan.build import build_cells
from orchestrator.plan.lint import expect_name_error

SERVER = "name: p\nserver: {command: [s], port: 8123}\n"


def plan(tmp_path: Path, text: str) -> list[Cell]:
    path = tmp_path / "playbook.yml"
    path.write_text(textwrap.dedent(text))
    return build_cells(load_playbook(path, {}), load_inventory(None))


def refused(tmp_path: Path, text: str) -> InputError:
    with pytest.raises(InputError) as err:
        cells = plan(tmp_path, text)
        found = expect_name_error(load_playbook(tmp_path / "playbook.yml", {}), cells)
        if found is not None:
            raise found
    return err.value


def test_off_keeps_the_id_and_on_reaches_the_runner_with_the_url(tmp_path: Path) -> None:
    (plain,) = plan(tmp_path, SERVER + "bench: {command: [b]}\n")
    (off,) = plan(tmp_path, SERVER + "bench: {command: [b], fingerprint: false}\n")
    (on,) = plan(tmp_path, SERVER + "bench: {command: [b], fingerprint: {passes: 2}}\n")
    (acc,) = plan(tmp_path, SERVER + "bench: {command: [b], accuracy: {prompts: 10}}\n")
    assert off.id == plain.id and "fingerprint" not in plain.model_dump(mode="json")["bench"]
    assert on.bench.fingerprint is not None and on.id != plain.id
    assert on.bench.fingerprint.url == "http://127.0.0.1:8123"
    assert (on.bench.fingerprint.prompts, on.bench.fingerprint.passes) == (32, 2)
    assert acc.bench.accuracy is not None and acc.bench.accuracy.prompts == 10
    (given,) = plan(tmp_path, "name: p\nbench: {command: [b], fingerprint: {url: 'http://h:1/'}}\n")
    assert given.bench.fingerprint is not None and given.bench.fingerprint.url == "http://h:1"


def test_what_cannot_be_done_is_refused_where_written(tmp_path: Path) -> None:
    err = refused(tmp_path, SERVER + "bench:\n  command: [b]\n  fingerprint: {prompts: 33}\n")
    assert err.key_path == "bench.fingerprint.prompts" and "32 bundled" in err.message
    assert err.location is not None and err.location.line == 5
    err = refused(tmp_path, SERVER + "bench:\n  command: [b]\n  accuracy: {passes: 2}\n")
    assert err.key_path == "bench.accuracy.passes"  # passes is the fingerprint's
    no_port = "name: p\nserver: {command: [s]}\n"
    err = refused(tmp_path, no_port + "bench: {command: [b], fingerprint: true}\n")
    assert err.key_path == "bench.fingerprint" and "no URL" in err.message


def test_expect_on_outputs_is_checked_against_what_they_record(tmp_path: Path) -> None:
    fp = SERVER + "bench: {command: [b], fingerprint: true, accuracy: true}\n"
    (cell,) = plan(tmp_path, fp + "expect: {fingerprint: {equal: abc}, accuracy: {min: 0.5}}\n")
    assert cell.expect["fingerprint"].equal == "abc"
    err = refused(tmp_path, SERVER + "bench: {command: [b]}\nexpect: {fingerprint: {equal: a}}\n")
    assert err.key_path == "expect.fingerprint" and "needs bench.fingerprint" in err.message
    err = refused(tmp_path, fp + "expect: {fingerprint: {min: 1}}\n")
    assert "takes equal" in err.message
    err = refused(tmp_path, fp + "expect: {fingerprint: {equal: a, min: 1}}\n")
    assert err.key_path == "expect.fingerprint" and "stands alone" in err.message
    err = refused(tmp_path, SERVER + "bench: {command: [b]}\nexpect: {accuracy: {min: 0.5}}\n")
    assert "needs bench.accuracy" in err.message

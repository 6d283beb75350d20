"""The controller's word to a node's part that its head is ready (issue 35): written on the node's
host through a real local connection when the head's runner says `ready ok`, and written again for
a node whose runner starts (or starts again) after that."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from fakes import cell, event

from orchestrator.cell import Cell, NodePart
from orchestrator.config.host import Host
from orchestrator.execute.apply.node_join import NodeJoin
from orchestrator.execute.transport.local import LocalConnection
from orchestrator.runner.context import END_SUFFIX, HEAD_READY_SUFFIX

RUN = "run-1"


def _host(name: str, workdir: Path) -> Host:
    return Host(
        name=name,
        vars={},
        groups=(),
        connection="local",
        python=sys.executable,
        workdir=str(workdir),
    )


def _head() -> Cell:
    node = NodePart(host="gpu02", address="10.0.0.2", rank=1, head_address="10.0.0.1")
    return cell("c-1", "gpu01", nodes=(node,))


def _file(workdir: Path, cid: str, suffix: str, within: float = 10.0) -> dict[str, object] | None:
    """The controller's file `.<cid><suffix>` once it is written (None if it never is)."""
    path = workdir / "runs" / RUN / f".{cid}{suffix}"
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists():
            doc: dict[str, object] = json.loads(path.read_text())
            return doc
        time.sleep(0.02)
    return None


def _word(workdir: Path, cid: str, within: float = 10.0) -> dict[str, object] | None:
    """The head-ready word for `cid` once it is written (None if it never is)."""
    return _file(workdir, cid, HEAD_READY_SUFFIX, within)


def test_the_heads_ready_ok_is_written_for_its_part_on_the_nodes_host(tmp_path: Path) -> None:
    join = NodeJoin([_head()])
    (part,) = join.parts
    node = LocalConnection(_host("gpu02", tmp_path / "w2"))
    join.attach(node, "inv-2", RUN)
    join.on_event("c-1", event("c-1", "step", step="ready", status="start"))
    join.on_event("c-1", event("c-1", "step", step="server_start", status="ok"))
    assert _word(tmp_path / "w2", part, within=0.5) is None  # not ready yet: nothing said
    join.on_event("c-1", event("c-1", "step", step="ready", status="ok"))
    word = _word(tmp_path / "w2", part)
    assert word is not None and word["invocation"] == "inv-2" and word["kind"] == "head_ready"


def test_a_node_runner_that_starts_after_the_head_was_ready_is_told_too(tmp_path: Path) -> None:
    join = NodeJoin([_head()])
    (part,) = join.parts
    join.on_event("c-1", event("c-1", "step", step="ready", status="ok"))  # no node runner yet
    join.attach(LocalConnection(_host("gpu02", tmp_path / "w2")), "inv-2", RUN)
    word = _word(tmp_path / "w2", part)
    assert word is not None and word["invocation"] == "inv-2"
    # the runner starts again (a lost link): its new invocation is told as well
    (tmp_path / "w2" / "runs" / RUN / f".{part}{HEAD_READY_SUFFIX}").unlink()
    join.attach(LocalConnection(_host("gpu02", tmp_path / "w2")), "inv-3", RUN)
    word = _word(tmp_path / "w2", part)
    assert word is not None and word["invocation"] == "inv-3"


def test_a_node_runner_that_starts_after_its_heads_cell_ended_is_released(
    tmp_path: Path,
) -> None:
    join = NodeJoin([_head()])
    (part,) = join.parts
    join.on_event("c-1", event("c-1", "step", step="ready", status="ok"))
    join.on_event("c-1", event("c-1", "step", step="stop", status="start"))
    join.attach(LocalConnection(_host("gpu02", tmp_path / "w2")), "inv-2", RUN)
    # released (its server_start starts nothing), never told a head that is gone is ready
    end = _file(tmp_path / "w2", part, END_SUFFIX)
    assert end is not None and (end["kind"], end["invocation"]) == ("release", "inv-2")
    assert _file(tmp_path / "w2", part, HEAD_READY_SUFFIX, within=0.5) is None

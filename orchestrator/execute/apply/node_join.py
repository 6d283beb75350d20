"""Multi-node cells at run time: each node's part in its host's queue, the nodes tied together,
their results joined into the one cell folder.

A cell with `nodes` runs on its head host's queue as usual; every other node gets a part cell
(`<id>.n<rank>`, `Cell.node` set) in its own host's queue, in the same order, so the nodes of a
group reach a cell together (runner/node.py says what a part does). The controller ties them:

- the head's `ready ok` tells every part its head is ready (`.<part>.head_ready`): a part needs
  no network path to the head's HTTP port, which SGLang binds to 127.0.0.1 by default; the word
  is written again to a node whose runner (re)starts after it;
- the head's `stop` step (or any end of the head's cell) releases every part still holding;
- a part that fails before the head's cell ended aborts the head's cell, with the node and the
  reason, so its bench stops at once and the server is stopped on every node;
- the head's archive waits for the parts' archives; the cell folder gets each node's folder under
  `nodes/<host>/` and `nodes.json`, and the cell fails when any node failed, naming it.

End requests are a file the runner polls (`runs/<run>/.<cell>.end`), written by one short
command on the node's connection: no second channel into the runner is needed.

On a Slurm host every node of a cell is that one host, one job
(execute/transport/slurm/tasks.py): an end request is a step in the job, each part's folder is
named by the Slurm node it ran on (`nodes/<NodeName>/`, `via` the host in nodes.json), and the
head is scored against the address its runner found for itself (`with_head_address`).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.cell import Cell, NodePart, NodeRole, part_id
from orchestrator.errors import OrchError
from orchestrator.results.archive import extract_archive
from orchestrator.results.layout import (
    CELL_JSON,
    NODES_DIR,
    NODES_JSON,
    SNAPSHOT_PRE,
    is_node_folder_name,
)
from orchestrator.runner.context import END_SUFFIX, HEAD_READY_SUFFIX, JOINED_SUFFIX
from orchestrator.runner.node import HEAD_ENDED
from orchestrator.runner.slurm_tasks import HEAD_PLACEHOLDER

if TYPE_CHECKING:
    from orchestrator.execute.transport.connect import Connection

PART_WAIT_MARGIN = 120.0  # seconds a head's archive waits for its parts beyond their stop grace

# Written on the node with its own python: atomic, the directory made if the cell has none yet.
_WRITE_END = (
    "import json,os,sys\n"
    "p=sys.argv[1]\n"
    "os.makedirs(os.path.dirname(p),exist_ok=True)\n"
    "t=p+'.%d.tmp'%os.getpid()\n"
    "open(t,'w').write(sys.argv[2])\n"
    "os.replace(t,p)\n"
)


def part_cell(head: Cell, node: NodePart) -> Cell:
    """What node `node.rank`'s runner gets: its own env, repo and server, and the head's URL
    only where the playbook asks every node to reach it (`ready.from_nodes`)."""
    ready = head.server.ready if head.server is not None else None
    url = ready.url if ready is not None and ready.from_nodes else None
    head_url = None
    if url:  # the head asks itself on 127.0.0.1; this node asks it where it reaches it
        head_url = url.replace("//127.0.0.1:", f"//{node.head_address}:", 1)
        head_url = head_url.replace("//localhost:", f"//{node.head_address}:", 1)
    status = head.server.ready.status if head.server is not None else 200
    # A node's part serves no HTTP: its runner neither checks nor waits for the head's port.
    server = node.server.model_copy(update={"port": None}) if node.server is not None else None
    return head.model_copy(
        update={
            "id": part_id(head.id, node.rank),
            "host": node.host,
            "repo": node.repo,
            "env": dict(node.env),
            "server": server,
            "nodes": (),
            "node": NodeRole(
                of=head.id, rank=node.rank, head=head.host, head_url=head_url, head_status=status
            ),
            "expect": {},
        }
    )


@dataclass
class _Part:
    head: str
    host: str
    rank: int
    cell: Cell
    archive: Path | None = None
    outcome: Any = None  # a CellOutcome when it ended without an archive
    released: bool = False
    joined: bool = False  # up and checked: its hold started


class NodeJoin:
    """The run's multi-node cells: their parts, the end requests between nodes, the join."""

    def __init__(self, cells: list[Cell]) -> None:
        self.heads = {c.id: c for c in cells if c.nodes}
        self.parts: dict[str, _Part] = {}
        for head in self.heads.values():
            for node in head.nodes:
                cell = part_cell(head, node)
                self.parts[cell.id] = _Part(head.id, node.host, node.rank, cell)
        self.tmp: Path | None = None  # parts' archives wait here for their head's (made on use)
        self.staging: Path | None = None  # where `tmp` is made: the run's staging folder
        self.cond = threading.Condition()
        self.queues: dict[str, tuple[Connection, str, str]] = {}  # host -> (conn, invocation, run)
        self.head_ended: set[str] = set()
        self.head_ready: set[str] = set()  # heads whose runner said `ready ok`
        self.aborted: dict[str, str] = {}  # head id -> the reason its cell was aborted with

    def __bool__(self) -> bool:
        return bool(self.heads)

    def part_cells(self, head_ids: list[str]) -> dict[str, list[Cell]]:
        """Each node host's part cells, in the order of `head_ids`."""
        out: dict[str, list[Cell]] = {}
        for hid in head_ids:
            for node in self.heads[hid].nodes:
                out.setdefault(node.host, []).append(self.parts[part_id(hid, node.rank)].cell)
        return out

    def attach(self, conn: Connection, invocation: str, run_id: str) -> None:
        """A host's runner invocation started: end requests reach its cells through `conn`.
        What its parts were told before is said again (a word for an earlier invocation, or
        for no runner yet, is one they never read): a head ready, or a head's cell ended."""
        with self.cond:
            self.queues[conn.host.name] = (conn, invocation, run_id)
            here = [
                p
                for p in self.parts.values()
                if p.host == conn.host.name and p.archive is None and p.outcome is None
            ]
            ended = [p for p in here if p.released]
            ready = [p for p in here if p.head in self.head_ready and not p.released]
        for p in ended:
            self._send(p.host, p.cell.id, "release", HEAD_ENDED, p.rank)
        for p in ready:
            self._send(p.host, p.cell.id, "head_ready", "", p.rank, suffix=HEAD_READY_SUFFIX)

    @staticmethod
    def invocation() -> str:
        """A fresh invocation token (a runner ignores end requests meant for another)."""
        return secrets.token_hex(8)

    # -- events ----------------------------------------------------------------------------

    def on_event(self, cid: str, event: dict[str, Any]) -> None:
        """A runner event of a head or a part: release or abort the other nodes."""
        kind = event.get("event")
        if cid in self.heads:
            ending = kind == "done" or (
                kind == "step" and event.get("step") == "stop" and event.get("status") == "start"
            )
            if ending:
                self.end_head(cid)
            elif (kind, event.get("step"), event.get("status")) == ("step", "ready", "ok"):
                self.head_is_ready(cid)
        elif cid in self.parts and kind == "done" and event.get("status") != "passed":
            self.part_failed(cid, str(event.get("reason") or event.get("status")))
        elif cid in self.parts and (kind, event.get("step"), event.get("status")) == (
            "step",
            "bench",
            "start",
        ):  # every step before its hold passed: the part is up and checked
            self.part_joined(cid)

    def part_joined(self, cid: str) -> None:
        """A node's part is up and checked: tell its head which ranks are (its `nodes` step
        waits for all of them before the first measured request)."""
        part = self.parts[cid]
        head = self.heads[part.head]
        with self.cond:
            part.joined = True
            ranks = sorted(p.rank for p in self.parts.values() if p.head == head.id and p.joined)
        self._send(head.host, head.id, "joined", "", 0, ranks=ranks)

    def head_is_ready(self, head_id: str) -> None:
        """The head's runner said `ready ok`: tell each of its parts (their `ready` waits)."""
        with self.cond:
            if head_id in self.head_ready or head_id in self.head_ended:
                return
            self.head_ready.add(head_id)
            parts = [p for p in self.parts.values() if p.head == head_id and not p.released]
        for p in parts:
            self._send(p.host, p.cell.id, "head_ready", "", p.rank, suffix=HEAD_READY_SUFFIX)

    def end_head(self, head_id: str) -> None:
        """The head's cell is ending: release its parts still holding."""
        with self.cond:
            if head_id in self.head_ended:
                return
            self.head_ended.add(head_id)
            parts = [p for p in self.parts.values() if p.head == head_id and not p.released]
            for p in parts:
                p.released = True
        for p in parts:
            self._send(p.host, p.cell.id, "release", HEAD_ENDED, p.rank)

    def part_failed(self, cid: str, reason: str) -> None:
        """A node's part failed: abort the head's cell unless it already ended."""
        part = self.parts[cid]
        head = self.heads[part.head]
        why = f"node {part.host} (rank {part.rank}) failed: {reason}"
        with self.cond:
            if part.head in self.head_ended or part.head in self.aborted:
                return
            self.aborted[part.head] = why
        self._send(head.host, head.id, "abort", why, 0)

    def _send(
        self,
        host: str,
        cid: str,
        kind: str,
        reason: str,
        rank: int,
        ranks: list[int] | None = None,
        suffix: str | None = None,
    ) -> None:
        """Write an end request (or, with `ranks`, the nodes that joined; with `suffix`, that
        file instead) for `cid` on `host`."""
        with self.cond:
            found = self.queues.get(host)
        if found is None:
            return  # that host's runner is not running: nothing there to end
        conn, invocation, run_id = found
        workdir = conn.node_workdir(conn.host.workdir, rank)
        if suffix is None:
            suffix = JOINED_SUFFIX if ranks is not None else END_SUFFIX
        path = f"{workdir}/runs/{run_id}/.{cid}{suffix}"
        doc: dict[str, Any] = {"kind": kind, "reason": reason, "invocation": invocation}
        if ranks is not None:
            doc["ranks"] = ranks
        text = json.dumps(doc)

        argv = [conn.host.python, "-c", _WRITE_END, path, text]

        def send() -> None:
            with contextlib.suppress(OrchError):  # a lost node's runner ends its part on EOF
                # on Slurm: a step in the job of the nodes' runners, where one runs
                if conn.run_on_job_nodes(argv, 60.0):
                    return
                conn.run(argv, timeout=60)

        threading.Thread(target=send, daemon=True, name=f"end-{cid}").start()

    # -- archives --------------------------------------------------------------------------

    def is_part(self, cid: str) -> bool:
        """Whether `cid` is a node's part (never a cell of the run on its own)."""
        return cid in self.parts

    def part_finished(self, cid: str) -> bool:
        """Whether the part `cid` sent its archive or ended without one."""
        part = self.parts.get(cid)
        return part is not None and (part.archive is not None or part.outcome is not None)

    def part_archived(self, cid: str, archive: Path) -> None:
        """A part's archive arrived: kept until its head's archive joins it."""
        with self.cond:
            if self.tmp is None:
                self.tmp = Path(tempfile.mkdtemp(prefix="nodes-", dir=self.staging))
            keep = self.tmp / f"{cid}.tar.gz"
        shutil.move(str(archive), keep)
        with self.cond:
            self.parts[cid].archive = keep
            self.cond.notify_all()

    def part_ended(self, cid: str, outcome: Any) -> None:
        """A part ended without an archive (its host was lost, its runner failed)."""
        with self.cond:
            part = self.parts[cid]
            if part.outcome is not None or part.archive is not None:
                return
            part.outcome = outcome
            self.cond.notify_all()
        self.part_failed(cid, str(getattr(outcome, "reason", "") or "no result"))

    def close(self) -> None:
        """Remove the archives kept for joining (the run is over)."""
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def join(self, head: Cell, staged: Path) -> list[dict[str, Any]]:
        """Wait for every part of `head`, put each under `nodes/<host>/` of the staged cell
        folder, and say what each node did (also written as nodes.json)."""
        self.end_head(head.id)
        parts = [self.parts[part_id(head.id, n.rank)] for n in head.nodes]
        grace = max((n.server.stop_grace if n.server else 15.0) for n in head.nodes)
        with self.cond:
            self.cond.wait_for(
                lambda: all(p.archive is not None or p.outcome is not None for p in parts),
                timeout=grace + PART_WAIT_MARGIN,
            )
        summary: list[dict[str, Any]] = []
        for p in parts:
            entry: dict[str, Any] = {"host": p.host, "rank": p.rank, "part": p.cell.id}
            if p.archive is not None:
                dest = staged / NODES_DIR / p.host
                shared = p.host == head.host  # the nodes of one Slurm job: named by Slurm
                if shared:
                    dest = staged / NODES_DIR / f".rank{p.rank}"
                try:
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    extract_archive(p.archive, dest)
                    if shared:
                        entry["host"] = _slurm_node_name(dest) or f"{p.host}.n{p.rank}"
                        entry["via"] = p.host
                        dest = dest.rename(dest.parent / entry["host"])
                    doc = json.loads((dest / CELL_JSON).read_text())
                except (OrchError, OSError, ValueError, tarfile.TarError) as exc:
                    entry.update(status="failed", reason=f"its results are unreadable: {exc}")
                else:
                    entry.update(
                        status=doc.get("status"),
                        reason=doc.get("reason") or None,
                        failed_step=doc.get("failed_step"),
                        hold=(doc.get("steps") or {}).get("bench", {}).get("detail"),
                    )
            elif p.outcome is not None:
                entry.update(status="failed", reason=p.outcome.reason, failed_step=p.outcome.step)
            else:
                entry.update(status="failed", reason="its result never arrived")
            summary.append(entry)
        (staged / NODES_JSON).write_text(json.dumps(summary, indent=2) + "\n")
        return summary


def _slurm_node_name(folder: Path) -> str | None:
    """The Slurm node (SLURMD_NODENAME) a part ran on, from its snapshot; None if unknown."""
    try:
        snapshot = json.loads((folder / SNAPSHOT_PRE).read_text())
        name = snapshot["slurm"]["node_name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name if is_node_folder_name(name) else None


def joined_verdict(
    status: str,
    reason: str | None,
    step: str | None,
    nodes: list[dict[str, Any]],
    abort_reason: str | None = None,
) -> tuple[str, str | None, str | None]:
    """The cell's (status, reason, failed step) over the head's and every node's: a failed node
    fails the cell and is named first; the head's own reason follows unless it is only the abort
    a failed node caused (`abort_reason`, which names that node already). When every failed node
    failed only because the head's cell had ended (HEAD_ENDED), the head's reason comes first."""
    failed = [n for n in nodes if n.get("status") != "passed"]
    if not failed:
        return status, reason, step
    followed = all(str(n.get("reason") or "").startswith(HEAD_ENDED) for n in failed)
    if followed and status != "passed" and reason:
        names = ", ".join(f"{n['host']} (rank {n['rank']})" for n in failed)
        which = "node" if len(failed) == 1 else "nodes"
        stopped = "interrupted" if status == "interrupted" else "failed"
        return stopped, f"{reason}; {which} {names} stopped with the head", step
    said = [
        f"node {n['host']} (rank {n['rank']}): "
        + (f"{n['failed_step']}: " if n.get("failed_step") else "")
        + str(n.get("reason") or n.get("status"))
        for n in failed
    ]
    if status != "passed" and reason and reason != abort_reason:
        said.append(f"head: {reason}")
    status = "interrupted" if status == "interrupted" else "failed"
    return status, "; ".join(said), failed[0].get("failed_step") or step


def with_head_address(cell: Cell, cell_dir: Path) -> Cell:
    """`cell` as its runner ran it on a Slurm job's head: the address the runner put where
    planning wrote HEAD_PLACEHOLDER, read back from the cell as `cell.json` records it, so the
    server's reported arguments are scored against what it was really given."""
    declared = cell.model_dump(mode="json")
    if HEAD_PLACEHOLDER not in json.dumps(declared):
        return cell
    try:
        ran = json.loads((cell_dir / CELL_JSON).read_text()).get("cell")
    except (OSError, ValueError, AttributeError):
        return cell
    address = _address_in(declared, ran)
    if address is None:
        return cell
    text = json.dumps(declared).replace(HEAD_PLACEHOLDER, address)
    return Cell.model_validate({**json.loads(text), "id": cell.id})


def _address_in(declared: Any, ran: Any) -> str | None:
    """What stands for HEAD_PLACEHOLDER in `ran`, found where `declared` holds it."""
    if isinstance(declared, str) and isinstance(ran, str) and HEAD_PLACEHOLDER in declared:
        first, *rest = (re.escape(piece) for piece in declared.split(HEAD_PLACEHOLDER))
        pattern = first + r"(?P<a>[A-Za-z0-9][A-Za-z0-9._-]*)" + r"(?P=a)".join(rest)
        found = re.fullmatch(pattern, ran)
        return found.group("a") if found else None
    pairs: list[tuple[Any, Any]] = []
    if isinstance(declared, dict) and isinstance(ran, dict):
        pairs = [(declared[k], ran[k]) for k in declared if k in ran]
    elif isinstance(declared, list) and isinstance(ran, list) and len(declared) == len(ran):
        pairs = list(zip(declared, ran, strict=True))
    for mine, theirs in pairs:
        address = _address_in(mine, theirs)
        if address is not None:
            return address
    return None

"""Multi-node cells, as planned: `server.nodes: N` makes one server span N hosts.

Node groups, node variables and joined cells for plan/build.py and planner.py: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.cell import Cell, NodePart, canonical_json
from orchestrator.config.host import Host, Inventory
from orchestrator.config.loaded import LoadedPlaybook
from orchestrator.config.templates.render import has_template
from orchestrator.errors import InputError
from orchestrator.runner.slurm_tasks import HEAD_PLACEHOLDER

DIST_PORT_OFFSET = 100  # the default head_port: the server's port + this
DEFAULT_DIST_PORT = 30100  # when the server's port is not a plain number


def declared_nodes(playbook: LoadedPlaybook) -> int:
    """`server.nodes` as a plain count (1 without it): it decides which hosts form a server,
    so it is read before any template is rendered and may not be one."""
    server = playbook.data.get("server")
    raw = server.get("nodes", 1) if isinstance(server, Mapping) else 1
    where = playbook.locate(("server", "nodes"))
    if isinstance(raw, str) and has_template(raw):
        raise InputError(
            "server.nodes must be a number, not a template: it decides which hosts form one "
            "server before anything is rendered",
            location=where,
            key_path="server.nodes",
            hint="write nodes: 2, and one playbook per node count",
        )
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise InputError(
            f"server.nodes must be a whole number of hosts, at least 1 (got {raw!r})",
            location=where,
            key_path="server.nodes",
        )
    return raw


def dist_port(playbook: LoadedPlaybook) -> int:
    """`server.dist_port` (a plain number: templates see it as `head_port`), else the server's
    port + 100 when that is a plain number, else 30100."""
    server = playbook.data.get("server")
    if not isinstance(server, Mapping):
        return DEFAULT_DIST_PORT
    declared = server.get("dist_port")
    if isinstance(declared, str) and has_template(declared):
        raise InputError(
            "server.dist_port must be a number, not a template: every node's templates see it "
            "as head_port",
            location=playbook.locate(("server", "dist_port")),
            key_path="server.dist_port",
            hint="write dist_port: 50000 (a port free on the head)",
        )
    if isinstance(declared, int) and not isinstance(declared, bool):
        return declared
    port = server.get("port")
    args = server.get("args")
    if port is None and isinstance(args, Mapping):
        port = args.get("port")
    if isinstance(port, int) and not isinstance(port, bool):
        return port + DIST_PORT_OFFSET
    return DEFAULT_DIST_PORT


def node_groups(
    hosts: Sequence[str], nodes: int, playbook: LoadedPlaybook, inventory: Inventory
) -> list[list[str]]:
    """The play's hosts cut into groups of `nodes`, head first: a Slurm host is a group by
    itself (its job gets `nodes` nodes), the others go in consecutive groups; a count of them
    that is not a multiple of `nodes` is refused with the hosts found."""
    groups: list[list[str]] = []
    direct: list[str] = []
    for name in hosts:
        if inventory.hosts[name].executor == "slurm":
            groups.append([name] * nodes)
        else:
            direct.append(name)
    if len(direct) % nodes:
        raise InputError(
            f"server.nodes is {nodes}, but the play selects {len(direct)} host"
            f"{'' if len(direct) == 1 else 's'} ({', '.join(direct)})"
            f"{' besides its Slurm hosts' if len(direct) < len(hosts) else ''}: not a multiple "
            f"of {nodes}",
            location=playbook.locate(("server", "nodes")),
            key_path="server.nodes",
            hint=f"select a multiple of {nodes} hosts (hosts: / --limit); each {nodes} "
            "consecutive hosts in the play's order (as `ansible --list-hosts` lists them) form "
            "one server, the first its head (a "
            f"Slurm host runs each cell as one job of {nodes} nodes by itself)",
        )
    groups += [direct[i : i + nodes] for i in range(0, len(direct), nodes)]
    order = {name: i for i, name in enumerate(hosts)}
    return sorted(groups, key=lambda group: order[group[0]])


def single_node_vars(host: Host) -> dict[str, Any]:
    """The node variables of a one-node cell: rank 0 of 1, the host its own head."""
    return {
        "node_rank": 0,
        "nnodes": 1,
        "head_host": host.target,
        "head_port": DEFAULT_DIST_PORT,
        "node_hosts": [host.name],
    }


def node_vars(group: Sequence[Host], rank: int, port: int) -> dict[str, Any]:
    """The node variables of rank `rank` in `group` (head first). On a Slurm host the head is
    the job's first node, known once the job runs: the runner puts its address where
    `head_host` went (runner/slurm_tasks.py); `node_hosts` is left undefined there (Slurm
    picks the nodes), so a template that reads it is refused rather than given the login host."""
    slurm = group[0].executor == "slurm"
    names: dict[str, Any] = {
        "node_rank": rank,
        "nnodes": len(group),
        "head_host": HEAD_PLACEHOLDER if slurm else group[0].target,
        "head_port": port,
    }
    if not slurm:
        names["node_hosts"] = [h.name for h in group]
    return names


def joined_cell(
    head: Cell,
    head_address: str,
    parts: Sequence[tuple[Host, Cell]],
    head_port: int | None = None,
) -> Cell:
    """The head's cell with the other nodes' parts; its id hashes theirs (each part's own id
    already hashes its host, env and server, secrets as placeholders). `head_port` (the dist
    port) goes with each part, so the head's runner checks it is free before starting."""
    nodes = tuple(
        NodePart(
            host=cell.host,
            address=host.target,
            rank=rank,
            head_address=head_address,
            head_port=head_port,
            repo=cell.repo,
            env=dict(cell.env),
            server=cell.server,
        )
        for rank, (host, cell) in enumerate(parts, start=1)
    )
    slug, _, _ = head.id.rpartition("-")
    text = canonical_json([head.id, [[c.host, c.id] for _, c in parts]])
    ident = f"{slug}-{hashlib.sha256(text.encode()).hexdigest()[:8]}" if slug else head.id
    return head.model_copy(update={"id": ident, "nodes": nodes})

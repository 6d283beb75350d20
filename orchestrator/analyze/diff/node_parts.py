"""The nodes of two multi-node cells, paired by rank, for `orch diff` to compare node by node.

A multi-node cell keeps each other node's own folder under `nodes/<host>/` and says what each
did in `nodes.json` (execute/apply/node_join.py); the head's files are the cell's own.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.analyze.evidence import CellEvidence
from orchestrator.results.records import node_records


def node_folders(cell: CellEvidence) -> dict[int, tuple[str, Path]]:
    """rank -> (host, folder) of the cell's other nodes whose folder is there (empty for a
    one-node cell)."""
    return {n.rank: (n.host, n.path) for n in node_records(cell.path) if n.path.is_dir()}


def paired_nodes(
    a: CellEvidence, b: CellEvidence
) -> list[tuple[int, CellEvidence | None, CellEvidence | None]]:
    """Each rank either cell has, with that node's evidence on each side (None: not there)."""
    fa, fb = node_folders(a), node_folders(b)
    pairs = []
    for rank in sorted(set(fa) | set(fb)):
        ea = CellEvidence.load(fa[rank][1]) if rank in fa else None
        eb = CellEvidence.load(fb[rank][1]) if rank in fb else None
        pairs.append((rank, ea, eb))
    return pairs


def node_label(rank: int, a: CellEvidence | None, b: CellEvidence | None) -> str:
    """`node 1 (host2)`, or `node 1 (host2 | host4)` when the sides ran it on different hosts."""
    hosts = [e.path.name if e is not None else "<missing>" for e in (a, b)]
    shown = hosts[0] if hosts[0] == hosts[1] else " | ".join(hosts)
    return f"node {rank} ({shown})"

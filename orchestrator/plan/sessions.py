"""Server sessions, as planned: which cells of a host can share one server start.

Two cells of one host share a server when everything that can change what the server is is
equal: the repo pin and setup, the env, and the whole server spec (argv, cwd, port, readiness,
captures, stop grace, env checking). Bench settings, expectations and snapshots do not count.
`server.restart: per_cell` gives every cell a server of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from orchestrator.cell import Cell, canonical_json

_NOT_SERVER = {"requested", "resolved_at", "resolved_by", "fetch"}


def session_key(cell: Cell) -> str:
    """The cell's server identity: equal keys on one host can share one server start."""
    if cell.server is None or cell.server.restart == "per_cell":
        return cell.id
    # The commit as pinned, not the ref that named it: two refs at one SHA are one server.
    repo = cell.repo.model_dump(mode="json", exclude=_NOT_SERVER) if cell.repo else None
    identity = {
        "repo": repo,
        "env": cell.env,
        "server": cell.server.model_dump(mode="json"),
    }
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:16]


def session_labels(cells: Iterable[Cell]) -> dict[str, str]:
    """cell id -> `host/N`, N counting each host's distinct server sessions from 1 ('' when
    the cell has no server)."""
    labels: dict[str, str] = {}
    numbers: dict[tuple[str, str], int] = {}
    per_host: dict[str, int] = {}
    for cell in cells:
        if cell.server is None:
            labels[cell.id] = ""
            continue
        key = (cell.host, session_key(cell))
        if key not in numbers:
            per_host[cell.host] = per_host.get(cell.host, 0) + 1
            numbers[key] = per_host[cell.host]
        labels[cell.id] = f"{cell.host}/{numbers[key]}"
    return labels

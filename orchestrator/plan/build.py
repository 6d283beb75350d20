"""Playbook × inventory × matrix → fully rendered Cells (`build_cells`, called by app/plan.py).

Context, precedence, strategies, cell order and ids: docs/ARCHITECTURE.md, "The playbook".
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any

from jinja2 import TemplateSyntaxError
from jinja2.exceptions import TemplateAssertionError
from jinja2.parser import Parser

from orchestrator.cell import Cell
from orchestrator.config.host import Inventory
from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.loaded import LoadedPlaybook
from orchestrator.config.patterns import select_hosts_checked
from orchestrator.config.templates.render import Locate, TemplateEngine, has_template
from orchestrator.errors import InputError
from orchestrator.plan.matrix import Matrix, MatrixPoint, parse_matrix
from orchestrator.plan.nodes import declared_nodes, dist_port, joined_cell, node_groups, node_vars
from orchestrator.plan.planner import HostPlanner, raw_safe_axes
from orchestrator.plan.slo import check_search_axis


def build_cells(
    playbook: LoadedPlaybook, inventory: Inventory, *, limit: str | None = None
) -> list[Cell]:
    """Every cell of `playbook` on the hosts of `inventory` it selects (the rules:
    docs/ARCHITECTURE.md, The playbook)."""
    # Building 100k cells allocates millions of objects and no cycles: GC passes only cost time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _build_cells(playbook, inventory, limit)
    finally:
        if collecting:
            gc.enable()


def cell_spec(cell: Cell) -> dict[str, Any]:
    """What a cell's id hashes: the Cell's JSON without `id`, `playbook` and `schema_version`.

    `cell.id == cell_id(cell.axes, cell.host, cell_spec(cell), masks)` holds for every built
    cell, `masks` being the {value: name} of its secret values (none: no masks needed).
    """
    return cell.model_dump(
        mode="json",
        exclude={
            *("id", "playbook", "schema_version", "host"),
            *("snapshot", "telemetry", "preflight", "profile", "engine_metrics"),  # observation
        },
    )


def _build_cells(playbook: LoadedPlaybook, inventory: Inventory, limit: str | None) -> list[Cell]:
    data = playbook.data
    locate = playbook.locate
    hosts = _select_hosts(playbook.model.hosts, inventory, limit, locate)
    matrix = parse_matrix(data.get("matrix"), locate=locate)
    strategy = playbook.model.strategy  # the model refused all but each, spread and templates
    if strategy not in ("each", "spread"):
        raise InputError(
            f"unknown strategy {strategy!r}",
            location=locate(("strategy",)),
            key_path="strategy",
            hint="each (every host runs every point) or spread (each point once)",
        )
    engine = TemplateEngine()
    _check_where_syntax(matrix.where, engine, locate)
    _check_search(data.get("bench"), matrix, locate)
    raw_safe = raw_safe_axes(data.get("matrix"), matrix)
    nodes = declared_nodes(playbook)
    groups = node_groups(hosts, nodes, playbook, inventory) if nodes > 1 else [[h] for h in hosts]
    planners = {}  # each group's head (rank 0): it decides which points the group runs
    by_rank = []  # each group's planners, head first (a Slurm host's nodes: the one host)
    port = dist_port(playbook)
    for group in groups:
        members = [inventory.hosts[h] for h in group]
        row = []
        for rank in range(len(group)):
            node = node_vars(members, rank, port) if nodes > 1 else None
            row.append(HostPlanner(playbook, inventory, members[rank], engine, raw_safe, node))
        by_rank.append(row)
        planners[group[0]] = row[0]
    if nodes > 1:
        heads = [g[0] for g in groups]
        return _joined_cells(groups, by_rank, _assign(heads, planners, matrix, strategy, locate))

    assigned = _assign(hosts, planners, matrix, strategy, locate)
    cells: list[Cell] = []
    seen: dict[str, tuple[str, MatrixPoint]] = {}
    for host in hosts:
        host_cells = planners[host].cells(assigned[host])
        for cell, point in host_cells:
            other = seen.get(cell.id)
            if other is not None:
                raise _duplicate_error(cell, other[1], point, data.get("matrix"), locate)
            seen[cell.id] = (host, point)
        cells.extend(_group_by_repo([c for c, _ in host_cells]))
    return cells


def _assign(
    hosts: list[str],
    planners: dict[str, HostPlanner],
    matrix: Matrix,
    strategy: str,
    locate: Locate,
) -> dict[str, list[MatrixPoint]]:
    """Which points each host (or each group's head) runs: every point, or spread round-robin."""
    assigned: dict[str, list[MatrixPoint]] = {h: [] for h in hosts}
    kept_total = 0
    if strategy == "spread":
        for i, point in enumerate(matrix.candidates):
            host = hosts[i % len(hosts)]
            if planners[host].keep(point, matrix):
                assigned[host].append(point)
                kept_total += 1
        for i, point in enumerate(matrix.includes):
            assigned[hosts[(len(matrix.candidates) + i) % len(hosts)]].append(point)
    else:
        for host in hosts:
            planner = planners[host]
            if matrix.where is None or matrix.where is True:
                kept = list(matrix.candidates)
            else:
                kept = [p for p in matrix.candidates if planner.keep(p, matrix)]
            kept_total += len(kept)
            assigned[host] = kept + matrix.includes
    if not any(assigned.values()):
        raise matrix.empty_error(kept_total, locate=locate)
    return assigned


def _joined_cells(
    groups: list[list[str]],
    by_rank: list[list[HostPlanner]],
    assigned: dict[str, list[MatrixPoint]],
) -> list[Cell]:
    """Multi-node cells: each group renders its head's points on every node, joined by point."""
    cells: list[Cell] = []
    for group, planners in zip(groups, by_rank, strict=True):
        points = assigned[group[0]]
        per_rank = [planner.cells(points) for planner in planners]
        head_vars = planners[0].node_vars or {}
        head_address, head_port = str(head_vars["head_host"]), int(head_vars["head_port"])
        joined = []
        for i, (head, _point) in enumerate(per_rank[0]):
            parts = [(planners[r].host, per_rank[r][i][0]) for r in range(1, len(group))]
            joined.append(joined_cell(head, head_address, parts, head_port))
        cells.extend(_group_by_repo(joined))
    return cells


def _select_hosts(
    pattern: Any, inventory: Inventory, limit: str | None, locate: Locate
) -> list[str]:
    where = locate(("hosts",))
    try:
        hosts: list[str] = select_hosts_checked(
            inventory, str(pattern), location=where, key_path="hosts"
        )
    except InputError as exc:
        if inventory.source is None and exc.hint is None:
            # The usual cause: the playbook names inventory groups and no -i was given.
            exc.hint = "no inventory given (-i), so the only host is localhost"
        raise
    if limit is None:
        return hosts
    # --limit is typed on the command line: its errors have no file location, and only a bad
    # `hosts:` pattern points at the playbook.
    allowed = set(select_hosts_checked(inventory, limit, key_path="--limit"))
    limited = [h for h in hosts if h in allowed]
    if not limited:
        raise InputError(
            f"{limit!r} matches no host of this play",
            key_path="--limit",
            hint=f"the play's hosts: {pattern!r} selects {', '.join(hosts)}",
        )
    return limited


def _check_where_syntax(where: Any, engine: TemplateEngine, locate: Locate) -> None:
    """A syntax error in a bare `where:` expression, in terms of the text the user wrote.

    The expression is rendered wrapped as `{{ (...) }}` (render.expression_source), so Jinja
    would otherwise report tokens the user never wrote, e.g. "unexpected ')'" for `a ==`.
    """
    if not isinstance(where, str) or has_template(where):
        return
    parser = Parser(engine.plain, where, state="variable")
    try:
        parser.parse_expression()
        trailing = None if parser.stream.eos else parser.stream.current
    except TemplateAssertionError:
        return  # an unknown filter or test: reported with suggestions when it is compiled
    except TemplateSyntaxError as exc:
        problem = str(exc.message or exc).replace("'end of template'", "end of the expression")
        problem = problem.replace("end of template", "end of the expression")
        trailing = None
    else:
        if trailing is None:
            return
        token = f"string {trailing.value!r}" if trailing.type == "string" else repr(trailing.value)
        problem = f"unexpected {token} after a complete expression (a missing operator?)"
    raise InputError(
        f"syntax error in the expression {where!r}: {problem}",
        location=locate(("matrix", "where")),
        key_path="matrix.where",
        hint="a Jinja expression that is true for the cells to keep, e.g. "
        "matrix.nccl == 'tuned' or matrix.tp <= 8",
    )


def _check_search(bench: Any, matrix: Matrix, locate: Locate) -> None:
    """`bench.search.axis` names a matrix axis of two or more numbers (the search's levels)."""
    search = bench.get("search") if isinstance(bench, Mapping) else None
    axis = search.get("axis") if isinstance(search, Mapping) else None
    if axis is None or has_template(str(axis)):
        return
    points = matrix.candidates + matrix.includes
    problem = check_search_axis(
        axis, matrix.axes, [p.values[axis] for p in points if axis in p.values]
    )
    if problem is not None:
        raise InputError(
            problem,
            location=locate(("bench", "search", "axis")),
            key_path="bench.search.axis",
            hint="e.g. matrix: {rate: [1, 2, 4, 8]} with request-rate: '{{ matrix.rate }}'",
        )


def _group_by_repo(cells: list[Cell]) -> list[Cell]:
    """Cells of one host with the same repo pin made adjacent, in order of first appearance."""
    groups: dict[Any, list[Cell]] = {}
    for cell in cells:
        repo = cell.repo
        key = None if repo is None else (repo.url, repo.dest, repo.version)
        group = groups.get(key)
        if group is None:
            group = groups[key] = []
        group.append(cell)
    if len(groups) <= 1:
        return cells
    return [c for group in groups.values() for c in group]


def _duplicate_error(
    cell: Cell, first: MatrixPoint, second: MatrixPoint, raw_matrix: Any, locate: Locate
) -> InputError:
    where = f"the points at {format_key_path(first.origin)} and {format_key_path(second.origin)}"
    path: KeyPath = second.origin
    if second.origin == ("matrix",) and isinstance(raw_matrix, Mapping):
        for axis, value in second.values.items():  # point at an axis that lists a value twice
            declared = raw_matrix.get(axis)
            if isinstance(declared, list) and declared.count(value) > 1:
                path = ("matrix", axis)
                where = f"axis {axis!r} lists {value!r} more than once, so two points"
                break
    return InputError(
        f"duplicate cell {cell.id!r} on host {cell.host!r}: {where} are identical "
        f"({second.values})",
        location=locate(path),
        key_path=format_key_path(path),
        hint="remove the repeated axis value or include entry",
    )

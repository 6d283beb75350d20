"""Playbook × inventory × matrix → fully rendered Cells.

For each selected host and each matrix point, the template context is: the playbook's `vars`
(lowest) < the host's inventory vars < `-e` extra vars (highest), plus `matrix`,
`inventory_hostname`, `group_names`, `groups`, `hostvars` (each host's raw inventory vars) and
`orch_python` (the controller's interpreter). Built-in names cannot be redefined by playbook vars.

Sections are rendered per cell, then: `env` (a mapping or a list merged in order) becomes text
(bools as `true`/`false`, numbers with `str()`, null is an error); `server.args`/`bench.args` are
merged in order (a list item rendering to null adds nothing); the adapters build the
ServerSpec/BenchSpec; `expect` tolerances such as "5%" become fractions; `timeouts.setup`,
`timeouts.ready` and `timeouts.bench` are defaults for `repo.setup_timeout`, `server.ready.timeout`
and `bench.timeout`.

`strategy: each` runs every point on every matched host; `strategy: spread` runs each point
once, assigning points to the matched hosts round-robin in matrix order (the `where:` filter is
evaluated on the assigned host). Cells are ordered by host, then grouped by repo pin (first
appearance), keeping matrix order inside a group, so one host checks a commit out once.

A cell's id is `cell_id(axes, host, spec)` where spec is the Cell's JSON without `id`,
`playbook` and `schema_version`: renaming a playbook keeps ids, so runs stay comparable. Secret
values (secret vars, rendered; values under secret names inside vars; env values of secret
names) are hashed as placeholders, so an id never depends on a secret.

Speed: each section is rendered once per distinct value of the matrix axes it reads
(found statically, through variables that reference variables), not once per cell.
"""

from __future__ import annotations

import difflib
import gc
import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from hashlib import sha256
from operator import itemgetter
from typing import Any

from jinja2 import TemplateSyntaxError
from jinja2.exceptions import TemplateAssertionError
from jinja2.parser import Parser
from pydantic import BaseModel, ValidationError

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.config.host import Host, Inventory
from orchestrator.config.loaded import KeyPath, LoadedPlaybook, format_key_path
from orchestrator.config.patterns import select_hosts_checked
from orchestrator.errors import InputError, OrchError, SourceLocation
from orchestrator.plan.cell import (
    CELL_SCHEMA_VERSION,
    BenchSpec,
    Cell,
    Expectation,
    RepoPin,
    ServerSpec,
    SnapshotSpec,
    canonical_json,
    mask_secrets,
    secret_masks,
    secret_placeholder,
    slug_part,
)
from orchestrator.plan.matrix import Matrix, MatrixPoint, parse_matrix
from orchestrator.plan.render import (
    Locate,
    TemplateEngine,
    VarDecl,
    VariableScope,
    expression_source,
    has_template,
)
from orchestrator.results.redact import secret_items_in
from orchestrator.runner.redaction import is_secret_name

BUILTIN_NAMES = ("matrix", "inventory_hostname", "group_names", "groups", "hostvars", "orch_python")
TIMEOUT_KEYS = ("cell", "setup", "ready", "bench")
EXPECT_KEYS = ("min", "max", "ref", "tolerance")
DEFAULT_CELL_TIMEOUT = 4 * 3600.0
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")

AxisDeps = frozenset[str] | None  # None: every axis
_MISSING: Any = object()


def build_cells(
    playbook: LoadedPlaybook, inventory: Inventory, *, limit: str | None = None
) -> list[Cell]:
    """Every cell of `playbook` on the hosts of `inventory` it selects (see the module doc)."""
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
        mode="json", exclude={"id", "playbook", "schema_version", "host", "snapshot"}
    )


def _build_cells(playbook: LoadedPlaybook, inventory: Inventory, limit: str | None) -> list[Cell]:
    data = playbook.data
    locate = playbook.locate
    hosts = _select_hosts(data, inventory, limit, locate)
    matrix = parse_matrix(data.get("matrix"), locate=locate)
    strategy = data.get("strategy", "each")
    if strategy not in ("each", "spread"):
        raise InputError(
            f"unknown strategy {strategy!r}",
            location=locate(("strategy",)),
            key_path="strategy",
            hint="each (every host runs every point) or spread (each point once)",
        )
    _check_var_names(playbook)
    engine = TemplateEngine()
    _check_where_syntax(matrix.where, engine, locate)
    raw_safe = _raw_safe_axes(data.get("matrix"), matrix)
    planners = {
        h: _HostPlanner(playbook, inventory, inventory.hosts[h], engine, raw_safe) for h in hosts
    }

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


def _select_hosts(
    data: Mapping[str, Any], inventory: Inventory, limit: str | None, locate: Locate
) -> list[str]:
    pattern = data.get("hosts", "all")
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


def _check_var_names(playbook: LoadedPlaybook) -> None:
    for source, path in ((playbook.data.get("vars") or {}, "vars"), (playbook.extra_vars, "vars")):
        for name in source:
            if name in BUILTIN_NAMES:
                raise InputError(
                    f"variable {name!r} would hide the built-in template name",
                    location=playbook.locate((path, name)),
                    key_path=f"{path}.{name}",
                    hint="rename it",
                )


def _value_key(value: Any) -> Any:
    """A hashable key that is equal only for equal values of the same type."""
    kind = type(value)
    if kind is str:
        return value
    if kind is int or kind is float or kind is bool or value is None:
        return (kind, value)
    return ("id", id(value))  # axis values are kept alive by the matrix for the whole build


def _key_function(
    axes: AxisDeps, all_axes: tuple[str, ...], raw_safe: frozenset[str]
) -> Callable[[dict[str, Any]], Any]:
    """The memo key of a point: the values of the axes a section reads.

    Axes in `raw_safe` (hashable values, no two of different types equal, unlike 1 and True)
    are keyed by their raw values through a C-level itemgetter; others through `_value_key`.
    """
    names = tuple(all_axes) if axes is None else tuple(a for a in all_axes if a in axes)
    if not names:
        return lambda values: ()
    if all(n in raw_safe for n in names):
        return itemgetter(*names)
    if len(names) == 1:
        (only,) = names
        return lambda values: _value_key(values.get(only))
    return lambda values: tuple([_value_key(values.get(a)) for a in names])


def _raw_safe_axes(raw_matrix: Any, matrix: Matrix) -> frozenset[str]:
    """Axes whose raw values can be dict keys without conflating different values."""
    if not isinstance(raw_matrix, Mapping):
        return frozenset()
    safe: set[str] = set()
    for axis in matrix.axes:
        declared = raw_matrix.get(axis)
        values = [
            *(declared if isinstance(declared, list) else []),
            *(p.values[axis] for p in matrix.includes),
        ]
        try:
            if len(set(values)) == len({(type(v), v) for v in values}):
                safe.add(axis)
        except TypeError:  # a mapping value: not hashable
            continue
    return frozenset(safe)


def _union(a: AxisDeps, b: AxisDeps) -> AxisDeps:
    if a is None or b is None:
        return None
    return a | b


class _Unit:
    """One section's memo: results by the values of the axes it reads."""

    __slots__ = ("cache", "key")

    def __init__(self, axes: AxisDeps, all_axes: tuple[str, ...], raw_safe: frozenset[str]) -> None:
        self.key = _key_function(axes, all_axes, raw_safe)
        self.cache: dict[Any, Any] = {}

    def store(self, values: dict[str, Any], result: Any) -> Any:
        """Remember `result` for the axis values it was rendered from; returns it."""
        self.cache[self.key(values)] = result
        return result


class _PointScope:
    """The template scope of one point, built only when some section has to be rendered."""

    __slots__ = ("_scope", "planner", "values")

    def __init__(self, planner: _HostPlanner, values: dict[str, Any]) -> None:
        self.planner = planner
        self.values = values
        self._scope: VariableScope | None = None

    @property
    def scope(self) -> VariableScope:
        if self._scope is None:
            p = self.planner
            self._scope = VariableScope(
                p.engine,
                {"matrix": self.values},
                p.decls,
                shared=p.host_scope,
                local_names=p.matrix_vars,
            )
        return self._scope


class _HostPlanner:
    """Renders one host's cells, caching sections across points that read the same axes."""

    def __init__(
        self,
        playbook: LoadedPlaybook,
        inventory: Inventory,
        host: Host,
        engine: TemplateEngine,
        raw_safe: frozenset[str] = frozenset(),
    ) -> None:
        self.playbook = playbook
        self.raw_safe = raw_safe
        self.data = playbook.data
        self.locate = playbook.locate
        self.host = host
        self.engine = engine
        self.decls = self._declarations(inventory)
        fixed = dict(engine.globals)
        fixed.update(
            inventory_hostname=host.name,
            group_names=sorted(g for g in host.groups if g != "all"),
            groups={g: list(inventory.group_members(g)) for g in inventory.groups},
            hostvars={
                name: {**h.vars, "inventory_hostname": name} for name, h in inventory.hosts.items()
            },
            orch_python=sys.executable,
        )
        self.host_scope = VariableScope(engine, fixed, self.decls)
        self.var_axes = self._variable_axes()
        self.matrix_vars = frozenset(n for n, ax in self.var_axes.items() if ax is None or ax)
        self._units: dict[str, _Unit] = {}
        self._alive: list[Any] = []
        self._value_texts: dict[Any, tuple[str, str]] = {}
        self._axis_order: dict[tuple[str, ...], list[tuple[int, str]]] = {}
        self._host_prefix = "[" + json.dumps(host.name, ensure_ascii=False) + ',{"axes":{'
        listed = self.data.get("secrets") or []
        self.listed_secrets = {str(s) for s in listed} if isinstance(listed, list) else set()
        self.secret_vars = {
            n for n in self.decls if is_secret_name(n, self.listed_secrets)
        } | self.listed_secrets
        # Secret vars that read the matrix have a value per point; the others one per host.
        self.point_secret_vars = sorted(self.secret_vars & self.matrix_vars)
        self._host_secret_pairs: list[tuple[str, str]] | None = None
        self._masks: dict[Any, dict[str, str]] = {}

    # -- variables ---------------------------------------------------------------------------

    def _declarations(self, inventory: Inventory) -> dict[str, VarDecl]:
        """Ansible's precedence: inventory (group, then host) < playbook vars < -e."""
        decls: dict[str, VarDecl] = {}
        host_location = self.host.location or SourceLocation(inventory.source or "<inventory>")

        def locate_host(path: KeyPath) -> SourceLocation:
            return host_location

        for name, value in self.host.vars.items():
            if name not in BUILTIN_NAMES:
                decls[str(name)] = VarDecl(value, ("hostvars", self.host.name, name), locate_host)
        for name, value in (self.data.get("vars") or {}).items():
            decls[str(name)] = VarDecl(value, ("vars", name), self.locate)
        for name, value in self.playbook.extra_vars.items():
            decls[str(name)] = VarDecl(value, ("vars", name), self.locate)
        return decls

    def _variable_axes(self) -> dict[str, AxisDeps]:
        """Which matrix axes each variable reads, directly or through other variables."""
        direct: dict[str, tuple[frozenset[str], AxisDeps]] = {}
        for name, decl in self.decls.items():
            refs = self.engine.tree_refs(decl.value, decl.path, decl.locate)
            direct[name] = (refs.names, refs.axes)
        axes: dict[str, AxisDeps] = {n: ax for n, (_, ax) in direct.items()}
        changed = True
        while changed:  # fixpoint over the variable graph (cycles are reported when rendered)
            changed = False
            for name, (names, _) in direct.items():
                current = axes[name]
                for other in names:
                    if other in axes and other != name:
                        current = _union(current, axes[other])
                if current != axes[name]:
                    axes[name] = current
                    changed = True
        return axes

    def section_axes(self, value: Any, path: KeyPath) -> AxisDeps:
        """The matrix axes a raw section reads, through the variables it names."""
        refs = self.engine.tree_refs(value, path, self.locate)
        axes: AxisDeps = refs.axes
        for name in refs.names:
            if name in self.var_axes:
                axes = _union(axes, self.var_axes[name])
        return axes

    def unit(self, name: str, matrix: Matrix) -> _Unit:
        """The memo of one section (created on first use with its axis dependencies)."""
        found = self._units.get(name)
        if found is not None:
            return found
        timeouts = self.section_axes(self.data.get("timeouts"), ("timeouts",))
        if name == "where":
            where = matrix.where
            source = expression_source(where) if isinstance(where, str) else where
            axes = self.section_axes(source, ("matrix", "where"))
        elif name == "bench":
            axes = _union(self.section_axes(self.data.get("bench"), ("bench",)), timeouts)
            axes = _union(axes, self.section_axes(self.data.get("server"), ("server",)))
        elif name in ("repo", "server"):
            axes = _union(self.section_axes(self.data.get(name), (name,)), timeouts)
        else:
            axes = self.section_axes(self.data.get(name), (name,))
        found = self._units[name] = _Unit(axes, matrix.axes, self.raw_safe)
        return found

    # -- where and cells -----------------------------------------------------------------------

    def keep(self, point: MatrixPoint, matrix: Matrix) -> bool:
        """Whether `where:` keeps `point` on this host."""
        unit = self.unit("where", matrix)
        key = unit.key(point.values)
        found = unit.cache.get(key)
        if found is None:
            expression = matrix.where
            if isinstance(expression, bool) or expression is None:
                found = expression is not False
            else:
                scope = _PointScope(self, point.values).scope
                result = self.engine.render_expression(
                    expression, scope, ("matrix", "where"), self.locate
                )
                found = bool(result)
            unit.cache[key] = found
        return bool(found)

    def cells(self, points: list[MatrixPoint]) -> list[tuple[Cell, MatrixPoint]]:
        """One Cell per point, in point order."""
        if not points:
            return []
        matrix_axes = tuple(points[0].values)
        fake = Matrix(axes=matrix_axes, candidates=[])
        units = {
            n: self.unit(n, fake) for n in ("timeouts", "repo", "env", "server", "bench", "expect")
        }
        u_timeouts, u_repo, u_env = units["timeouts"], units["repo"], units["env"]
        u_server, u_bench, u_expect = units["server"], units["bench"], units["expect"]
        name = self.playbook.name
        host = self.host.name
        snapshot = _snapshot_spec(self.data.get("snapshot"))
        out: list[tuple[Cell, MatrixPoint]] = []
        for point in points:
            values = point.values
            ps = _PointScope(self, values)
            found = u_timeouts.cache.get(u_timeouts.key(values), _MISSING)
            if found is _MISSING:
                found = u_timeouts.store(values, self._timeouts_entry(ps))
            timeouts, cell_timeout, timeout_text = found
            found = u_repo.cache.get(u_repo.key(values), _MISSING)
            if found is _MISSING:
                found = u_repo.store(values, self._entry(self._repo(ps, timeouts)))
            repo, repo_text = found
            found = u_env.cache.get(u_env.key(values), _MISSING)
            if found is _MISSING:
                found = u_env.store(values, self._env_entry(self._env(ps)))
            env, env_text, secrets, secrets_text, env_secrets = found
            found = u_server.cache.get(u_server.key(values), _MISSING)
            if found is _MISSING:
                found = u_server.store(values, self._entry(self._server(ps, timeouts)))
            server, server_text = found
            found = u_bench.cache.get(u_bench.key(values), _MISSING)
            if found is _MISSING:
                found = u_bench.store(values, self._entry(self._bench(ps, timeouts, server)))
            bench, bench_text = found
            found = u_expect.cache.get(u_expect.key(values), _MISSING)
            if found is _MISSING:
                found = u_expect.store(values, self._entry(self._expect(ps)))
            expect, expect_text = found
            tail = "".join(
                [
                    '},"bench":',
                    bench_text,
                    ',"cell_timeout":',
                    timeout_text,
                    ',"env":',
                    env_text,
                    ',"expect":',
                    expect_text,
                    ',"repo":',
                    repo_text,
                    ',"secrets":',
                    secrets_text,
                    ',"server":',
                    server_text,
                    "}]",
                ]
            )
            masks = self._secret_masks(ps, env_secrets)
            if masks:  # tail is '},"bench":...}]': the spec after its axes, masked as cell_id does
                tail = "}," + mask_secrets(tail[2:-1], masks) + "]"
            ident = self._cell_id(values, tail)
            cell = _new_cell(
                {
                    "schema_version": CELL_SCHEMA_VERSION,
                    "id": ident,
                    "playbook": name,
                    "host": host,
                    "axes": dict(values),
                    "repo": repo,
                    "env": dict(env),
                    "secrets": secrets,
                    "server": server,
                    "bench": bench,
                    "expect": dict(expect),
                    "cell_timeout": cell_timeout,
                    "snapshot": snapshot,
                }
            )
            out.append((cell, point))
        return out

    @staticmethod
    def _entry(piece: Any) -> tuple[Any, str]:
        """A section's result with its canonical JSON (what the cell id hashes)."""
        if isinstance(piece, BaseModel):
            data: Any = piece.model_dump(mode="json")
        elif isinstance(piece, dict):
            data = {
                k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v
                for k, v in piece.items()
            }
        else:
            data = piece
        return piece, canonical_json(data)

    def _timeouts_entry(self, ps: _PointScope) -> tuple[dict[str, float], float, str]:
        timeouts = self._timeouts(ps)
        cell_timeout = timeouts.get("cell", DEFAULT_CELL_TIMEOUT)
        return timeouts, cell_timeout, canonical_json(cell_timeout)

    def _env_entry(
        self, env: dict[str, str]
    ) -> tuple[dict[str, str], str, tuple[str, ...], str, tuple[tuple[str, str], ...]]:
        """env, its hashed text, the cell's secret names, their text, and the secret env items."""
        names = set(self.secret_vars)
        names.update(k for k in env if is_secret_name(k, self.listed_secrets))
        secrets = tuple(sorted(names))
        # The id hashes a secret env value as its name's placeholder (cell.py `_mask_env`).
        hashed = {k: (secret_placeholder(k) if k in names else v) for k, v in env.items()}
        env_secrets = tuple(sorted((k, v) for k, v in env.items() if k in names))
        return env, canonical_json(hashed), secrets, canonical_json(list(secrets)), env_secrets

    def _secret_masks(
        self, ps: _PointScope, env_secrets: tuple[tuple[str, str], ...]
    ) -> dict[str, str]:
        """{secret value: name} for one point: what its cell id hashes as placeholders."""
        if self._host_secret_pairs is None:
            pairs: list[tuple[str, str]] = []
            for name, decl in self.decls.items():  # literals under secret names, at any depth
                pairs += secret_items_in({name: decl.value}, self.listed_secrets)
            for name in sorted(self.secret_vars - self.matrix_vars):
                pairs += self._rendered_secret(self.host_scope, name)
            self._host_secret_pairs = pairs
        point: list[tuple[str, str]] = []
        for name in self.point_secret_vars:
            point += self._rendered_secret(ps.scope, name)
        key = (env_secrets, tuple(point))
        found = self._masks.get(key)
        if found is None:
            found = self._masks[key] = secret_masks(
                [*self._host_secret_pairs, *env_secrets, *point]
            )
        return found

    def _rendered_secret(self, scope: VariableScope, name: str) -> list[tuple[str, str]]:
        """(name, value) of secret var `name` as rendered (nested secrets of a mapping too)."""
        if name not in self.decls:
            return []
        try:
            value = scope[name]
        except OrchError:  # the section that uses it reports the error, in reading order
            return []
        return secret_items_in({name: value}, self.secret_vars)

    def _value_text(self, value: Any) -> tuple[str, str]:
        """(canonical JSON, slug part) of one axis value, cached."""
        key = _value_key(value)
        found = self._value_texts.get(key)
        if found is None:
            found = self._value_texts[key] = (canonical_json(value), slug_part(value))
            self._alive.append(value)  # ids in `_value_key` stay unique while values live
        return found

    def _cell_id(self, values: dict[str, Any], tail: str) -> str:
        """`cell_id(values, host, spec)` from cached JSON fragments (same text, same digest).

        canonical_json sorts keys, so the spec's text is assembled in sorted-key order
        (axes, bench, cell_timeout, env, expect, repo, secrets, server); the tests check it
        against cell.py's `cell_id` over `cell_spec`.
        """
        value_texts = self._value_texts
        parts: list[tuple[str, str]] = []
        for value in values.values():
            found = value_texts.get(value if type(value) is str else _value_key(value))
            parts.append(found if found is not None else self._value_text(value))
        order = self._axis_order.get(tuple(values))
        if order is None:
            order = self._axis_order_for(tuple(values))
        axes = ",".join([prefix + parts[i][0] for i, prefix in order])
        slug = "-".join([p[1] for p in parts]) or "cell"
        digest = sha256((self._host_prefix + axes + tail).encode()).hexdigest()[:8]
        return f"{slug[:80]}-{digest}"

    def _axis_order_for(self, names: tuple[str, ...]) -> list[tuple[int, str]]:
        """For axes in declared order: (index, '"name":') pairs in canonical (sorted) order."""
        order = [(i, json.dumps(names[i], ensure_ascii=False) + ":") for i in range(len(names))]
        order.sort(key=lambda item: names[item[0]])
        self._axis_order[names] = order
        return order

    # -- sections ----------------------------------------------------------------------------

    def _render(
        self, ps: _PointScope, value: Any, path: KeyPath, shell: frozenset[KeyPath] = frozenset()
    ) -> Any:
        return self.engine.render_tree(value, ps.scope, path, self.locate, shell)

    def _error(self, message: str, path: KeyPath, hint: str | None = None) -> InputError:
        return InputError(
            message, location=self.locate(path), key_path=format_key_path(path), hint=hint
        )

    def _mapping(self, value: Any, path: KeyPath, what: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._error(f"{what} must be a mapping, got {_kind(value)}", path)
        return value

    def _timeouts(self, ps: _PointScope) -> dict[str, float]:
        raw = self.data.get("timeouts")
        if raw is None:
            return {}
        rendered = self._mapping(self._render(ps, raw, ("timeouts",)), ("timeouts",), "timeouts")
        out: dict[str, float] = {}
        for key, value in rendered.items():
            path: KeyPath = ("timeouts", key)
            if key not in TIMEOUT_KEYS:
                raise self._error(
                    f"unknown timeout {key!r}", path, _suggest(str(key), TIMEOUT_KEYS)
                )
            out[key] = self._number(value, path, positive=True)
        return out

    def _number(self, value: Any, path: KeyPath, *, positive: bool = False) -> float:
        if isinstance(value, bool) or value is None:
            raise self._error(f"expected a number, got {_kind(value)}", path)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise self._error(f"expected a number, got {value!r}", path) from None
        if not math.isfinite(number) or (positive and number <= 0):
            raise self._error(f"expected a finite number{' > 0' if positive else ''}", path)
        return number

    def _repo(self, ps: _PointScope, timeouts: dict[str, float]) -> RepoPin | None:
        raw = self.data.get("repo")
        if raw is None:
            return None
        section = self._mapping(
            self._render(ps, raw, ("repo",), frozenset({("repo", "setup")})), ("repo",), "repo"
        )
        section = dict(section)
        for key in ("url", "dest", "version"):
            value = section.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                section[key] = str(value)  # a short SHA written bare is read as a number
        if "setup" in timeouts and "setup_timeout" not in section:
            section["setup_timeout"] = timeouts["setup"]
        return self._validate(RepoPin, section, ("repo",))

    def _validate(self, model: type[RepoPin], data: dict[str, Any], path: KeyPath) -> RepoPin:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = (*path, *first["loc"])
            message = first["msg"]
            if first["type"] == "missing":
                message = f"{first['loc'][-1]} is required"
                where = path
            raise self._error(message, where) from None

    def _env(self, ps: _PointScope) -> dict[str, str]:
        raw = self.data.get("env")
        if raw is None:
            return {}
        items = list(enumerate(raw)) if isinstance(raw, list) else [(None, raw)]
        out: dict[str, str] = {}
        for index, item in items:
            path: KeyPath = ("env",) if index is None else ("env", index)
            rendered = self._render(ps, item, path)
            if rendered is None and index is not None:
                continue
            if not isinstance(rendered, dict):
                raise self._error(
                    f"env must give a mapping of NAME: value, got {_kind(rendered)}", path
                )
            for key, value in rendered.items():
                vpath = (*path, key)
                if not isinstance(key, str) or not _ENV_NAME.match(key):
                    raise self._error(
                        f"{key!r} is not an environment variable name",
                        vpath,
                        "letters, digits and _, not starting with a digit",
                    )
                out[key] = self._env_text(value, vpath)
        return out

    def _env_text(self, value: Any, path: KeyPath) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return str(value)
        if value is None:
            raise self._error(
                "env value is null", path, 'write "" for an empty value, or remove the variable'
            )
        raise self._error(
            f"env value must be text, a number or a boolean, got {_kind(value)}",
            path,
            "a mapping under a list item of env is merged; did you nest it one level too deep?",
        )

    def _args(self, raw: Any, ps: _PointScope, path: KeyPath) -> dict[str, Any]:
        if raw is None:
            return {}
        items = list(enumerate(raw)) if isinstance(raw, list) else [(None, raw)]
        merged: dict[str, Any] = {}
        for index, item in items:
            ipath: KeyPath = path if index is None else (*path, index)
            rendered = self._render(ps, item, ipath)
            if rendered is None and index is not None:
                continue
            if not isinstance(rendered, dict):
                raise self._error(
                    f"args must give a mapping of flag: value, got {_kind(rendered)}", ipath
                )
            for key, value in rendered.items():
                merged[str(key)] = value
        return merged

    def _section(
        self, ps: _PointScope, name: str, timeout_key: str | None, timeouts: dict[str, float]
    ) -> dict[str, Any]:
        raw = self._mapping(self.data.get(name), (name,), name)
        path: KeyPath = (name,)
        body = {k: v for k, v in raw.items() if k != "args"}
        section = self._mapping(
            self._render(ps, body, path, frozenset({(name, "command")})), path, name
        )
        if "args" in raw:
            section["args"] = self._args(raw["args"], ps, (name, "args"))
        if timeout_key is not None and timeout_key in timeouts:
            if name == "server":
                ready = section.get("ready")
                if ready is None:
                    section["ready"] = {"timeout": timeouts[timeout_key]}
                elif isinstance(ready, dict) and "timeout" not in ready:
                    section["ready"] = {**ready, "timeout": timeouts[timeout_key]}
            elif "timeout" not in section:
                section["timeout"] = timeouts[timeout_key]
        return section

    def _adapter_name(self, section: dict[str, Any], name: str) -> str:
        adapter = section.get("adapter", "generic")
        if not isinstance(adapter, str):
            raise self._error(f"adapter must be a name, got {_kind(adapter)}", (name, "adapter"))
        return adapter

    def _server(self, ps: _PointScope, timeouts: dict[str, float]) -> ServerSpec | None:
        if self.data.get("server") is None:
            return None
        section = self._section(ps, "server", "ready", timeouts)
        try:
            adapter = server_adapter(self._adapter_name(section, "server"))
            return adapter.build(section)
        except InputError as exc:
            raise self._relocate(exc, "server") from None

    def _bench(
        self, ps: _PointScope, timeouts: dict[str, float], server: ServerSpec | None
    ) -> BenchSpec:
        if self.data.get("bench") is None:
            raise self._error(
                "bench is required", (), "every cell runs a benchmark: add a bench: section"
            )
        section = self._section(ps, "bench", "bench", timeouts)
        try:
            adapter = bench_adapter(self._adapter_name(section, "bench"))
            return adapter.build(section, server)
        except InputError as exc:
            raise self._relocate(exc, "bench") from None

    def _relocate(self, exc: InputError, section: str) -> InputError:
        """An adapter's error (key path relative to its section) at the playbook location."""
        if exc.location is not None:
            return exc
        path: KeyPath = (section,)
        if exc.key_path:
            for m in _KEY_PART.finditer(exc.key_path):
                path = (*path, m.group(1) if m.group(1) is not None else int(m.group(2)))
        return InputError(
            exc.message, location=self.locate(path), key_path=format_key_path(path), hint=exc.hint
        )

    def _expect(self, ps: _PointScope) -> dict[str, Expectation]:
        raw = self.data.get("expect")
        if raw is None:
            return {}
        rendered = self._mapping(self._render(ps, raw, ("expect",)), ("expect",), "expect")
        out: dict[str, Expectation] = {}
        for metric, spec in rendered.items():
            path: KeyPath = ("expect", metric)
            spec = self._mapping(spec, path, f"expect.{metric}")
            values: dict[str, float] = {}
            for key, value in spec.items():
                kpath = (*path, key)
                if key not in EXPECT_KEYS:
                    raise self._error(
                        f"unknown expectation key {key!r}", kpath, _suggest(str(key), EXPECT_KEYS)
                    )
                if key == "tolerance":
                    values[key] = self._tolerance(value, kpath)
                else:
                    values[key] = self._number(value, kpath)
            if "tolerance" in values and "ref" not in values:
                raise self._error("a tolerance needs a ref", path, "add ref: <expected value>")
            if not values:
                raise self._error("an expectation needs min, max, or ref", path)
            out[str(metric)] = Expectation(**values)
        return out

    def _tolerance(self, value: Any, path: KeyPath) -> float:
        hint = "write a percentage such as '5%' or a fraction such as 0.05"
        if isinstance(value, str):
            text = value.strip()
            try:
                number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
            except ValueError:
                raise self._error(f"bad tolerance {value!r}", path, hint) from None
        elif isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        else:
            raise self._error(f"bad tolerance {value!r}", path, hint)
        if not math.isfinite(number) or number < 0:
            raise self._error(f"bad tolerance {value!r}: must be >= 0", path, hint)
        return number


_CELL_FIELDS = tuple(Cell.model_fields)
_SET_ATTRIBUTE = object.__setattr__
_PLAIN_CELL = not (Cell.__pydantic_post_init__ or Cell.__pydantic_root_model__)


def _snapshot_spec(raw: Any) -> SnapshotSpec:
    """The playbook's `snapshot:` options (plain booleans; anything else keeps the default)."""
    raw = raw if isinstance(raw, dict) else {}
    return SnapshotSpec(
        **{k: v for k, v in raw.items() if k in SnapshotSpec.model_fields and isinstance(v, bool)}
    )


def _new_cell(fields: dict[str, Any]) -> Cell:
    """`Cell.model_construct(**fields)` for fields this module validated, every field given.

    Does what model_construct does for a plain model (no aliases, defaults, post-init or
    extras to resolve) at a quarter of its cost; the tests compare both.
    """
    if not _PLAIN_CELL or tuple(fields) != _CELL_FIELDS:
        return Cell.model_construct(**fields)
    cell = Cell.__new__(Cell)
    _SET_ATTRIBUTE(cell, "__dict__", fields)
    _SET_ATTRIBUTE(cell, "__pydantic_fields_set__", set(_CELL_FIELDS))
    _SET_ATTRIBUTE(cell, "__pydantic_extra__", None)
    _SET_ATTRIBUTE(cell, "__pydantic_private__", None)
    return cell


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _suggest(name: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(known)


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

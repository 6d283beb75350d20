"""One host's cells: variables, per-section memos by the axes they read, ids.

Speed: each section is rendered once per distinct value of the matrix axes it reads (found
statically, through variables that reference variables), not once per cell; a cell's id is
assembled from the cached canonical JSON of its sections (`cell.spec_id_text`), which is the
text `cell.cell_id` hashes for the same cell.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from functools import lru_cache
from operator import itemgetter
from typing import Any

from pydantic import BaseModel

from orchestrator.cell import (
    CELL_SCHEMA_VERSION,
    DEFAULT_CELL_TIMEOUT,
    Cell,
    RepoPin,
    axis_slugs,
    canonical_json,
    id_from_text,
    keyed_text,
    repo_id_data,
    slug_part,
    spec_id_text,
)
from orchestrator.cell_ids import secret_masks, secret_placeholder
from orchestrator.config.host import Host, Inventory
from orchestrator.config.keypath import KeyPath
from orchestrator.config.loaded import LoadedPlaybook
from orchestrator.config.templates.render import (
    TemplateEngine,
    VarDecl,
    VariableScope,
    expression_source,
)
from orchestrator.config.values import RESERVED_VAR_NAMES
from orchestrator.errors import OrchError, SourceLocation
from orchestrator.plan.matrix import Matrix, MatrixPoint
from orchestrator.plan.nodes import single_node_vars
from orchestrator.plan.repeats import settle_on_expect
from orchestrator.plan.sections import SectionRenderer
from orchestrator.runner.redaction import is_secret_name
from orchestrator.secrets.redact import secret_items_in

# The spec's entries after `axes` (what `cell_spec` keeps), in the order `cells` gives their text.
_SPEC_KEYS = ("bench", "cell_timeout", "env", "expect", "repo", "secrets", "server")

AxisDeps = frozenset[str] | None  # None: every axis
_MISSING: Any = object()


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


def raw_safe_axes(raw_matrix: Any, matrix: Matrix) -> frozenset[str]:
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

    def __init__(self, planner: HostPlanner, values: dict[str, Any]) -> None:
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


class HostPlanner(SectionRenderer):
    """Renders one host's cells, caching sections across points that read the same axes."""

    def __init__(
        self,
        playbook: LoadedPlaybook,
        inventory: Inventory,
        host: Host,
        engine: TemplateEngine,
        raw_safe: frozenset[str] = frozenset(),
        node_vars: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(playbook, engine)
        self.raw_safe = raw_safe
        self.host = host
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
        self.node_vars = node_vars or single_node_vars(host)
        fixed.update(self.node_vars)
        self.host_scope = VariableScope(engine, fixed, self.decls)
        self.var_axes = self._variable_axes()
        self.matrix_vars = frozenset(n for n, ax in self.var_axes.items() if ax is None or ax)
        self._units: dict[str, _Unit] = {}
        self._alive: list[Any] = []
        self._value_texts: dict[Any, tuple[str, str]] = {}
        self._host_text = canonical_json(host.name)
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
            if name not in RESERVED_VAR_NAMES:
                decls[str(name)] = VarDecl(value, ("hostvars", self.host.name, name), locate_host)
        for name, value in (self.playbook.model.vars or {}).items():
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
        snapshot = self.snapshot()
        telemetry = self.telemetry()
        preflight = self.preflight()
        profiling = self.playbook.model.profile is not None
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
                found = u_repo.store(values, self._repo_entry(self.repo(ps, timeouts)))
            repo, repo_text = found
            found = u_env.cache.get(u_env.key(values), _MISSING)
            if found is _MISSING:
                found = u_env.store(values, self._env_entry(self.env(ps)))
            env, env_text, secrets, secrets_text, env_secrets = found
            found = u_server.cache.get(u_server.key(values), _MISSING)
            if found is _MISSING:
                found = u_server.store(values, self._entry(self.server(ps, timeouts)))
            server, server_text = found
            found = u_bench.cache.get(u_bench.key(values), _MISSING)
            if found is _MISSING:
                found = u_bench.store(values, self._entry(self.bench(ps, timeouts, server)))
            bench, bench_text = found
            found = u_expect.cache.get(u_expect.key(values), _MISSING)
            if found is _MISSING:
                found = u_expect.store(values, self._entry(self.expect(ps)))
            expect, expect_text = found
            if bench.settle is not None and expect:
                bench, bench_text = self._entry(settle_on_expect(bench, expect))
            rest = keyed_text(
                _SPEC_KEYS,
                [
                    bench_text,
                    timeout_text,
                    env_text,
                    expect_text,
                    repo_text,
                    secrets_text,
                    server_text,
                ],
            )
            ident = self._cell_id(values, rest, self._secret_masks(ps, env_secrets), secrets)
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
                    "telemetry": telemetry,
                    "preflight": preflight,
                    "profile": self.profile(server) if profiling else None,
                    "engine_metrics": self.engine_metrics(server),
                    "nodes": (),
                    "node": None,
                    "run_inputs": self.run_inputs(bench),
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

    @staticmethod
    def _repo_entry(repo: RepoPin | None) -> tuple[RepoPin | None, str]:
        """The repo pin with the canonical JSON its cell id hashes (`cell.repo_id_data`)."""
        if repo is None:
            return None, canonical_json(None)
        return repo, canonical_json(repo_id_data(repo.model_dump(mode="json")))

    def _timeouts_entry(self, ps: _PointScope) -> tuple[dict[str, float], float, str]:
        timeouts = self.timeouts(ps)
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

    def _cell_id(
        self,
        values: dict[str, Any],
        rest: str,
        masks: dict[str, str],
        listed: tuple[str, ...] = (),
    ) -> str:
        """`cell_id(values, host, spec, masks)` from cached JSON texts (`cell.spec_id_text`).

        `rest` is the spec's entries after `axes`; the tests check the result against
        cell.py's `cell_id` over `cell_spec`.
        """
        value_texts = self._value_texts
        parts: list[tuple[str, str]] = []
        for value in values.values():
            found = value_texts.get(value if type(value) is str else _value_key(value))
            parts.append(found if found is not None else self._value_text(value))
        axes = "{" + keyed_text(tuple(values), [p[0] for p in parts]) + "}"
        text = spec_id_text(self._host_text, axes, rest, masks)
        slugs = [p[1] for p in parts]
        if _has_secret_axis(tuple(values), listed):  # rare: a secret-named axis
            slugs = axis_slugs(values, listed)
        return id_from_text(slugs, text)

    # -- sections ----------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _has_secret_axis(names: tuple[str, ...], listed: tuple[str, ...]) -> bool:
    return any(is_secret_name(n, listed) for n in names)


_CELL_FIELDS = tuple(Cell.model_fields)
_SET_ATTRIBUTE = object.__setattr__
_PLAIN_CELL = not (Cell.__pydantic_post_init__ or Cell.__pydantic_root_model__)


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

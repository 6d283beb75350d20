"""Matrix expansion: axes, zip, exclude, include and where, into a list of points.

Used by plan/build.py and plan/planner.py; the rules: docs/ARCHITECTURE.md, "The playbook".
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.templates.render import TemplateEngine, VariableScope
from orchestrator.errors import InputError, SourceLocation

RESERVED_KEYS = ("zip", "exclude", "include", "where")

Locate = Callable[[KeyPath], SourceLocation]
# (expression, point values, key path of the expression) -> keep the point?
WhereEvaluator = Callable[[str, dict[str, Any], KeyPath], bool]


class MatrixPoint(NamedTuple):
    """One combination of axis values, in declared axis order (a tuple: cheap at 100k points)."""

    values: dict[str, Any]
    origin: KeyPath = ("matrix",)  # ("matrix", "include", i) for an included point


@dataclass(frozen=True)
class Matrix:
    """A parsed, validated matrix: the product after exclude, the where filter, the includes."""

    axes: tuple[str, ...]
    candidates: list[MatrixPoint]  # product minus excludes, before `where`
    includes: list[MatrixPoint] = field(default_factory=list)
    where: str | bool | None = None
    product_size: int = 1
    excluded: int = 0

    def select(
        self, keep: Callable[[MatrixPoint], bool] | None, *, locate: Locate
    ) -> list[MatrixPoint]:
        """Apply `keep` (the where filter) to the candidates, append includes, refuse nothing."""
        if keep is None or self.where is None or self.where is True:
            kept = list(self.candidates)
        elif self.where is False:
            kept = []
        else:
            kept = [p for p in self.candidates if keep(p)]
        points = kept + self.includes
        if not points:
            raise self.empty_error(len(kept), locate=locate)
        return points

    def empty_error(self, kept: int, *, locate: Locate) -> InputError:
        """The error for a matrix that leaves no cell, saying which step removed them."""
        steps = [f"{self.product_size} from the axes"]
        if self.excluded:
            steps.append(f"{self.excluded} removed by exclude")
        if self.where is not None:
            steps.append(f"{kept} kept by where")
        return InputError(
            "matrix expands to no cells: " + ", ".join(steps),
            location=locate(("matrix",)),
            key_path="matrix",
            hint="loosen `exclude`/`where`, or add points with `include`",
        )


def _suggest(name: str, known: list[str]) -> str | None:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"known axes: {', '.join(known)}" if known else "the matrix declares no axes"


def _err(message: str, path: KeyPath, locate: Locate, hint: str | None = None) -> InputError:
    return InputError(message, location=locate(path), key_path=format_key_path(path), hint=hint)


def parse_matrix(matrix: Mapping[str, Any] | None, *, locate: Locate) -> Matrix:
    """Validate a `matrix:` mapping and expand its product, zip and exclude (not `where`)."""
    if matrix is None:
        return Matrix(axes=(), candidates=[MatrixPoint({})])
    if not isinstance(matrix, Mapping):
        raise _err("matrix must be a mapping of axis -> list of values", ("matrix",), locate)
    axes: dict[str, list[Any]] = {}
    for name, values in matrix.items():
        if name in RESERVED_KEYS:
            continue
        path: KeyPath = ("matrix", name)
        if not isinstance(name, str):
            raise _err(f"axis names must be strings, got {name!r}", ("matrix",), locate)
        if name == "host":  # selectors and reports name the cell's host so
            raise _err(
                "axis 'host' is reserved: selectors (host=gpu*) and reports name the cell's host",
                path,
                locate,
                hint="rename the axis (e.g. target_host)",
            )
        if not isinstance(values, list):
            raise _err(
                f"axis {name!r} must be a list of values",
                path,
                locate,
                hint=f"write `{name}: [{values!r}]` for a single value",
            )
        if not values:
            raise _err(f"axis {name!r} has no values", path, locate)
        axes[name] = values
    names = list(axes)

    units = _zip_units(matrix.get("zip"), axes, locate)
    excludes = _parse_excludes(matrix.get("exclude"), axes, locate)
    includes = _parse_includes(matrix.get("include"), names, locate)
    where = matrix.get("where")
    if where is not None and not isinstance(where, str | bool):
        raise _err("where must be a Jinja expression (a string)", ("matrix", "where"), locate)

    # Product over units (a single axis, or a zip group); rows are tuples of that unit's values.
    unit_axes = [u for u, _ in units]
    flat_order = [a for u in unit_axes for a in u]
    reorder = flat_order != names
    candidates: list[MatrixPoint] = []
    product_size = 0
    excluded = 0
    zipped = any(len(u) > 1 for u in unit_axes)
    if zipped:
        combos: Iterable[tuple[Any, ...]] = (
            tuple(v for row in combo for v in row)
            for combo in itertools.product(*(rows for _, rows in units))
        )
    else:  # the common case: one value per unit, no flattening needed
        combos = itertools.product(*(axes[a] for a in names))
    for flat in combos:
        product_size += 1
        values = dict(zip(flat_order, flat, strict=True))
        if reorder:
            values = {a: values[a] for a in names}
        if excludes and any(all(values[k] == v for k, v in ex) for ex in excludes):
            excluded += 1
            continue
        candidates.append(MatrixPoint(values))
    if not names:
        product_size, candidates = 1, [MatrixPoint({})]
    return Matrix(
        axes=tuple(names),
        candidates=candidates,
        includes=includes,
        where=where,
        product_size=product_size,
        excluded=excluded,
    )


def _zip_units(
    zip_spec: Any, axes: dict[str, list[Any]], locate: Locate
) -> list[tuple[tuple[str, ...], list[tuple[Any, ...]]]]:
    names = list(axes)
    grouped: dict[str, tuple[str, ...]] = {}
    if zip_spec is not None:
        if not isinstance(zip_spec, list):
            raise _err("zip must be a list of axis lists", ("matrix", "zip"), locate)
        for gi, group in enumerate(zip_spec):
            gpath: KeyPath = ("matrix", "zip", gi)
            if not isinstance(group, list) or len(group) < 2:
                raise _err("a zip group must be a list of at least two axes", gpath, locate)
            for ai, axis in enumerate(group):
                if axis not in axes:
                    raise _err(
                        f"zip names unknown axis {axis!r}",
                        (*gpath, ai),
                        locate,
                        hint=_suggest(str(axis), names),
                    )
                if axis in grouped:
                    raise _err(f"axis {axis!r} is in more than one zip group", (*gpath, ai), locate)
            lengths = {a: len(axes[a]) for a in group}
            if len(set(lengths.values())) > 1:
                sizes = ", ".join(f"{a}: {n}" for a, n in lengths.items())
                raise _err(
                    f"zipped axes must have equal lengths ({sizes})",
                    gpath,
                    locate,
                    hint="axes in one zip group vary together, value by value",
                )
            for a in group:
                grouped[a] = tuple(group)
    units: list[tuple[tuple[str, ...], list[tuple[Any, ...]]]] = []
    done: set[str] = set()
    for name in names:
        if name in done:
            continue
        members = grouped.get(name, (name,))
        done.update(members)
        rows = list(zip(*(axes[a] for a in members), strict=True))
        units.append((members, rows))
    return units


def _parse_excludes(
    spec: Any, axes: dict[str, list[Any]], locate: Locate
) -> list[tuple[tuple[str, Any], ...]]:
    if spec is None:
        return []
    if not isinstance(spec, list):
        raise _err(
            "exclude must be a list of {axis: value} mappings", ("matrix", "exclude"), locate
        )
    names = list(axes)
    out: list[tuple[tuple[str, Any], ...]] = []
    for i, entry in enumerate(spec):
        epath: KeyPath = ("matrix", "exclude", i)
        if not isinstance(entry, Mapping) or not entry:
            raise _err("an exclude entry must be a non-empty {axis: value} mapping", epath, locate)
        for axis, value in entry.items():
            if axis not in axes:
                raise _err(
                    f"exclude names unknown axis {axis!r}",
                    (*epath, axis),
                    locate,
                    hint=_suggest(str(axis), names),
                )
            if value not in axes[axis]:
                shown = ", ".join(repr(v) for v in axes[axis][:10])
                raise _err(
                    f"exclude value {value!r} is not a value of axis {axis!r}",
                    (*epath, axis),
                    locate,
                    hint=f"its values: {shown}",
                )
        out.append(tuple(entry.items()))
    return out


def _parse_includes(spec: Any, names: list[str], locate: Locate) -> list[MatrixPoint]:
    if spec is None:
        return []
    if not isinstance(spec, list):
        raise _err(
            "include must be a list of {axis: value} mappings", ("matrix", "include"), locate
        )
    out: list[MatrixPoint] = []
    for i, entry in enumerate(spec):
        epath: KeyPath = ("matrix", "include", i)
        if not isinstance(entry, Mapping):
            raise _err("an include entry must be an {axis: value} mapping", epath, locate)
        for axis in entry:
            if axis not in names:
                raise _err(
                    f"include names unknown axis {axis!r}",
                    (*epath, axis),
                    locate,
                    hint=_suggest(str(axis), names),
                )
        missing = [a for a in names if a not in entry]
        if missing:
            raise _err(
                f"an include entry must name every axis; missing: {', '.join(missing)}",
                epath,
                locate,
            )
        out.append(MatrixPoint({a: entry[a] for a in names}, origin=epath))
    return out


def expand_matrix(
    matrix: Mapping[str, Any] | None,
    *,
    locate: Locate,
    where: WhereEvaluator | None = None,
) -> list[MatrixPoint]:
    """Every point of `matrix` (the rules: docs/ARCHITECTURE.md, The playbook).

    `where` evaluates the `where:` expression for one point; without it, the expression is
    evaluated with only `matrix` in scope.
    """
    parsed = parse_matrix(matrix, locate=locate)
    expression = parsed.where
    if isinstance(expression, str):
        evaluate = where or _matrix_only_where(locate)
        text = expression
        return parsed.select(
            lambda p: bool(evaluate(text, p.values, ("matrix", "where"))), locate=locate
        )
    return parsed.select(None, locate=locate)


def _matrix_only_where(locate: Locate) -> WhereEvaluator:
    engine = TemplateEngine()

    def evaluate(expression: str, values: dict[str, Any], path: KeyPath) -> bool:
        scope = VariableScope(engine, {**engine.globals, "matrix": values}, {})
        return bool(engine.render_expression(expression, scope, path, locate))

    return evaluate

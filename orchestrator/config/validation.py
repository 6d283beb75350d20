"""Turning a pydantic ValidationError into one InputError at the file, line and column to fix."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from orchestrator.config.fields import RENDERED, FieldProblem
from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.model import PlaybookModel
from orchestrator.config.values import describe
from orchestrator.config.yamlpos import locate
from orchestrator.errors import InputError, SourceLocation

# --------------------------------------------------------------------------------------------
# Turning a ValidationError into one InputError


_PYDANTIC_MESSAGES = {
    "missing": "missing required key {key!r}",
    "model_type": "expected a mapping, got {value}",
    "dict_type": "expected a mapping, got {value}",
    "list_type": "expected a list, got {value}",
    "string_type": "expected a string, got {value}",
    "int_type": "expected an integer, got {value}",
    "int_parsing": "expected an integer, got {value}",
    "float_type": "expected a number, got {value}",
    "float_parsing": "expected a number, got {value}",
    "bool_type": "expected true or false, got {value}",
    "bool_parsing": "expected true or false, got {value}",
    "extra_forbidden": "unknown key {key!r}",
}


def _data_path(data: Any, loc: Sequence[Any]) -> KeyPath:
    """Keep the parts of a pydantic `loc` that are real keys/indexes of `data` (drop tags)."""
    out: list[str | int] = []
    node = data
    for part in loc:
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_list or (isinstance(node, dict) and part in node):
            out.append(part)
            node = node[part]
        elif (
            isinstance(node, dict)
            and part not in node
            and not str(part).startswith(("function-", "[key]"))
        ):
            out.append(part)  # a missing key: still the path to report
            node = None
    return tuple(out)


@dataclass(frozen=True)
class _Where:
    """Where a path points in a loaded file: at its key, or at its value."""

    positions: Mapping[KeyPath, SourceLocation]
    value_positions: Mapping[KeyPath, SourceLocation]
    file: str

    def at(self, path: KeyPath, *, value: bool) -> SourceLocation:
        return locate(
            self.positions,
            path,
            file=self.file,
            value_positions=self.value_positions if value else None,
        )


@dataclass(frozen=True)
class _RenderedWhere:
    """Where a path of a rendered section points: the key it was rendered from (or above)."""

    section: KeyPath
    locate: Callable[[KeyPath], SourceLocation]

    @property
    def file(self) -> str:
        return self.locate(self.section).file

    def at(self, path: KeyPath, *, value: bool) -> SourceLocation:
        return self.locate((*self.section, *path))


def _error_from(exc: ValidationError, data: Any, where: _Where | _RenderedWhere) -> InputError:
    candidates: list[InputError] = []
    for err in exc.errors(include_url=False):
        kind = err["type"]
        path = _data_path(data, err["loc"])
        problem = (err.get("ctx") or {}).get("error")
        prefix = where.section if isinstance(where, _RenderedWhere) else ()
        if isinstance(problem, FieldProblem):
            full = (*path, *problem.sub_path)
            location = where.at(full, value=not problem.at_key)
            candidates.append(
                InputError(
                    problem.message,
                    location=location,
                    key_path=format_key_path((*prefix, *full)) or None,
                    hint=problem.hint,
                )
            )
            continue
        if kind == "missing":
            parent = path[:-1]
            message = f"missing required key {path[-1]!r}" if path else "missing required key"
            candidates.append(
                InputError(
                    message,
                    location=where.at(parent, value=False),
                    key_path=format_key_path((*prefix, *parent)) or None,
                )
            )
            continue
        template = _PYDANTIC_MESSAGES.get(kind)
        key = path[-1] if path else ""
        message = (
            template.format(key=key, value=describe(err.get("input")))
            if template
            else str(err.get("msg", kind))
        )
        candidates.append(
            InputError(
                message,
                location=where.at(path, value=kind != "extra_forbidden"),
                key_path=format_key_path((*prefix, *path)) or None,
            )
        )
    # Report the first problem in file order, as a person reading top-down would meet it.
    return min(candidates, key=_reading_order(where.file))


def _reading_order(main_file: str) -> Callable[[InputError], tuple[int, str, int, int]]:
    def key(error: InputError) -> tuple[int, str, int, int]:
        loc = error.location or SourceLocation(main_file)
        return (loc.file != main_file, loc.file, loc.line or 0, loc.col or 0)

    return key


def validate_playbook_data(
    data: Any,
    positions: Mapping[KeyPath, SourceLocation],
    file: str,
    value_positions: Mapping[KeyPath, SourceLocation] | None = None,
) -> PlaybookModel:
    """Check merged playbook data against the model; the first problem is one InputError."""
    where = _Where(positions, value_positions or {}, file)
    if not isinstance(data, dict):
        raise InputError(
            f"a playbook is a mapping of keys (name, matrix, server, ...), got {describe(data)}",
            location=where.at((), value=True),
        )
    try:
        return PlaybookModel.model_validate(data)
    except ValidationError as exc:
        raise _error_from(exc, data, where) from None


@cache
def _field_type(owner: type[BaseModel], name: str) -> TypeAdapter[Any]:
    info = owner.model_fields[name]
    kind: Any = info.annotation
    members = get_args(kind)
    if get_origin(kind) in (Union, UnionType) and type(None) in members:
        # A rendered section is present: null is what it gave, not "no section".
        (kind,) = [m for m in members if m is not type(None)]
    if info.metadata:
        kind = Annotated[kind, *info.metadata]
    return TypeAdapter(kind)


def validate_rendered(
    owner: type[BaseModel],
    name: str,
    value: Any,
    path: KeyPath,
    locate: Callable[[KeyPath], SourceLocation],
) -> Any:
    """`value`, rendered from the playbook at `path`, checked as field `name` of `owner` is.

    The same field types and section models that validated the file, in their rendered mode
    (`fields.RENDERED`); a problem is one InputError at the key the value was rendered from.
    Returns the validated value: a section model, or the field's value with numbers as floats.
    """
    try:
        return _field_type(owner, name).validate_python(value, context=RENDERED)
    except ValidationError as exc:
        raise _error_from(exc, value, _RenderedWhere(path, locate)) from None

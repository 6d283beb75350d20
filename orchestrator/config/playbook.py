"""The playbook: its model, `extends:` composition, `vars_files`, `-e` extra vars, secret names.

`load_playbook` returns the merged data exactly as written (no defaults filled in) together with
the position of every key, after checking its shape against `PlaybookModel`. Every problem is one
`InputError` that points at the file, line and column to fix.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from orchestrator.config.loaded import KeyPath, LoadedPlaybook, format_key_path
from orchestrator.config.yamlpos import YamlDocument, load_yaml, locate, parse_yaml
from orchestrator.errors import InputError, SourceLocation
from orchestrator.runner.redaction import is_secret_name as is_secret_name

# --------------------------------------------------------------------------------------------
# Names

VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Names templates get from orch itself; a playbook var of the same name would hide them.
RESERVED_VAR_NAMES = frozenset(
    {"matrix", "inventory_hostname", "group_names", "groups", "hostvars", "orch_python"}
)

SERVER_ADAPTER_NAMES = ("sglang", "vllm", "generic")
BENCH_ADAPTER_NAMES = (
    "sglang.bench_serving",
    "sglang.bench_one_batch_server",
    "vllm.bench_serve",
    "generic",
)

EXTRA_VARS_SOURCE = "<extra vars>"


def is_template(value: Any) -> bool:
    """Whether `value` is a string Jinja2 will render (holds `{{` or `{%`)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def describe(value: Any) -> str:
    """A short human description of a value a user wrote, for 'expected X, got Y'."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return repr(text)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def suggest(word: str, known: Collection[str]) -> str | None:
    """`did you mean 'x'?` for the closest known name, or None."""
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


# --------------------------------------------------------------------------------------------
# Validation building blocks


class _Problem(ValueError):
    """A validation failure below the value being validated (`sub_path`), with a hint."""

    def __init__(
        self,
        message: str,
        *,
        sub_path: KeyPath = (),
        hint: str | None = None,
        at_key: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sub_path = sub_path
        self.hint = hint
        self.at_key = at_key  # point at the key itself (unknown keys), not at its value


_TEMPLATE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"\{\{|\{%",
    "description": "a Jinja2 template rendered per cell and host",
}


def _or_template(schema: dict[str, Any]) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [schema, _TEMPLATE_SCHEMA]})


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _leaf(
    expected: str, check: Callable[[Any], bool], *, hint: Callable[[Any], str | None] | None = None
) -> Callable[[Any], Any]:
    """A validator accepting a template or a value passing `check`."""

    def validate(value: Any) -> Any:
        if is_template(value) or check(value):
            return value
        raise _Problem(f"expected {expected}, got {describe(value)}", hint=hint and hint(value))

    return validate


def _quote_hint(value: Any) -> str | None:
    if _is_number(value):
        return f'quote it: "{value}" (unquoted digits are read as a number)'
    return None


def _choice(*names: str) -> Callable[[Any], Any]:
    def validate(value: Any) -> Any:
        if is_template(value) or value in names:
            return value
        options = ", ".join(names)
        raise _Problem(
            f"expected one of {options}, got {describe(value)}",
            hint=suggest(str(value), names) if isinstance(value, str) else None,
        )

    return validate


def _regex(value: Any) -> Any:
    if is_template(value):
        return value
    if not isinstance(value, str):
        raise _Problem(f"expected a regular expression, got {describe(value)}")
    try:
        re.compile(value)
    except re.error as exc:
        raise _Problem(f"invalid regular expression {value!r}: {exc}") from None
    return value


def _str_list(value: Any) -> Any:
    if not isinstance(value, list):
        raise _Problem(f"expected a list of strings, got {describe(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _Problem(f"expected a string, got {describe(item)}", sub_path=(i,))
    return value


def _extends(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return _str_list(value)


def _argv_item(value: Any, sub_path: KeyPath) -> None:
    if not (isinstance(value, str) or _is_number(value)):
        raise _Problem(
            f"an argument must be a string or number, got {describe(value)}", sub_path=sub_path
        )


def _command(value: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            raise _Problem("the command is empty")
        return value
    if isinstance(value, list):
        if not value:
            raise _Problem("the command is empty")
        for i, item in enumerate(value):
            _argv_item(item, (i,))
        return value
    raise _Problem(f"expected a command string or a list of arguments, got {describe(value)}")


def _launcher(value: Any) -> Any:
    if is_template(value):
        return value
    if not isinstance(value, list) or not value:
        raise _Problem(
            f"expected a non-empty list of arguments, got {describe(value)}",
            hint="e.g. launcher: [torchrun, --nproc-per-node, '8', -m, sglang.launch_server]",
        )
    for i, item in enumerate(value):
        _argv_item(item, (i,))
    return value


def _mapping_list(
    what: str, check_mapping: Callable[[dict[Any, Any], KeyPath], None]
) -> Callable[[Any], Any]:
    """mapping | [mapping | template] | template, each mapping checked by `check_mapping`."""

    def validate(value: Any) -> Any:
        if is_template(value):
            return value
        if isinstance(value, dict):
            check_mapping(value, ())
            return value
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    check_mapping(item, (i,))
                elif not is_template(item):
                    raise _Problem(
                        f"expected a mapping or a template giving one, got {describe(item)}",
                        sub_path=(i,),
                    )
            return value
        raise _Problem(f"expected {what}, got {describe(value)}")

    return validate


def _check_env_mapping(mapping: dict[Any, Any], at: KeyPath) -> None:
    for name, value in mapping.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise _Problem(
                f"{name!r} is not a valid environment variable name",
                sub_path=(*at, name),
                at_key=True,
                hint="letters, digits and '_', not starting with a digit",
            )
        if isinstance(value, bool):
            raise _Problem(
                f"an environment value must be text, got {describe(value)}",
                sub_path=(*at, name),
                hint="quote it ('1', 'true'): YAML reads yes/no/true/false as booleans",
            )
        if not (isinstance(value, str) or _is_number(value)):
            raise _Problem(
                f"an environment value must be a string or number, got {describe(value)}",
                sub_path=(*at, name),
            )


def _check_args_mapping(mapping: dict[Any, Any], at: KeyPath) -> None:
    for name in mapping:
        if not isinstance(name, str) or not name:
            raise _Problem(
                f"a flag name must be a string, got {describe(name)}",
                sub_path=(*at, name),
                at_key=True,
            )


def _vars(value: Any) -> Any:
    if not isinstance(value, dict):
        raise _Problem(f"expected a mapping of names to values, got {describe(value)}")
    for name in value:
        if not isinstance(name, str) or not VAR_NAME.match(name):
            raise _Problem(
                f"{name!r} is not a valid variable name",
                sub_path=(name,),
                at_key=True,
                hint="letters, digits and '_', not starting with a digit",
            )
        if name in RESERVED_VAR_NAMES:
            raise _Problem(
                f"{name!r} is a name orch sets for templates",
                sub_path=(name,),
                at_key=True,
                hint="rename the variable",
            )
    return value


_MATRIX_KEYS = ("zip", "exclude", "include", "where")


def _point_list(value: Any, key: str) -> None:
    if not isinstance(value, list):
        raise _Problem(
            f"expected a list of {{axis: value}} mappings, got {describe(value)}", sub_path=(key,)
        )
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not item:
            raise _Problem(
                f"expected a mapping of axis: value, got {describe(item)}", sub_path=(key, i)
            )


def _matrix(value: Any) -> Any:
    if not isinstance(value, dict):
        raise _Problem(f"expected a mapping of axis: [values], got {describe(value)}")
    for key, item in value.items():
        if key == "zip":
            if not isinstance(item, list):
                raise _Problem(
                    f"expected a list of axis-name lists, got {describe(item)}", sub_path=(key,)
                )
            for i, group in enumerate(item):
                if not isinstance(group, list) or not all(isinstance(a, str) for a in group):
                    raise _Problem(
                        f"expected a list of axis names, got {describe(group)}",
                        sub_path=(key, i),
                        hint="e.g. zip: [[model, tp]]",
                    )
        elif key in ("exclude", "include"):
            _point_list(item, key)
        elif key == "where":
            if not isinstance(item, str):
                raise _Problem(
                    f"expected a Jinja2 expression, got {describe(item)}", sub_path=(key,)
                )
        elif not isinstance(key, str):
            raise _Problem(
                f"an axis name must be a string, got {describe(key)}", sub_path=(key,), at_key=True
            )
        elif not isinstance(item, list):
            raise _Problem(
                f"axis {key!r} needs a list of values, got {describe(item)}",
                sub_path=(key,),
                hint=f"write {key}: [{item if isinstance(item, str | int | float) else '...'}]",
            )
    return value


def _metrics(value: Any) -> Any:
    if not isinstance(value, dict):
        raise _Problem(f"expected a mapping of metric: regex, got {describe(value)}")
    for name, pattern in value.items():
        try:
            _regex(pattern)
        except _Problem as problem:
            problem.sub_path = (name,)
            raise
    return value


_PERCENT = re.compile(r"^\s*\d+(\.\d+)?\s*%\s*$")


def _tolerance(value: Any) -> Any:
    if is_template(value) or (_is_number(value) and value >= 0):
        return value
    if isinstance(value, str) and _PERCENT.match(value):
        return value
    raise _Problem(
        f"expected a tolerance like '5%' or 0.05, got {describe(value)}",
    )


_NUMBER: dict[str, Any] = {"type": "number"}
_INT: dict[str, Any] = {"type": "integer"}
_STR: dict[str, Any] = {"type": "string"}
_STR_LIST: dict[str, Any] = {"type": "array", "items": _STR}
_ARGV: dict[str, Any] = {"type": "array", "items": {"type": ["string", "number"]}}
_ANY_MAP: dict[str, Any] = {"type": "object"}


def _enum(*names: str) -> dict[str, Any]:
    return {"enum": list(names)}


TStr = Annotated[
    Any, PlainValidator(_leaf("a string", lambda v: isinstance(v, str))), WithJsonSchema(_STR)
]
TRef = Annotated[
    Any,
    PlainValidator(_leaf("a string", lambda v: isinstance(v, str), hint=_quote_hint)),
    WithJsonSchema(_STR),
]
TName = Annotated[
    Any,
    PlainValidator(_leaf("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip()))),
    WithJsonSchema({"type": "string", "minLength": 1}),
]
TRegex = Annotated[Any, PlainValidator(_regex), WithJsonSchema({"type": "string"})]
TBool = Annotated[
    Any,
    PlainValidator(_leaf("true or false", lambda v: isinstance(v, bool))),
    _or_template({"type": "boolean"}),
]
TNumber = Annotated[Any, PlainValidator(_leaf("a number", _is_number)), _or_template(_NUMBER)]
TPositive = Annotated[
    Any,
    PlainValidator(_leaf("a positive number", lambda v: _is_number(v) and v > 0)),
    _or_template({"type": "number", "exclusiveMinimum": 0}),
]
TNonNegative = Annotated[
    Any,
    PlainValidator(_leaf("a number >= 0", lambda v: _is_number(v) and v >= 0)),
    _or_template({"type": "number", "minimum": 0}),
]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


TCount = Annotated[
    Any,
    PlainValidator(_leaf("an integer >= 0", lambda v: _is_int(v) and v >= 0)),
    _or_template({"type": "integer", "minimum": 0}),
]
TPositiveCount = Annotated[
    Any,
    PlainValidator(_leaf("an integer >= 1", lambda v: _is_int(v) and v >= 1)),
    _or_template({"type": "integer", "minimum": 1}),
]
TPort = Annotated[
    Any,
    PlainValidator(_leaf("a port number (1-65535)", lambda v: _is_int(v) and 0 < v < 65536)),
    _or_template({"type": "integer", "minimum": 1, "maximum": 65535}),
]
THttpStatus = Annotated[
    Any,
    PlainValidator(_leaf("an HTTP status (100-599)", lambda v: _is_int(v) and 100 <= v <= 599)),
    _or_template({"type": "integer", "minimum": 100, "maximum": 599}),
]
TStrList = Annotated[Any, PlainValidator(_str_list), WithJsonSchema(_STR_LIST)]
TExtends = Annotated[Any, PlainValidator(_extends), WithJsonSchema({"anyOf": [_STR, _STR_LIST]})]
TCommand = Annotated[Any, PlainValidator(_command), WithJsonSchema({"anyOf": [_STR, _ARGV]})]
TLauncher = Annotated[Any, PlainValidator(_launcher), _or_template(_ARGV)]
_MAPPINGS_SCHEMA: dict[str, Any] = {
    "anyOf": [
        _ANY_MAP,
        {"type": "array", "items": {"anyOf": [_ANY_MAP, _TEMPLATE_SCHEMA]}},
        _TEMPLATE_SCHEMA,
    ]
}
TArgs = Annotated[
    Any,
    PlainValidator(_mapping_list("a flag mapping or a list of them", _check_args_mapping)),
    WithJsonSchema(_MAPPINGS_SCHEMA),
]
TEnv = Annotated[
    Any,
    PlainValidator(_mapping_list("a mapping of NAME: value or a list of them", _check_env_mapping)),
    WithJsonSchema(_MAPPINGS_SCHEMA),
]
TVars = Annotated[Any, PlainValidator(_vars), WithJsonSchema(_ANY_MAP)]
TMatrix = Annotated[
    Any,
    PlainValidator(_matrix),
    WithJsonSchema(
        {
            "type": "object",
            "properties": {
                "zip": {"type": "array", "items": _STR_LIST},
                "exclude": {"type": "array", "items": _ANY_MAP},
                "include": {"type": "array", "items": _ANY_MAP},
                "where": _STR,
            },
            "additionalProperties": {"type": "array"},
        }
    ),
]
TMetrics = Annotated[
    Any,
    PlainValidator(_metrics),
    WithJsonSchema({"type": "object", "additionalProperties": _STR}),
]
TTolerance = Annotated[
    Any,
    PlainValidator(_tolerance),
    WithJsonSchema(
        {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": "%$"}]}
    ),
]


_STRATEGIES = ("each", "spread")
_DIRTY = ("refuse", "reset", "record")
_VERIFY_ENV = ("strict", "warn", "off")
TStrategy = Annotated[Any, PlainValidator(_choice(*_STRATEGIES)), _or_template(_enum(*_STRATEGIES))]
TDirty = Annotated[Any, PlainValidator(_choice(*_DIRTY)), _or_template(_enum(*_DIRTY))]
TVerifyEnv = Annotated[
    Any, PlainValidator(_choice(*_VERIFY_ENV)), _or_template(_enum(*_VERIFY_ENV))
]
TServerAdapter = Annotated[
    Any,
    PlainValidator(_choice(*SERVER_ADAPTER_NAMES)),
    _or_template(_enum(*SERVER_ADAPTER_NAMES)),
]
TBenchAdapter = Annotated[
    Any,
    PlainValidator(_choice(*BENCH_ADAPTER_NAMES)),
    _or_template(_enum(*BENCH_ADAPTER_NAMES)),
]


# --------------------------------------------------------------------------------------------
# The model


class _Section(BaseModel):
    """A mapping with a fixed set of keys: an unknown key is an error naming the closest one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise _Problem(f"expected a mapping, got {describe(value)}")
        known = list(cls.model_fields)
        for key in value:
            if key not in known:
                hint = _elsewhere_hint(str(key), cls) or suggest(str(key), known)
                if hint is None:
                    hint = "known keys: " + ", ".join(known)
                raise _Problem(f"unknown key {key!r}", sub_path=(key,), hint=hint, at_key=True)
        return value


class RepoSection(_Section):
    """The serving repo to pin: cloned/fetched, checked out, verified as a full SHA."""

    url: TStr
    dest: TStr
    version: TRef
    setup: TStr | None = None
    dirty: TDirty = "refuse"
    setup_timeout: TPositive = 3600.0


class ReadySection(_Section):
    """Readiness: an HTTP check (`url`, or `path` on the server's host:port) and/or a log regex."""

    url: TStr | None = None
    path: TStr | None = None
    status: THttpStatus = 200
    log: TRegex | None = None
    timeout: TPositive = 600.0
    interval: TPositive = 0.5

    @model_validator(mode="after")
    def _url_or_path(self) -> ReadySection:
        if self.url is not None and self.path is not None:
            raise _Problem("give either url or path, not both", sub_path=("path",), at_key=True)
        return self


class CaptureSection(_Section):
    """A JSON document fetched after readiness and after every repeat."""

    name: TName
    urls: TStrList


def _check_command(section: ServerSection | BenchSection, generic: bool, kind: str) -> None:
    if is_template(section.adapter):
        return
    if generic and section.command is None:
        raise _Problem(
            f"a generic {kind} needs 'command'", hint="give command: [argv...] or pick an adapter"
        )
    if not generic and section.command is not None:
        raise _Problem(
            f"'command' is for the generic adapter, not {section.adapter!r}",
            sub_path=("command",),
            at_key=True,
            hint="use launcher: to replace how the adapter starts it, args: for flags",
        )


class ServerSection(_Section):
    """The server under test."""

    adapter: TServerAdapter = "generic"
    command: TCommand | None = None
    launcher: TLauncher | None = None
    python: TStr | None = None
    args: TArgs | None = None
    host: TStr | None = None
    port: TPort | None = None
    cwd: TStr | None = None
    ready: ReadySection | None = None
    captures: list[CaptureSection] | None = None
    stop_grace: TNonNegative | None = None
    verify_env: TVerifyEnv = "strict"

    @model_validator(mode="after")
    def _command_fits_adapter(self) -> ServerSection:
        _check_command(self, self.adapter == "generic", "server")
        return self


class BenchSection(_Section):
    """The benchmark client, run warmup + repeats times."""

    adapter: TBenchAdapter = "generic"
    command: TCommand | None = None
    launcher: TLauncher | None = None
    python: TStr | None = None
    args: TArgs | None = None
    warmup: TCount = 0
    repeats: TPositiveCount = 1
    timeout: TPositive = 3600.0
    result_file: TStr | None = None
    metrics: TMetrics | None = None

    @model_validator(mode="after")
    def _command_fits_adapter(self) -> BenchSection:
        _check_command(self, self.adapter == "generic", "bench")
        return self


class ExpectSection(_Section):
    """Bounds for one metric: min/max, or ref with a tolerance ('5%' or 0.05)."""

    min: TNumber | None = None
    max: TNumber | None = None
    ref: TNumber | None = None
    tolerance: TTolerance | None = None

    @model_validator(mode="after")
    def _bounds(self) -> ExpectSection:
        if self.tolerance is not None and self.ref is None:
            raise _Problem("tolerance needs ref", sub_path=("tolerance",), at_key=True)
        if self.min is None and self.max is None and self.ref is None:
            raise _Problem("give min, max, or ref with tolerance")
        if self.ref is not None and self.tolerance is None:
            raise _Problem(
                "ref needs a tolerance", sub_path=("ref",), at_key=True, hint="e.g. tolerance: '5%'"
            )
        low: Any = self.min
        high: Any = self.max
        if _is_number(low) and _is_number(high) and low > high:
            raise _Problem(f"min {low} is above max {high}", sub_path=("min",))
        return self


class SnapshotSection(_Section):
    """What the host snapshot records besides the defaults."""

    pip_freeze: TBool = True
    topo: TBool = True


class TimeoutsSection(_Section):
    """Seconds before a cell, the repo setup, readiness or one bench run is given up."""

    cell: TPositive | None = None
    setup: TPositive | None = None
    ready: TPositive | None = None
    bench: TPositive | None = None


class PlaybookModel(_Section):
    """A playbook as users write it (see docs/ARCHITECTURE.md, "The playbook")."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        title="orch playbook",
        json_schema_extra={"$id": "orch-playbook"},
    )

    name: TName
    hosts: TStr = "all"
    strategy: TStrategy = "each"
    extends: TExtends | None = None
    vars: TVars | None = None
    vars_files: TStrList | None = None
    secrets: TStrList | None = None
    matrix: TMatrix | None = None
    repo: RepoSection | None = None
    env: TEnv | None = None
    server: ServerSection | None = None
    bench: BenchSection
    expect: dict[str, ExpectSection] | None = None
    snapshot: SnapshotSection | None = None
    timeouts: TimeoutsSection | None = None


_SECTIONS: dict[str, type[_Section]] = {
    "repo": RepoSection,
    "server": ServerSection,
    "bench": BenchSection,
    "snapshot": SnapshotSection,
    "timeouts": TimeoutsSection,
}


def _elsewhere_hint(key: str, model: type[_Section]) -> str | None:
    """`'warmup' belongs under 'bench:'` when a key sits at the wrong level."""
    homes = [name for name, section in _SECTIONS.items() if key in section.model_fields]
    if model is PlaybookModel and homes:
        return f"{key!r} belongs under " + " or ".join(f"'{h}:'" for h in homes)
    if model is not PlaybookModel and key in PlaybookModel.model_fields:
        return f"{key!r} is a top-level key"
    return None


def playbook_json_schema() -> dict[str, Any]:
    """The JSON Schema of the playbook, for editors (`orch schema`)."""
    schema = PlaybookModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


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


def _error_from(exc: ValidationError, data: Any, where: _Where) -> InputError:
    candidates: list[InputError] = []
    for err in exc.errors(include_url=False):
        kind = err["type"]
        path = _data_path(data, err["loc"])
        problem = (err.get("ctx") or {}).get("error")
        if isinstance(problem, _Problem):
            full = (*path, *problem.sub_path)
            location = where.at(full, value=not problem.at_key)
            candidates.append(
                InputError(
                    problem.message,
                    location=location,
                    key_path=format_key_path(full) or None,
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
                    key_path=format_key_path(parent) or None,
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
                key_path=format_key_path(path) or None,
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


# --------------------------------------------------------------------------------------------
# Merging with positions


@dataclass
class _Source:
    """Plain data with the key and value positions of everything in it."""

    data: Any
    positions: dict[KeyPath, SourceLocation] = field(default_factory=dict)
    value_positions: dict[KeyPath, SourceLocation] = field(default_factory=dict)


def _copy_positions(src: _Source, value: Any, path: KeyPath, out: _Source) -> None:
    if path in src.positions:
        out.positions[path] = src.positions[path]
    if path in src.value_positions:
        out.value_positions[path] = src.value_positions[path]
    if isinstance(value, dict):
        for k, v in value.items():
            _copy_positions(src, v, (*path, k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _copy_positions(src, v, (*path, i), out)


def _merge_values(
    base: Any, over: Any, path: KeyPath, bsrc: _Source, osrc: _Source, out: _Source, levels: int
) -> Any:
    """`over` wins; mappings merge key by key `levels` deep (-1: all the way), lists replace."""
    if levels == 0 or not (isinstance(base, dict) and isinstance(over, dict)):
        _copy_positions(osrc, over, path, out)
        return over
    for src in (bsrc, osrc):  # the winning file's position for the mapping itself
        if path in src.positions:
            out.positions[path] = src.positions[path]
        if path in src.value_positions:
            out.value_positions[path] = src.value_positions[path]
    merged: dict[Any, Any] = {}
    for k, v in base.items():
        if k not in over:
            merged[k] = v
            _copy_positions(bsrc, v, (*path, k), out)
    for k, v in over.items():
        if k in base:
            merged[k] = _merge_values(base[k], v, (*path, k), bsrc, osrc, out, levels - 1)
        else:
            merged[k] = v
            _copy_positions(osrc, v, (*path, k), out)
    # Keep the base's key order (matrix axes order matters), new keys after.
    return {k: merged[k] for k in [*base, *(k for k in over if k not in base)]}


def _merge(base: _Source, over: _Source, levels: int = -1) -> _Source:
    out = _Source(None)
    out.data = _merge_values(base.data, over.data, (), base, over, out, levels)
    if () in base.positions:
        out.positions[()] = base.positions[()]
    return out


def _reroot(src: _Source, prefix: KeyPath) -> _Source:
    """The same data placed under `prefix` (positions shifted accordingly)."""
    data: Any = src.data
    for part in reversed(prefix):
        data = {part: data}
    return _Source(
        data,
        {(*prefix, *k): v for k, v in src.positions.items() if k},
        {(*prefix, *k): v for k, v in src.value_positions.items() if k},
    )


# --------------------------------------------------------------------------------------------
# Loading: extends, vars_files, extra vars


def _err(message: str, doc: YamlDocument, path: KeyPath, *, hint: str | None = None) -> InputError:
    return InputError(
        message,
        location=doc.locate(path, value=True),
        key_path=format_key_path(path) or None,
        hint=hint,
    )


def _relative(base_file: Path, ref: str) -> Path:
    return Path(os.path.normpath(base_file.parent / os.path.expanduser(ref)))


class _Loader:
    def __init__(self, extra_vars: Mapping[str, Any] | None = None) -> None:
        self.files: list[Path] = []
        self.extra_vars = dict(extra_vars or {})

    def _record(self, path: Path) -> None:
        if path not in self.files:
            self.files.append(path)

    def load(self, path: Path, chain: tuple[Path, ...]) -> _Source:
        doc = load_yaml(path, what="playbook")
        self._record(path)
        if not isinstance(doc.data, dict):
            raise InputError(
                "a playbook is a mapping of keys (name, matrix, server, ...), "
                f"got {describe(doc.data)}",
                location=doc.locate((), value=True),
            )
        own = self._own(doc)
        merged: _Source | None = None
        for ref, at in self._extends(doc):
            target = _relative(path, ref)
            key = target.resolve()
            if key in chain:  # `chain`: resolved paths of the files extending each other
                cycle = [p.name for p in chain[chain.index(key) :]] + [target.name]
                raise _err(
                    "cycle: " + " -> ".join(cycle),
                    doc,
                    at,
                    hint="a playbook cannot extend itself, directly or through others",
                )
            if not target.is_file():
                raise _err(
                    f"file not found: {ref} (looked for {target})",
                    doc,
                    at,
                    hint=suggest_file(target),
                )
            base = self.load(target, (*chain, key))
            merged = base if merged is None else _merge(merged, base)
        if merged is None:
            return own
        result = _merge(merged, own)
        result.positions[()] = own.positions[()]
        return result

    def _extends(self, doc: YamlDocument) -> list[tuple[str, KeyPath]]:
        value = doc.data.get("extends")
        if value is None:
            return []
        refs: list[tuple[str, KeyPath]] = []
        if isinstance(value, str):
            refs.append((value, ("extends",)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    raise _err(f"expected a file name, got {describe(item)}", doc, ("extends", i))
                refs.append((item, ("extends", i)))
        else:
            raise _err(
                f"expected a file name or a list of them, got {describe(value)}",
                doc,
                ("extends",),
            )
        for ref, at in refs:
            if is_template(ref):
                raise _err("extends cannot be a template: it is read before rendering", doc, at)
        return refs

    def _own(self, doc: YamlDocument) -> _Source:
        """This file's data with `extends` dropped and its `vars_files` merged into `vars`."""
        data = {k: v for k, v in doc.data.items() if k not in ("extends", "vars_files")}
        src = _Source(data)
        _copy_positions(
            _Source(doc.data, dict(doc.positions), dict(doc.value_positions)), data, (), src
        )
        files = doc.data.get("vars_files")
        if files is None:
            return src
        if not isinstance(files, list):
            raise _err(
                f"expected a list of file names, got {describe(files)}", doc, ("vars_files",)
            )
        if "vars" in data and data["vars"] is not None and not isinstance(data["vars"], dict):
            raise _err(
                f"expected a mapping of names to values, got {describe(data['vars'])}",
                doc,
                ("vars",),
            )
        earlier: dict[str, tuple[Any, YamlDocument]] = {}  # vars of the files read so far
        for i, ref in enumerate(files):
            if not isinstance(ref, str):
                raise _err(f"expected a file name, got {describe(ref)}", doc, ("vars_files", i))
            if is_template(ref):
                ref = self._render_vars_file_name(ref, doc, data.get("vars"), i, earlier)
            target = _relative(doc.path, ref)
            if not target.is_file():
                raise _err(
                    f"vars file not found: {ref} (looked for {target})",
                    doc,
                    ("vars_files", i),
                    hint=suggest_file(target),
                )
            vdoc = load_yaml(target, allow_empty=True, what="vars file")
            self._record(target)
            if vdoc.data is None:
                continue
            if not isinstance(vdoc.data, dict):
                raise InputError(
                    f"a vars file is a mapping of names to values, got {describe(vdoc.data)}",
                    location=vdoc.locate((), value=True),
                )
            layer = _reroot(
                _Source(vdoc.data, dict(vdoc.positions), dict(vdoc.value_positions)), ("vars",)
            )
            src = _merge(src, layer, levels=2)  # a var from a vars file replaces it whole
            earlier.update((str(k), (v, vdoc)) for k, v in vdoc.data.items())
        return src

    def _render_vars_file_name(
        self,
        ref: str,
        doc: YamlDocument,
        own_vars: Any,
        index: int,
        earlier: Mapping[str, tuple[Any, YamlDocument]],
    ) -> str:
        """`vars/{{ cluster }}.yml` as Ansible templates it: with -e vars, the vars of the files
        listed before it, and this file's `vars:` (that precedence, highest first).

        Inventory and matrix variables do not exist yet: the file is read before any host.
        """
        from orchestrator.plan.render import TemplateEngine, VarDecl, VariableScope

        def locate(path: KeyPath) -> SourceLocation:
            return doc.locate(path, value=True)

        def in_vars_file(source: YamlDocument) -> Callable[[KeyPath], SourceLocation]:
            # its variables sit at the file's top level: ("vars", name) there is (name,)
            return lambda path: source.locate(path[1:], value=True)

        decls = {
            str(name): VarDecl(value, ("vars", name), locate)
            for name, value in (own_vars or {}).items()
        }
        for name, (value, vdoc) in earlier.items():
            decls[name] = VarDecl(value, ("vars", name), in_vars_file(vdoc))

        engine = TemplateEngine()
        scope = VariableScope(engine, {**engine.globals, **self.extra_vars}, decls)
        path: KeyPath = ("vars_files", index)
        try:
            rendered = engine.render_text(ref, scope, path, locate)
        except InputError as exc:
            if exc.message.startswith("undefined variable"):
                # Jinja's globals are no likely meant names here; the variables in reach are.
                name = exc.message.split("'")[1] if "'" in exc.message else ""
                close = suggest(name, [*decls, *self.extra_vars])
                exc.hint = (f"{close}; " if close else "") + (
                    "vars_files see -e vars, earlier vars files and this file's vars: only; "
                    "the inventory and the matrix come later"
                )
            raise
        if not isinstance(rendered, str) or not rendered:
            raise _err(
                f"a vars file name must render to a non-empty string, got {describe(rendered)}",
                doc,
                path,
            )
        return rendered


def suggest_file(target: Path) -> str | None:
    """`did you mean 'base.yaml'?` for a near file name in the same folder."""
    try:
        names = [p.name for p in target.parent.iterdir() if p.is_file()]
    except OSError:
        return None
    # Stricter than for keys: folders hold many similar names (`*.yml`), most unrelated.
    close = difflib.get_close_matches(target.name, names, n=1, cutoff=0.8)
    return f"did you mean {close[0]!r}?" if close else None


def load_playbook(path: Path, extra_vars: Mapping[str, Any] | None = None) -> LoadedPlaybook:
    """Read a playbook, resolve `extends:`, merge `vars_files` and `-e` vars, check its shape.

    Bases merge deeply (mappings key by key, lists replaced, the extending file wins);
    a file's `vars_files` replace its own vars of the same name; extra vars replace any var.
    """
    loader = _Loader(extra_vars)
    merged = loader.load(path, (path.resolve(),))
    if extra_vars:
        layer = _Source({"vars": dict(extra_vars)})
        for name in extra_vars:
            layer.positions[("vars", name)] = SourceLocation(EXTRA_VARS_SOURCE)
        base_positions = merged.positions[()]
        merged = _merge(merged, layer, levels=2)
        merged.positions[()] = base_positions
    validate_playbook_data(merged.data, merged.positions, str(path), merged.value_positions)
    return LoadedPlaybook(
        path=path,
        data=merged.data,
        files=tuple(loader.files),
        positions=merged.positions,
        extra_vars=dict(extra_vars or {}),
    )


def parse_extra_vars(items: Sequence[str]) -> dict[str, Any]:
    """Ansible's `-e` forms: `k=v [k2=v2 ...]` (strings), `@file.yml|json`, inline `{...}`.

    Later items win over earlier ones. Errors name the offending argument.
    """
    result: dict[str, Any] = {}
    for item in items:
        result.update(_parse_extra_item(item))
    return result


_STRUCTURED_VALUE = re.compile(r"(?:^|\s)([^\s=]+)=[\[{]")


def _refuse_structured_value(text: str, label: str) -> None:
    """`-e 'nccl={"default": {}}'`: name=value gives strings only, and the shell words of a
    mapping split it apart; the Ansible way is the whole mapping as JSON. A quoted value
    (`-e 'x="{literal}"'`) stays the string it says it is."""
    match = _STRUCTURED_VALUE.search(text)
    if match is None:
        return
    name = match.group(1)
    value_text = text[match.end(0) - 1 :].strip()
    example = f'{{"{name}": {value_text[0]}...{"}" if value_text[0] == "{" else "]"}}}'
    try:
        value = parse_yaml(value_text, "<-e>").data
    except InputError:
        value = None
    if value is not None and match.start(1) == 0:  # one name=value: the exact JSON to write
        example = json.dumps({name: value}, default=str)
    kind = "list" if value_text.startswith("[") else "mapping"
    raise InputError(
        f"{label}: the value of {name!r} is a {kind}, but name=value gives only strings",
        hint=f"pass the whole mapping as JSON: -e '{example}'",
    )


def _parse_extra_item(item: str) -> dict[str, Any]:
    text = item.strip()
    label = f"-e {item!r}"
    if not text:
        raise InputError(f"{label}: empty extra vars", hint="write -e name=value")
    data: Any
    doc: YamlDocument | None = None
    if text.startswith("@"):
        path = Path(os.path.expanduser(text[1:]))
        doc = load_yaml(path, allow_empty=True, what="extra vars file")
        data = {} if doc.data is None else doc.data
        if not isinstance(data, dict):
            raise InputError(
                f"{label}: an extra vars file must hold a mapping, got {describe(data)}",
                location=doc.locate((), value=True),
            )
    elif text[0] in "/.":
        raise InputError(f"{label}: not name=value", hint=f"to read a file write -e @{text}")
    elif text[0] in "{[":
        try:
            data = parse_yaml(text, "<-e>").data
        except InputError as exc:
            raise InputError(f"{label}: {exc.message}", hint=exc.hint) from None
        if not isinstance(data, dict):
            raise InputError(f"{label}: extra vars must be a mapping, got {describe(data)}")
    else:
        _refuse_structured_value(text, label)
        try:
            tokens = shlex.split(text)
        except ValueError as exc:
            raise InputError(f"{label}: {exc}", hint="check the quotes") from None
        data = {}
        for token in tokens:
            name, sep, value = token.partition("=")
            if not sep:
                hint = f"write -e {token}=VALUE"
                key, colon, rest = text.partition(":")
                if colon and key.strip() and "=" not in text:  # YAML's `name: value`
                    shown = rest.strip() or "VALUE"
                    hint = f"write -e {key.strip()}={shown}, or a mapping: -e '{{{text.strip()}}}'"
                raise InputError(f"{label}: {token!r} is not name=value", hint=hint)
            data[name] = value
    for name in data:
        try:
            _vars({name: None})
        except _Problem as problem:
            raise InputError(
                f"{label}: {problem.message}",
                location=doc.locate((name,)) if doc is not None else None,
                key_path=str(name) if doc is not None else None,
                hint=problem.hint,
            ) from None
    return dict(data)

"""The playbook's field types: each accepts a template or a value of its kind.

A field that fails raises `FieldProblem` (a ValueError pydantic carries through) with the path
below the field and a hint; `validation.py` turns it into one located `InputError`.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Collection
from typing import Annotated, Any

from pydantic import PlainValidator, ValidationInfo, WithJsonSchema

from orchestrator.config.keypath import KeyPath

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


# The validation context of a section after rendering: templates are gone, so a string that looks
# like one is no template, numbers may arrive as text ("30" from a variable) and come out floats,
# and list items that render to null add nothing.
RENDERED: dict[str, Any] = {"rendered": True}


def _rendered(info: ValidationInfo | None) -> bool:
    return bool(info is not None and info.context and info.context.get("rendered"))


def type_name(value: Any) -> str:
    """The kind of a rendered value, for messages about what a template gave: int, a mapping."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


class FieldProblem(ValueError):
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


def is_number(value: Any) -> bool:
    """An int or float that is not a bool (YAML's true is no number)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _leaf(
    expected: str,
    check: Callable[[Any], bool],
    *,
    hint: Callable[[Any], str | None] | None = None,
    number: bool = False,
) -> Callable[[Any, ValidationInfo], Any]:
    """A validator accepting a template or a value passing `check`.

    Rendered, a `number` field takes numeric text too, must be finite, and gives a float.
    """

    def validate(value: Any, info: ValidationInfo) -> Any:
        if _rendered(info):
            if number:
                value = _rendered_number(value)
            if check(value) and (not number or math.isfinite(value)):
                return value
        elif is_template(value) or check(value):
            return value
        raise FieldProblem(f"expected {expected}, got {describe(value)}", hint=hint and hint(value))

    return validate


def _rendered_number(value: Any) -> Any:
    """A rendered value as a float when it is a number or numeric text; else unchanged."""
    if is_number(value):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _quote_hint(value: Any) -> str | None:
    if is_number(value):
        return f'quote it: "{value}" (unquoted digits are read as a number)'
    return None


def _choice(*names: str) -> Callable[[Any, ValidationInfo], Any]:
    def validate(value: Any, info: ValidationInfo) -> Any:
        if (is_template(value) and not _rendered(info)) or value in names:
            return value
        options = ", ".join(names)
        raise FieldProblem(
            f"expected one of {options}, got {describe(value)}",
            hint=suggest(str(value), names) if isinstance(value, str) else None,
        )

    return validate


def _regex(value: Any) -> Any:
    if is_template(value):
        return value
    if not isinstance(value, str):
        raise FieldProblem(f"expected a regular expression, got {describe(value)}")
    try:
        re.compile(value)
    except re.error as exc:
        raise FieldProblem(f"invalid regular expression {value!r}: {exc}") from None
    return value


def _str_list(value: Any) -> Any:
    if not isinstance(value, list):
        raise FieldProblem(f"expected a list of strings, got {describe(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise FieldProblem(f"expected a string, got {describe(item)}", sub_path=(i,))
    return value


def _extends(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return _str_list(value)


def _argv_item(value: Any, sub_path: KeyPath) -> None:
    if not (isinstance(value, str) or is_number(value)):
        raise FieldProblem(
            f"an argument must be a string or number, got {describe(value)}", sub_path=sub_path
        )


def _command(value: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            raise FieldProblem("the command is empty")
        return value
    if isinstance(value, list):
        if not value:
            raise FieldProblem("the command is empty")
        for i, item in enumerate(value):
            _argv_item(item, (i,))
        return value
    raise FieldProblem(f"expected a command string or a list of arguments, got {describe(value)}")


def _launcher(value: Any) -> Any:
    if is_template(value):
        return value
    if not isinstance(value, list) or not value:
        raise FieldProblem(
            f"expected a non-empty list of arguments, got {describe(value)}",
            hint="e.g. launcher: [torchrun, --nproc-per-node, '8', -m, sglang.launch_server]",
        )
    for i, item in enumerate(value):
        _argv_item(item, (i,))
    return value


def _mapping_list(
    what: str, gives: str, check_mapping: Callable[[dict[Any, Any], KeyPath, bool], None]
) -> Callable[[Any, ValidationInfo], Any]:
    """mapping | [mapping | template] | template, each mapping checked by `check_mapping`.

    Rendered, a list item that gave null adds nothing, and any other non-mapping is refused
    as `gives` ("env must give a mapping of NAME: value") names it.
    """

    def validate(value: Any, info: ValidationInfo) -> Any:
        rendered = _rendered(info)
        if isinstance(value, dict):
            check_mapping(value, (), rendered)
            return value
        if rendered and not isinstance(value, list):
            raise FieldProblem(f"{gives}, got {type_name(value)}")
        if is_template(value):
            return value
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    check_mapping(item, (i,), rendered)
                elif rendered and item is not None:
                    raise FieldProblem(f"{gives}, got {type_name(item)}", sub_path=(i,))
                elif not rendered and not is_template(item):
                    raise FieldProblem(
                        f"expected a mapping or a template giving one, got {describe(item)}",
                        sub_path=(i,),
                    )
            return value
        raise FieldProblem(f"expected {what}, got {describe(value)}")

    return validate


def _check_env_mapping(mapping: dict[Any, Any], at: KeyPath, rendered: bool) -> None:
    """NAME: value pairs. A bare yes/no in the file is refused; a rendered boolean is deliberate
    (the planner writes it as true/false)."""
    for name, value in mapping.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise FieldProblem(
                f"{name!r} is not a valid environment variable name",
                sub_path=(*at, name),
                at_key=True,
                hint="letters, digits and '_', not starting with a digit",
            )
        if rendered:
            _check_rendered_env_value(value, (*at, name))
            continue
        if isinstance(value, bool):
            raise FieldProblem(
                f"an environment value must be text, got {describe(value)}",
                sub_path=(*at, name),
                hint="quote it ('1', 'true'): YAML reads yes/no/true/false as booleans",
            )
        if not (isinstance(value, str) or is_number(value)):
            raise FieldProblem(
                f"an environment value must be a string or number, got {describe(value)}",
                sub_path=(*at, name),
            )


def _check_rendered_env_value(value: Any, at: KeyPath) -> None:
    if value is None:
        raise FieldProblem(
            "env value is null",
            sub_path=at,
            hint='write "" for an empty value, or remove the variable',
        )
    if not (isinstance(value, str | bool) or is_number(value)):
        raise FieldProblem(
            f"env value must be text, a number or a boolean, got {type_name(value)}",
            sub_path=at,
            hint="a mapping under a list item of env is merged; "
            "did you nest it one level too deep?",
        )


def _check_args_mapping(mapping: dict[Any, Any], at: KeyPath, rendered: bool) -> None:
    for name in mapping:
        if not isinstance(name, str) or not name:
            raise FieldProblem(
                f"a flag name must be a string, got {describe(name)}",
                sub_path=(*at, name),
                at_key=True,
            )


def validate_vars(value: Any) -> Any:
    if not isinstance(value, dict):
        raise FieldProblem(f"expected a mapping of names to values, got {describe(value)}")
    for name in value:
        if not isinstance(name, str) or not VAR_NAME.match(name):
            raise FieldProblem(
                f"{name!r} is not a valid variable name",
                sub_path=(name,),
                at_key=True,
                hint="letters, digits and '_', not starting with a digit",
            )
        if name in RESERVED_VAR_NAMES:
            raise FieldProblem(
                f"{name!r} is a name orch sets for templates",
                sub_path=(name,),
                at_key=True,
                hint="rename the variable",
            )
    return value


_MATRIX_KEYS = ("zip", "exclude", "include", "where")


def _point_list(value: Any, key: str) -> None:
    if not isinstance(value, list):
        raise FieldProblem(
            f"expected a list of {{axis: value}} mappings, got {describe(value)}", sub_path=(key,)
        )
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not item:
            raise FieldProblem(
                f"expected a mapping of axis: value, got {describe(item)}", sub_path=(key, i)
            )


def _matrix(value: Any) -> Any:
    if not isinstance(value, dict):
        raise FieldProblem(f"expected a mapping of axis: [values], got {describe(value)}")
    for key, item in value.items():
        if key == "zip":
            if not isinstance(item, list):
                raise FieldProblem(
                    f"expected a list of axis-name lists, got {describe(item)}", sub_path=(key,)
                )
            for i, group in enumerate(item):
                if not isinstance(group, list) or not all(isinstance(a, str) for a in group):
                    raise FieldProblem(
                        f"expected a list of axis names, got {describe(group)}",
                        sub_path=(key, i),
                        hint="e.g. zip: [[model, tp]]",
                    )
        elif key in ("exclude", "include"):
            _point_list(item, key)
        elif key == "where":
            if not isinstance(item, str):
                raise FieldProblem(
                    f"expected a Jinja2 expression, got {describe(item)}", sub_path=(key,)
                )
        elif not isinstance(key, str):
            raise FieldProblem(
                f"an axis name must be a string, got {describe(key)}", sub_path=(key,), at_key=True
            )
        elif not isinstance(item, list):
            raise FieldProblem(
                f"axis {key!r} needs a list of values, got {describe(item)}",
                sub_path=(key,),
                hint=f"write {key}: [{item if isinstance(item, str | int | float) else '...'}]",
            )
    return value


def _metrics(value: Any) -> Any:
    if not isinstance(value, dict):
        raise FieldProblem(f"expected a mapping of metric: regex, got {describe(value)}")
    for name, pattern in value.items():
        try:
            _regex(pattern)
        except FieldProblem as problem:
            problem.sub_path = (name,)
            raise
    return value


def parse_tolerance(value: Any, *, numeric_text: bool = False) -> float:
    """A relative tolerance as a fraction: '5%' -> 0.05, 0.05 -> 0.05 (finite, >= 0).

    `numeric_text` also takes '0.05' (what a template gives); the file must write a number.
    """
    number: float | None = None
    if is_number(value):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            if text.endswith("%"):
                number = float(text[:-1]) / 100
            elif numeric_text:
                number = float(text)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number < 0:
        raise FieldProblem(
            f"bad tolerance {describe(value)}: expected a tolerance like '5%' or 0.05",
            hint="write a percentage such as '5%' or a fraction such as 0.05",
        )
    return number


def _tolerance(value: Any, info: ValidationInfo) -> Any:
    """As written in the file (templates pass); rendered, the fraction it stands for."""
    if _rendered(info):
        return parse_tolerance(value, numeric_text=True)
    if not is_template(value):
        parse_tolerance(value)
    return value


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
TNumber = Annotated[
    Any, PlainValidator(_leaf("a number", is_number, number=True)), _or_template(_NUMBER)
]
TPositive = Annotated[
    Any,
    PlainValidator(_leaf("a positive number", lambda v: is_number(v) and v > 0, number=True)),
    _or_template({"type": "number", "exclusiveMinimum": 0}),
]
TNonNegative = Annotated[
    Any,
    PlainValidator(_leaf("a number >= 0", lambda v: is_number(v) and v >= 0, number=True)),
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
    PlainValidator(
        _mapping_list(
            "a flag mapping or a list of them",
            "args must give a mapping of flag: value",
            _check_args_mapping,
        )
    ),
    WithJsonSchema(_MAPPINGS_SCHEMA),
]
TEnv = Annotated[
    Any,
    PlainValidator(
        _mapping_list(
            "a mapping of NAME: value or a list of them",
            "env must give a mapping of NAME: value",
            _check_env_mapping,
        )
    ),
    WithJsonSchema(_MAPPINGS_SCHEMA),
]
TVars = Annotated[Any, PlainValidator(validate_vars), WithJsonSchema(_ANY_MAP)]
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

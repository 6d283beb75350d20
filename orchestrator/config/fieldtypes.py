"""The annotated types of the playbook model's fields: a validator (fields.py) and the JSON
Schema editors see (`orch schema`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import PlainValidator, WithJsonSchema

from orchestrator.config.fields import (
    FieldProblem,
    check_args_mapping,
    check_env_mapping,
    command_validator,
    extends_validator,
    is_number,
    launcher_validator,
    leaf,
    mapping_list_validator,
    matrix_validator,
    metrics_validator,
    one_of,
    quote_hint,
    regex_validator,
    str_list_validator,
    tolerance_validator,
    validate_vars,
)
from orchestrator.config.repeats import repeats_validator
from orchestrator.config.slo import search_validator
from orchestrator.config.values import (
    BENCH_ADAPTER_NAMES,
    SERVER_ADAPTER_NAMES,
    describe,
    is_template,
)
from orchestrator.runner.container import RUNTIMES, ContainerSpecError, Mount
from orchestrator.runner.image import ImageRefError, parse_image

_TEMPLATE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r"\{\{|\{%",
    "description": "a Jinja2 template rendered per cell and host",
}


def _or_template(schema: dict[str, Any]) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [schema, _TEMPLATE_SCHEMA]})


_NUMBER: dict[str, Any] = {"type": "number"}
_INT: dict[str, Any] = {"type": "integer"}
_STR: dict[str, Any] = {"type": "string"}
_STR_LIST: dict[str, Any] = {"type": "array", "items": _STR}
_ARGV: dict[str, Any] = {"type": "array", "items": {"type": ["string", "number"]}}
_ANY_MAP: dict[str, Any] = {"type": "object"}


def _enum(*names: str) -> dict[str, Any]:
    return {"enum": list(names)}


TStr = Annotated[
    Any,
    PlainValidator(leaf("a string", lambda v: isinstance(v, str))),
    WithJsonSchema(_STR),
]
TRef = Annotated[
    Any,
    PlainValidator(leaf("a string", lambda v: isinstance(v, str), hint=quote_hint)),
    WithJsonSchema(_STR),
]
TName = Annotated[
    Any,
    PlainValidator(leaf("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip()))),
    WithJsonSchema({"type": "string", "minLength": 1}),
]
TRegex = Annotated[Any, PlainValidator(regex_validator), WithJsonSchema({"type": "string"})]
TBool = Annotated[
    Any,
    PlainValidator(leaf("true or false", lambda v: isinstance(v, bool))),
    _or_template({"type": "boolean"}),
]
TNumber = Annotated[
    Any, PlainValidator(leaf("a number", is_number, number=True)), _or_template(_NUMBER)
]
TPositive = Annotated[
    Any,
    PlainValidator(leaf("a positive number", lambda v: is_number(v) and v > 0, number=True)),
    _or_template({"type": "number", "exclusiveMinimum": 0}),
]
TNonNegative = Annotated[
    Any,
    PlainValidator(leaf("a number >= 0", lambda v: is_number(v) and v >= 0, number=True)),
    _or_template({"type": "number", "minimum": 0}),
]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


TCount = Annotated[
    Any,
    PlainValidator(leaf("an integer >= 0", lambda v: _is_int(v) and v >= 0)),
    _or_template({"type": "integer", "minimum": 0}),
]
TPositiveCount = Annotated[
    Any,
    PlainValidator(leaf("an integer >= 1", lambda v: _is_int(v) and v >= 1)),
    _or_template({"type": "integer", "minimum": 1}),
]
TPort = Annotated[
    Any,
    PlainValidator(leaf("a port number (1-65535)", lambda v: _is_int(v) and 0 < v < 65536)),
    _or_template({"type": "integer", "minimum": 1, "maximum": 65535}),
]
THttpStatus = Annotated[
    Any,
    PlainValidator(leaf("an HTTP status (100-599)", lambda v: _is_int(v) and 100 <= v <= 599)),
    _or_template({"type": "integer", "minimum": 100, "maximum": 599}),
]
TRepeats = Annotated[
    Any,
    PlainValidator(repeats_validator),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {
                    "type": "object",
                    "properties": {
                        "min": {"type": "integer", "minimum": 1},
                        "max": {"type": "integer", "minimum": 1},
                        "until": {"anyOf": [{"type": "number"}, {"type": "string"}]},
                        "confidence": {"anyOf": [{"type": "number"}, {"type": "string"}]},
                        "metric": {"type": "string"},
                    },
                    "required": ["max", "until"],
                    "additionalProperties": False,
                },
                _TEMPLATE_SCHEMA,
            ]
        }
    ),
]
_BOUND: dict[str, Any] = {
    "anyOf": [
        _NUMBER,
        {"type": "object", "properties": {"max": _NUMBER}, "required": ["max"]},
        {"type": "object", "properties": {"min": _NUMBER}, "required": ["min"]},
        _TEMPLATE_SCHEMA,
    ]
}
TSearch = Annotated[
    Any,
    PlainValidator(search_validator),
    _or_template(
        {
            "type": "object",
            "properties": {
                "axis": _STR,
                "slo": {"type": "object", "additionalProperties": _BOUND},
                "confidence": {"anyOf": [_NUMBER, _STR]},
            },
            "required": ["axis", "slo"],
            "additionalProperties": False,
        }
    ),
]
TStrList = Annotated[Any, PlainValidator(str_list_validator), WithJsonSchema(_STR_LIST)]
TExtends = Annotated[
    Any, PlainValidator(extends_validator), WithJsonSchema({"anyOf": [_STR, _STR_LIST]})
]
TCommand = Annotated[
    Any, PlainValidator(command_validator), WithJsonSchema({"anyOf": [_STR, _ARGV]})
]
TLauncher = Annotated[Any, PlainValidator(launcher_validator), _or_template(_ARGV)]
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
        mapping_list_validator(
            "a flag mapping or a list of them",
            "args must give a mapping of flag: value",
            check_args_mapping,
        )
    ),
    WithJsonSchema(_MAPPINGS_SCHEMA),
]
TEnv = Annotated[
    Any,
    PlainValidator(
        mapping_list_validator(
            "a mapping of NAME: value or a list of them",
            "env must give a mapping of NAME: value",
            check_env_mapping,
        )
    ),
    WithJsonSchema(_MAPPINGS_SCHEMA),
]
TVars = Annotated[Any, PlainValidator(validate_vars), WithJsonSchema(_ANY_MAP)]
TMatrix = Annotated[
    Any,
    PlainValidator(matrix_validator),
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
    PlainValidator(metrics_validator),
    WithJsonSchema({"type": "object", "additionalProperties": _STR}),
]
TTolerance = Annotated[
    Any,
    PlainValidator(tolerance_validator),
    WithJsonSchema(
        {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": "%$"}]}
    ),
]


_STRATEGIES = ("each", "spread")
_DIRTY = ("refuse", "reset", "record")
_VERIFY_ENV = ("strict", "warn", "off")
_FETCH = ("always", "never")
TStrategy = Annotated[Any, PlainValidator(one_of(*_STRATEGIES)), _or_template(_enum(*_STRATEGIES))]
TDirty = Annotated[Any, PlainValidator(one_of(*_DIRTY)), _or_template(_enum(*_DIRTY))]
TFetch = Annotated[Any, PlainValidator(one_of(*_FETCH)), _or_template(_enum(*_FETCH))]
TVerifyEnv = Annotated[Any, PlainValidator(one_of(*_VERIFY_ENV)), _or_template(_enum(*_VERIFY_ENV))]
_RESTART = ("per_config", "per_cell")
TRestart = Annotated[Any, PlainValidator(one_of(*_RESTART)), _or_template(_enum(*_RESTART))]
_CACHE = ("fresh", "warm")
TCache = Annotated[Any, PlainValidator(one_of(*_CACHE)), _or_template(_enum(*_CACHE))]
_GPUS_BUSY = ("refuse", "warn")
TGpusBusy = Annotated[Any, PlainValidator(one_of(*_GPUS_BUSY)), _or_template(_enum(*_GPUS_BUSY))]
_METRICS_ENGINE = ("vllm", "sglang")  # whose /metrics family names orch knows
TMetricsEngine = Annotated[
    Any, PlainValidator(one_of(*_METRICS_ENGINE)), _or_template(_enum(*_METRICS_ENGINE))
]
TServerAdapter = Annotated[
    Any,
    PlainValidator(one_of(*SERVER_ADAPTER_NAMES)),
    _or_template(_enum(*SERVER_ADAPTER_NAMES)),
]
TBenchAdapter = Annotated[
    Any,
    PlainValidator(one_of(*BENCH_ADAPTER_NAMES)),
    _or_template(_enum(*BENCH_ADAPTER_NAMES)),
]


def _image_validator(value: Any) -> Any:
    """An image reference (`[REGISTRY/]REPOSITORY[:TAG][@sha256:HEX]`), the bad part named."""
    if is_template(value):
        return value
    if not isinstance(value, str):
        raise FieldProblem(f"expected an image reference, got {describe(value)}")
    try:
        parse_image(value)
    except ImageRefError as exc:
        raise FieldProblem(str(exc), hint="e.g. registry.example:5000/team/sglang:v0.5") from None
    return value


def _mounts_validator(value: Any) -> Any:
    """A list of `SRC:DST[:ro|rw]` bind mounts, each item checked."""
    if is_template(value):
        return value
    if not isinstance(value, list):
        raise FieldProblem(f"expected a list of SRC:DST[:ro|rw], got {describe(value)}")
    for i, item in enumerate(value):
        if is_template(item):
            continue
        if not isinstance(item, str):
            raise FieldProblem(f"expected SRC:DST[:ro|rw], got {describe(item)}", sub_path=(i,))
        try:
            Mount.parse(item)
        except ContainerSpecError as exc:
            raise FieldProblem(str(exc), sub_path=(i,)) from None
    return value


def _gpus_ok(value: Any) -> bool:
    if is_number(value):
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    text = str(value) if isinstance(value, str) else None
    return text is not None and (
        text in {"", "all"} or all(p.strip().isdigit() for p in text.split(","))
    )


TImage = Annotated[
    Any, PlainValidator(_image_validator), _or_template({"type": "string", "minLength": 1})
]
TMounts = Annotated[Any, PlainValidator(_mounts_validator), _or_template(_STR_LIST)]
TContainerGpus = Annotated[
    Any,
    PlainValidator(leaf("'all' or GPU indices like '0,1'", _gpus_ok)),
    _or_template({"anyOf": [_STR, {"type": "integer", "minimum": 0}]}),
]
TContainerRuntime = Annotated[
    Any, PlainValidator(one_of(*RUNTIMES)), _or_template(_enum(*RUNTIMES))
]

"""The playbook's field types: each accepts a template or a value of its kind.

A field that fails raises `FieldProblem` (a ValueError pydantic carries through) with the path
below the field and a hint; `validation.py` turns it into one located `InputError`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationInfo

from orchestrator.config.keypath import KeyPath
from orchestrator.config.values import (
    ENV_NAME,
    RESERVED_VAR_NAMES,
    VAR_NAME,
    describe,
    is_template,
    shown,
    suggest,
    type_name,
)

# --------------------------------------------------------------------------------------------
# Validation building blocks


# The validation context of a section after rendering: templates are gone, so a string that looks
# like one is no template, numbers may arrive as text ("30" from a variable) and come out floats,
# and list items that render to null add nothing.
RENDERED: dict[str, Any] = {"rendered": True}


def is_rendered(info: ValidationInfo | None) -> bool:
    return bool(info is not None and info.context and info.context.get("rendered"))


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


def refuse_unknown_keys(value: dict[Any, Any], known: tuple[str, ...], where: str) -> None:
    """Raise on the first key of `value` not in `known`, pointing at the key, with a suggestion."""
    for key in value:
        if key not in known:
            raise FieldProblem(
                f"unknown key {key!r} in {where}",
                sub_path=(key,),
                at_key=True,
                hint=suggest(str(key), known) or f"known: {', '.join(known)}",
            )


def is_number(value: Any) -> bool:
    """An int or float that is not a bool (YAML's true is no number)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def leaf(
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
        if is_rendered(info):
            given = rendered_number(value) if number else value
            if check(given) and (not number or math.isfinite(given)):
                return given
        elif is_template(value) or check(value):
            return value
        raise FieldProblem(f"expected {expected}, got {describe(value)}", hint=hint and hint(value))

    return validate


def rendered_number(value: Any) -> Any:
    """A rendered value as a float when it is a number or numeric text; else unchanged."""
    if is_number(value):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def quote_hint(value: Any) -> str | None:
    if is_number(value):
        return f'quote it: "{value}" (unquoted digits are read as a number)'
    return None


def one_of(*names: str) -> Callable[[Any, ValidationInfo], Any]:
    def validate(value: Any, info: ValidationInfo) -> Any:
        if (is_template(value) and not is_rendered(info)) or value in names:
            return value
        options = ", ".join(names)
        raise FieldProblem(
            f"expected one of {options}, got {describe(value)}",
            hint=suggest(str(value), names) if isinstance(value, str) else None,
        )

    return validate


def regex_validator(value: Any) -> Any:
    if is_template(value):
        return value
    if not isinstance(value, str):
        raise FieldProblem(f"expected a regular expression, got {describe(value)}")
    try:
        re.compile(value)
    except re.error as exc:
        raise FieldProblem(f"invalid regular expression {value!r}: {exc}") from None
    return value


def str_list_validator(value: Any) -> Any:
    if not isinstance(value, list):
        raise FieldProblem(f"expected a list of strings, got {describe(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise FieldProblem(f"expected a string, got {describe(item)}", sub_path=(i,))
    return value


def extends_validator(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return str_list_validator(value)


def _argv_item(value: Any, sub_path: KeyPath) -> None:
    if not (isinstance(value, str) or is_number(value)):
        raise FieldProblem(
            f"an argument must be a string or number, got {describe(value)}", sub_path=sub_path
        )


def command_validator(value: Any) -> Any:
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


def launcher_validator(value: Any) -> Any:
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


def mapping_list_validator(
    what: str, gives: str, check_mapping: Callable[[dict[Any, Any], KeyPath, bool], None]
) -> Callable[[Any, ValidationInfo], Any]:
    """mapping | [mapping | template] | template, each mapping checked by `check_mapping`.

    Rendered, a list item that gave null adds nothing, and any other non-mapping is refused
    as `gives` ("env must give a mapping of NAME: value") names it.
    """

    def validate(value: Any, info: ValidationInfo) -> Any:
        rendered = is_rendered(info)
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


def check_env_mapping(mapping: dict[Any, Any], at: KeyPath, rendered: bool) -> None:
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
            raise bare_boolean(value, "an environment value", (*at, name))
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


def bare_boolean(value: bool, what: str, sub_path: KeyPath = ()) -> FieldProblem:
    """A boolean where text is meant, refused: YAML read a bare yes/no/on/off; say to quote it.

    Env values (any boolean) and matrix values (yes/no/on/off, see playbook.py) get the same
    words: `spec: [off, eagle3]` would otherwise be False, in argv and in cell ids.
    """
    return FieldProblem(
        f"{what} must be text, got {describe(value)}",
        sub_path=sub_path,
        hint="quote it ('on', 'off', 'true'): YAML reads yes/no/on/off/true/false as booleans",
    )


def check_args_mapping(mapping: dict[Any, Any], at: KeyPath, rendered: bool) -> None:
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
                f"{shown(name, 'this key')} is not a valid variable name",
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


def matrix_validator(value: Any) -> Any:
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
            if _templated(item):
                raise FieldProblem(
                    f"a matrix {key} point is not a template: {{{{ ... }}}} is never rendered",
                    sub_path=(key, _templated_at(item)),
                    hint="write the axis values themselves",
                )
        elif key == "where":
            if not isinstance(item, str):
                raise FieldProblem(
                    f"expected a Jinja2 expression, got {describe(item)}", sub_path=(key,)
                )
        elif not isinstance(key, str):
            raise FieldProblem(
                f"an axis name must be a string, got {describe(key)}", sub_path=(key,), at_key=True
            )
        elif _templated(item):
            raise FieldProblem(
                f"axis {key!r}: a matrix value is not a template (it is expanded before vars "
                f"are known), so {{{{ ... }}}} would reach the command unrendered",
                sub_path=(key,) if not isinstance(item, list) else (key, _templated_at(item)),
                hint=f"write the values themselves, e.g. {key}: [8, 16], and use them as "
                f'"{{{{ matrix.{key} }}}}"',
            )
        elif not isinstance(item, list):
            raise FieldProblem(
                f"axis {key!r} needs a list of values, got {describe(item)}",
                sub_path=(key,),
                hint=f"write {key}: [{_flow(item)}]",
            )
    return value


def _templated(value: Any) -> bool:
    """True when a value holds Jinja2 syntax anywhere (matrix values are never rendered)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(_templated(k) or _templated(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_templated(v) for v in value)
    return False


def _templated_at(values: list[Any]) -> int:
    return next(i for i, v in enumerate(values) if _templated(v))


def _flow(item: Any) -> str:
    """`item` as YAML would read it back inside [...] (a string quoted when it must be)."""
    if isinstance(item, bool) or not isinstance(item, str | int | float):
        return "..."
    if isinstance(item, str) and (not item or any(c in item for c in ":{}[],#&*!|>'\"%@`")):
        return json.dumps(item)
    return str(item)


def metrics_validator(value: Any) -> Any:
    if not isinstance(value, dict):
        raise FieldProblem(f"expected a mapping of metric: regex, got {describe(value)}")
    for name, pattern in value.items():
        try:
            regex_validator(pattern)
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


def tolerance_validator(value: Any, info: ValidationInfo) -> Any:
    """As written in the file (templates pass); rendered, the fraction it stands for."""
    if is_rendered(info):
        return parse_tolerance(value, numeric_text=True)
    if not is_template(value):
        parse_tolerance(value)
    return value

"""The `repeats:` field of `bench:`: a count, or the sequential form `{min, max, until}` that
stops once the deciding metric's median is known (runner/repeat_rule.py)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationInfo

from orchestrator.config.fields import (
    FieldProblem,
    is_number,
    is_rendered,
    parse_tolerance,
    refuse_unknown_keys,
    rendered_number,
)
from orchestrator.config.values import describe, is_template

# `repeats:` as a count, or the sequential form; `max` is required so a cell's cost is bounded.
REPEATS_KEYS = ("min", "max", "until", "confidence", "metric")


def _count_in(value: Any, key: str, rendered: bool) -> int | None:
    """A repeats count under `key` (None for a template before rendering)."""
    if not rendered and is_template(value):
        return None
    given = rendered_number(value) if rendered else value
    if is_number(given) and float(given).is_integer() and given >= 1:
        return int(given)
    raise FieldProblem(
        f"expected an integer >= 1, got {describe(value)}", sub_path=(key,) if key else ()
    )


def repeats_validator(value: Any, info: ValidationInfo) -> Any:
    """`repeats: N`, or `{min, max, until[, confidence][, metric]}`; rendered, plain numbers."""
    rendered = is_rendered(info)
    if not isinstance(value, dict):
        if not rendered and is_template(value):
            return value
        if isinstance(value, bool) or (not rendered and not is_number(value)):
            raise FieldProblem(
                f"expected an integer >= 1 or {{min, max, until}}, got {describe(value)}",
                hint="e.g. repeats: 5, or repeats: {min: 3, max: 12, until: '2%'}",
            )
        return _count_in(value, "", rendered)
    refuse_unknown_keys(value, REPEATS_KEYS, "repeats")
    for key in ("max", "until"):
        if key not in value:
            raise FieldProblem(
                f"repeats needs {key}",
                hint="e.g. repeats: {min: 3, max: 12, until: '2%'}",
            )
    out = dict(value)
    low = _count_in(value.get("min", 1), "min", rendered)
    high = _count_in(value["max"], "max", rendered)
    if low is not None and high is not None and low > high:
        raise FieldProblem(f"min {low} is above max {high}", sub_path=("min",))
    for key, low_ok in (("until", 0.0), ("confidence", 0.5)):
        given = value.get(key)
        if given is None or (not rendered and is_template(given)):
            continue
        try:
            fraction = parse_tolerance(given, numeric_text=rendered)
        except FieldProblem as exc:
            raise FieldProblem(exc.message, sub_path=(key,), hint=exc.hint) from None
        if key == "until" and fraction <= low_ok:
            raise FieldProblem("until must be above 0, e.g. '2%'", sub_path=(key,))
        if key == "confidence" and not low_ok <= fraction < 1:
            raise FieldProblem(
                f"confidence {fraction:g} is not in [0.5, 1)", sub_path=(key,), hint="e.g. '90%'"
            )
        out[key] = fraction
    metric = value.get("metric")
    if metric is not None and not isinstance(metric, str):
        raise FieldProblem(f"expected a metric name, got {describe(metric)}", sub_path=("metric",))
    if rendered:
        out["max"] = high
        if "min" in value:
            out["min"] = low
    return out

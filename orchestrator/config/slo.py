"""The `search:` field of `bench:`: an SLO search along a matrix axis.

    bench:
      search:
        axis: rate                 # a matrix axis of numbers: the search's levels, ascending
        slo: {p99_ttft_ms: 500, error_rate: 0.01, request_goodput: {min: 2}}
        confidence: 95%            # each holds/fails call's (one-sided); 95 % unless given

A bare number is an upper bound (`{max: X}`); `{min: X}` bounds a metric that should be high
(goodput). Which metrics the bench reports is checked when the plan is built (plan/slo.py).
"""

from __future__ import annotations

import math
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

SEARCH_KEYS = ("axis", "slo", "confidence")
_EXAMPLE = "e.g. search: {axis: rate, slo: {p99_ttft_ms: 500}}"


def _bound(value: Any, metric: str, rendered: bool) -> Any:
    """One SLO bound as {max: X} or {min: X} (a template kept until rendered)."""
    if not rendered and is_template(value):
        return value
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in ("max", "min"):
            raise FieldProblem(
                f"a bound is {{max: X}} or {{min: X}}, got {describe(value)}",
                sub_path=("slo", metric),
                hint="a bare number is a max: p99_ttft_ms: 500",
            )
        side, number = next(iter(value.items()))
    else:
        side, number = "max", value
    if not rendered and is_template(number):
        return {side: number}
    given = rendered_number(number) if rendered else number
    if not is_number(given) or not math.isfinite(float(given)) or float(given) < 0:
        raise FieldProblem(
            f"expected a number >= 0, got {describe(number)}",
            sub_path=("slo", metric) + ((side,) if isinstance(value, dict) else ()),
        )
    return {side: float(given)}


def search_validator(value: Any, info: ValidationInfo) -> Any:
    """`search: {axis, slo[, confidence]}`, checked key by key with its path."""
    rendered = is_rendered(info)
    if not rendered and is_template(value):
        return value
    if not isinstance(value, dict):
        raise FieldProblem(f"expected {{axis, slo}}, got {describe(value)}", hint=_EXAMPLE)
    refuse_unknown_keys(value, SEARCH_KEYS, "search")
    for key in ("axis", "slo"):
        if key not in value:
            raise FieldProblem(f"search needs {key}", hint=_EXAMPLE)
    out = dict(value)
    axis = value["axis"]
    if not isinstance(axis, str) or not axis:
        raise FieldProblem(
            f"expected a matrix axis name, got {describe(axis)}",
            sub_path=("axis",),
            hint="the axis whose values are the levels, e.g. axis: rate",
        )
    slo = value["slo"]
    if not rendered and is_template(slo):
        return out
    if not isinstance(slo, dict) or not slo:
        raise FieldProblem(
            f"expected metric: bound pairs, got {describe(slo)}",
            sub_path=("slo",),
            hint="e.g. slo: {p99_ttft_ms: 500, error_rate: 0.01}",
        )
    out["slo"] = {
        str(metric): _bound(bound, str(metric), rendered) for metric, bound in slo.items()
    }
    given = value.get("confidence")
    if given is not None and (rendered or not is_template(given)):
        try:
            fraction = parse_tolerance(given, numeric_text=rendered)
        except FieldProblem as exc:
            raise FieldProblem(exc.message, sub_path=("confidence",), hint=exc.hint) from None
        if not 0.5 < fraction < 1:
            raise FieldProblem(
                f"confidence {fraction:g} is not in (0.5, 1)",
                sub_path=("confidence",),
                hint="e.g. '95%'",
            )
        out["confidence"] = fraction
    return out

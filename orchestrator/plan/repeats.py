"""`bench.repeats: {min, max, until}` made into the rule the runner applies between repeats.

The deciding metrics are what a verdict on the cell rests on (as `orch diff` and `audit` choose
them): `metric:` when given, else the cell's `expect:` metrics, else the adapter's headline
throughput. Each must be one the runner can read from a repeat's files as it runs; the
controller's full parse comes only after the cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from orchestrator.adapters import bench_adapter
from orchestrator.adapters.base import HEADLINE_THROUGHPUT, BenchAdapter
from orchestrator.cell import BenchSpec, RepeatRule, Watch
from orchestrator.config.fields import parse_tolerance
from orchestrator.errors import InputError
from orchestrator.runner.repeat_rule import DEFAULT_CONFIDENCE, fewest_repeats


def settle_rule(section: Mapping[str, Any], spec: BenchSpec) -> BenchSpec:
    """The spec with its rule when the rendered `bench:` section writes the sequential form."""
    given = section.get("repeats")
    if not isinstance(given, Mapping):
        return spec
    adapter = bench_adapter(spec.adapter)
    confidence = parse_tolerance(given.get("confidence", DEFAULT_CONFIDENCE), numeric_text=True)
    # no `min`: from the first count whose median interval reaches the confidence
    low = int(given["min"]) if given.get("min") is not None else fewest_repeats(confidence)
    if spec.repeats < fewest_repeats(confidence):
        raise InputError(
            f"max {spec.repeats} can never settle: the median's {confidence:.0%} interval needs "
            f"at least {fewest_repeats(confidence)} repeats",
            key_path="repeats.max",
            hint=f"raise max, or lower confidence (at {spec.repeats}: "
            f"{1 - 2 / 2**spec.repeats:.1%} at most)",
        )
    metric = given.get("metric")
    chosen: Literal["metric", "headline"]
    if metric is not None:
        watch = adapter.watch(spec, str(metric))
        if watch is None:
            raise InputError(
                f"the {spec.adapter} bench cannot read {metric} between repeats",
                key_path="repeats.metric",
                hint=_readable_hint(adapter, spec),
            )
        watches, chosen = (watch,), "metric"
    else:
        headline = [w for m in HEADLINE_THROUGHPUT if (w := adapter.watch(spec, m)) is not None]
        if not headline:
            raise InputError(
                f"repeats: {{until}} needs a metric to settle on; the {spec.adapter} bench "
                "has no headline throughput it can read between repeats",
                key_path="repeats",
                hint="name one: repeats: {min: 3, max: 12, until: '2%', metric: NAME}"
                + (f" ({_readable_hint(adapter, spec)})" if spec.metrics else ""),
            )
        watches, chosen = (headline[0],), "headline"
    rule = RepeatRule(
        min=min(low, spec.repeats),
        until=parse_tolerance(given["until"], numeric_text=True),
        confidence=confidence,
        metrics=tuple(w.metric for w in watches),
        watch=watches,
        chosen=chosen,
    )
    return spec.model_copy(update={"settle": rule})


def settle_on_expect(spec: BenchSpec, expected: Iterable[str]) -> BenchSpec:
    """A headline rule moved to the `expect:` metrics the runner can read (unchanged when it
    can read none of them, or when `metric:` chose)."""
    rule = spec.settle
    if rule is None or rule.chosen != "headline":
        return spec
    adapter = bench_adapter(spec.adapter)
    watches: list[Watch] = []
    for name in dict.fromkeys(expected):
        found = adapter.watch(spec, name)
        if found is not None:
            watches.append(found)
    if not watches:
        return spec
    moved = rule.model_copy(
        update={
            "metrics": tuple(w.metric for w in watches),
            "watch": tuple(watches),
            "chosen": "expect",
        }
    )
    return spec.model_copy(update={"settle": moved})


def _readable_hint(adapter: BenchAdapter, spec: BenchSpec) -> str:
    names = [m for m in spec.metrics] + [
        info.name for info in adapter.catalogue() if adapter.watch(spec, info.name) is not None
    ]
    if not names:
        return "declare a regex metric under bench.metrics and name it"
    shown = list(dict.fromkeys(names))
    more = f" and {len(shown) - 8} more" if len(shown) > 8 else ""
    return "readable: " + ", ".join(shown[:8]) + more

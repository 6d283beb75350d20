"""`bench.search` made into each level's spec: the search it belongs to, and the stop rule the
runner applies between its repeats (runner/slo_rule.py).

A search is a matrix axis: each of its values is one cell, a level, and the levels of one
configuration share one server start (plan/sessions.py: bench settings are not the server's).
`bench.repeats: N` is the most repeats a level runs; it stops as soon as its SLO is decided,
from the fewest repeats whose interval can decide it at the search's confidence.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.adapters import bench_adapter
from orchestrator.cell import BenchSpec, Cell, RepeatRule, SloSearch
from orchestrator.errors import InputError
from orchestrator.runner.repeat_rule import fewest_repeats
from orchestrator.runner.slo_rule import DEFAULT_SLO_CONFIDENCE, ERROR_RATE, two_sided


def search_rule(section: Mapping[str, Any], spec: BenchSpec) -> BenchSpec:
    """The spec with its `search` and SLO stop rule, when the rendered `bench:` writes one."""
    given = section.get("search")
    if not isinstance(given, Mapping):
        return spec
    if isinstance(section.get("repeats"), Mapping):
        raise InputError(
            "with search:, repeats is the most repeats a level runs: a count",
            key_path="repeats",
            hint="e.g. repeats: 8 (a level stops once its SLO is decided)",
        )
    confidence = float(given.get("confidence", DEFAULT_SLO_CONFIDENCE))
    slo = {str(m): {str(k): float(v) for k, v in b.items()} for m, b in given["slo"].items()}
    adapter = bench_adapter(spec.adapter)
    known = [info.name for info in adapter.catalogue()] + list(spec.metrics) + [ERROR_RATE]
    for metric in slo:
        if metric == ERROR_RATE and adapter.catalogue() and not adapter.knows("failed"):
            raise InputError(
                f"the {spec.adapter} bench writes no count of failed requests: error_rate "
                "cannot be judged",
                key_path=f"search.slo.{metric}",
                hint="leave error_rate out (vllm.bench_serve writes failed and completed)",
            )
        if adapter.catalogue() and metric not in known:
            # `ttft_p99_ms` is `p99_ttft_ms` with its words in another order
            same_words = [k for k in known if sorted(k.split("_")) == sorted(metric.split("_"))]
            close = same_words or difflib.get_close_matches(metric, known, n=1, cutoff=0.5)
            raise InputError(
                f"the {spec.adapter} bench reports no metric {metric!r}",
                key_path=f"search.slo.{metric}",
                hint=f"did you mean {close[0]!r}?" if close else "see orch metrics ADAPTER",
            )
    least = fewest_repeats(two_sided(confidence))
    if spec.repeats < least:
        raise InputError(
            f"repeats {spec.repeats} can never decide a level: a {confidence:.0%} call on the "
            f"median needs at least {least} repeats",
            key_path="repeats",
            hint=f"repeats: {least} or more, or a lower search.confidence",
        )
    search = SloSearch(axis=str(given["axis"]), slo=slo, confidence=confidence)
    watches = tuple(w for m in slo if (w := adapter.watch(spec, m)) is not None)
    rule = None
    if watches:
        rule = RepeatRule(
            min=least,
            confidence=confidence,
            metrics=tuple(w.metric for w in watches),
            watch=watches,
            chosen="slo",
            slo={w.metric: slo[w.metric] for w in watches},
        )
    return spec.model_copy(update={"search": search, "settle": rule})


def check_search_axis(axis: Any, axes: Sequence[str], values: Sequence[Any]) -> str | None:
    """What is wrong with a search along `axis` given the matrix's axes and that axis's values
    (None when nothing is)."""
    if axis not in axes:
        known = ", ".join(axes) or "none"
        return f"search axis {axis!r} is not a matrix axis (axes: {known})"
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int | float)]
    if bad:
        return f"search axis {axis!r} has a value that is not a number: {bad[0]!r}"
    if len(set(values)) < 2:
        return f"search axis {axis!r} has {len(set(values))} value: a search needs two or more"
    return None


def bounds_text(slo: Mapping[str, Mapping[str, float]]) -> str:
    """`p99_ttft_ms ≤ 500, request_goodput ≥ 2`."""
    return ", ".join(
        f"{m} ≤ {b['max']:g}" if "max" in b else f"{m} ≥ {b['min']:g}" for m, b in slo.items()
    )


def search_lines(cells: Sequence[Cell], servers: Mapping[str, str]) -> list[str]:
    """What `orch plan` says of each SLO search: its levels, SLO, server starts and stop rule
    (`servers`: cell id -> its server session label)."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        search = cell.bench.search
        if search is None:
            continue
        rest = {a: v for a, v in cell.axes.items() if a != search.axis}
        key = (cell.host, repr((search.axis, sorted(rest.items(), key=str))))
        groups.setdefault(key, []).append(cell)
    lines = []
    for (host, _), members in groups.items():
        search = members[0].bench.search
        assert search is not None
        levels = sorted(float(c.axes[search.axis]) for c in members)
        starts = len({servers.get(c.id, c.id) for c in members})
        least = fewest_repeats(two_sided(search.confidence))
        most = members[0].bench.repeats
        where = ", ".join(f"{a}={v}" for a, v in members[0].axes.items() if a != search.axis)
        lines.append(
            f"SLO search on {host}{f' ({where})' if where else ''}: the highest {search.axis} of "
            f"{', '.join(f'{v:g}' for v in levels)} meeting {bounds_text(search.slo)}; "
            f"{starts} server start(s); each level {least}..{most} repeats, stopped once "
            f"every bound holds or one fails at {search.confidence:.0%} (one-sided)"
        )
    return lines

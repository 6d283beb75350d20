"""The engine's own /metrics per measured repeat: the samples the runner kept
(bench/<n>/engine_metrics.jsonl, Prometheus text) parsed with prometheus_client and summarised:
KV-cache use and running/waiting requests (mean and max over the samples), the prefix-cache hit
rate, speculative acceptance and preemptions (counter deltas over the repeat, or the engine's own
gauges where it keeps no counter). What an engine does not serve is absent with the reason,
never a zero (adapters/engine_families.py names the families).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.adapters.engine_families import ENGINE_FAMILIES, METRIC_ROLES
from orchestrator.analyze.metrics import finite_number
from orchestrator.results.layout import ENGINE_METRICS_JSONL
from orchestrator.results.records import CellRecord

# roles read as one engine-wide value by averaging their label sets (the rest are summed)
_AVERAGED = frozenset({"kv_cache_usage", "spec_accept_length", "spec_accept_rate"})
_SPEC_ROLES = frozenset({"spec_accept_length", "spec_accept_rate"})
_SGLANG_404 = "SGLang serves /metrics with --enable-metrics"
# fewer scrapes than this over a repeat's load: a gauge's max can miss the load entirely
_MIN_SCRAPES_IN_LOAD = 3
_STEPS = (0.5, 0.2, 0.1, 0.05)  # the step suggested instead: the coarsest that samples enough


@dataclass
class Sample:
    """One scrape: when, and each sample name's values (one per label set), or its error."""

    t: float
    values: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None


def parse_exposition(text: str) -> dict[str, list[float]]:
    """{sample name: [value per label set]} of Prometheus text (prometheus_client's parser;
    `_created` samples and NaN left out). Raises ValueError on text it cannot parse."""
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created") or math.isnan(sample.value):
                continue
            out.setdefault(sample.name, []).append(float(sample.value))
    return out


def read_samples(path: Path) -> list[Sample]:
    """The samples of one repeat's engine_metrics.jsonl, in order; a line that cannot be read
    or parsed is a sample with its error."""
    samples = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            doc = json.loads(line)
            t = float(doc["t"])
        except (ValueError, KeyError, TypeError):
            continue
        if doc.get("error") is not None:
            samples.append(Sample(t, error=str(doc["error"])))
            continue
        try:
            samples.append(Sample(t, parse_exposition(str(doc.get("text") or ""))))
        except ValueError as exc:
            samples.append(Sample(t, error=f"unparsable: {exc}"))
    return samples


def _role_series(samples: Sequence[Sample], engine: str, role: str) -> list[float]:
    """One engine-wide value per sample that carries the role's family."""
    family, kind = ENGINE_FAMILIES[engine][role]
    name = family + "_total" if kind == "counter" else family
    series = []
    for sample in samples:
        values = sample.values.get(name)
        if values:
            series.append(sum(values) / len(values) if role in _AVERAGED else sum(values))
    return series


def _delta(series: Sequence[float]) -> float:
    # a counter that went down was reset (a restarted engine): what it counted since
    return series[-1] - series[0] if series[-1] >= series[0] else series[-1]


def summarize_repeat(
    samples: Sequence[Sample], engine: str
) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, absent) of one repeat: each engine_* metric of the catalogue, or why it is
    absent (the engine serves no such family, no lookup happened, every scrape failed)."""
    good = [s for s in samples if s.error is None]
    roles = ENGINE_FAMILIES.get(engine, {})
    if not good:
        errors = sorted({str(s.error) for s in samples if s.error}) or ["no sample"]
        why = "/metrics: " + "; ".join(errors)
        if engine == "sglang" and any("404" in e for e in errors):
            why += f" ({_SGLANG_404})"
        return {}, dict.fromkeys(METRIC_ROLES, why)
    series = {role: _role_series(good, engine, role) for role in roles}
    metrics: dict[str, float] = {}
    absent: dict[str, str] = {}
    for metric, alternatives in METRIC_ROLES.items():
        usable = [a for a in alternatives if all(r in roles for r in a)]
        chosen = next((a for a in usable if all(series[r] for r in a)), None)
        if chosen is None:
            absent[metric] = _absent_reason(engine, usable)
            continue
        value, why = _value(metric, chosen, series)
        if value is None:
            absent[metric] = why
        else:
            metrics[metric] = value
    return metrics, absent


def _absent_reason(engine: str, usable: list[tuple[str, ...]]) -> str:
    if not usable:
        return f"{engine} has no such family"
    families = [ENGINE_FAMILIES[engine][r][0] for r in usable[0]]
    if any(r.startswith("spec_") for r in usable[0]):  # one line for every acceptance metric
        return f"{families[0]} not on /metrics (speculative decoding off)"
    return " / ".join(families) + " not on /metrics"


def _value(
    metric: str, roles: tuple[str, ...], series: Mapping[str, list[float]]
) -> tuple[float | None, str]:
    first = series[roles[0]]
    if metric.endswith("_mean"):
        return sum(first) / len(first), ""
    if metric.endswith("_max"):
        return max(first), ""
    if roles[0] in _SPEC_ROLES:  # SGLang's gauge: 0 while no speculative step ran
        live = [v for v in first if v > 0]
        if not live:
            return None, "0 throughout (speculative decoding off)"
        return sum(live) / len(live), ""
    if len(roles) == 1:  # a counter's delta
        return _delta(first), ""
    num, den = _delta(first), _delta(series[roles[1]])
    if den <= 0:
        return None, "no " + ("draft tokens" if "spec" in metric else "prefix-cache lookups")
    if metric == "engine_spec_accept_length":
        return 1.0 + num / den, ""  # the bonus token, as vLLM's own mean acceptance length
    return num / den, ""


@dataclass(frozen=True)
class ScrapeSpan:
    """One repeat's load against its scrapes: the bench's `duration`, the interval asked for,
    and the longest step between two scrapes' starts (longer where the server answered late)."""

    n: int
    load_s: float
    interval_s: float
    longest_step_s: float

    @property
    def fits_between_two(self) -> bool:
        """The whole load fits between two scrapes as they came."""
        return self.load_s <= self.longest_step_s

    @property
    def too_coarse(self) -> bool:
        """Fewer than three scrapes fit the load, or the whole load fits between two."""
        return self.load_s < _MIN_SCRAPES_IN_LOAD * self.interval_s or self.fits_between_two

    @property
    def stalled(self) -> bool:
        """The load fits behind a step far past the interval: a scrape answered late."""
        return self.fits_between_two and self.longest_step_s > 2 * self.interval_s


def coarse_sampling_note(spans: Sequence[ScrapeSpan]) -> str | None:
    """A sentence for the repeats whose load the scrapes may have missed (see
    `ScrapeSpan.too_coarse`), with what would sample it; None when there are none."""
    short = [s for s in spans if s.too_coarse]
    if not short:
        return None
    durations = sorted(s.load_s for s in short)
    step = min(s.interval_s for s in short)
    finer = next((s for s in _STEPS if s * _MIN_SCRAPES_IN_LOAD <= durations[0]), _STEPS[-1])
    loads = _seconds(durations[0]) + (f"-{_seconds(durations[-1])}" if len(durations) > 1 else "")
    repeats = ", ".join(str(s.n) for s in short)
    stalled = [s for s in short if s.stalled]
    late = (
        f" (up to {_seconds(max(s.longest_step_s for s in stalled))} s apart: the server "
        "answered /metrics late under the load)"
        if stalled
        else ""
    )
    fix = (
        f"set engine_metrics: {{interval: {finer:g}}}"
        if finer < step and not stalled
        else "a longer load (more requests) is sampled more often"
    )
    return (
        f"engine gauges sampled every {step:g} s{late} over a load of {loads} s "
        f"(repeats {repeats}): the running/waiting and KV-use maxima may miss it; {fix}"
    )


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def add_engine_metrics(
    cell_dir: Path,
    engine: str | None,
    repeats: list[dict[str, Any]],
    sources: dict[str, Any],
) -> dict[str, Any]:
    """Put each measured repeat's engine_* metrics into `repeats` beside the bench's; returns
    metrics.json's `engine_metrics` block (engine, samples and errors per repeat, what is
    absent and why), empty when the cell scraped nothing."""
    by_n = {int(r["n"]): r for r in repeats}
    per_repeat: dict[str, dict[str, Any]] = {}
    absent: dict[str, str] = {}
    spans: list[ScrapeSpan] = []
    for record in CellRecord(cell_dir).repeats:
        path = record.path / ENGINE_METRICS_JSONL
        if not path.is_file():
            continue
        try:
            samples = read_samples(path)
        except (OSError, UnicodeDecodeError) as exc:
            per_repeat[str(record.n)] = {"samples": 0, "error": str(exc)}
            continue
        spans.extend(_span(record.n, by_n.get(record.n), record.exit, samples))
        errors = [s.error for s in samples if s.error]
        per_repeat[str(record.n)] = {"samples": len(samples), "errors": len(errors)}
        if errors:
            per_repeat[str(record.n)]["last_error"] = errors[-1]
        if engine not in ENGINE_FAMILIES:
            continue  # kept whole, not summarised: no family names known
        values, missing = summarize_repeat(samples, engine)
        for metric, why in missing.items():
            absent.setdefault(metric, why)
        if record.n in by_n:
            by_n[record.n].update(values)
            sources.update(dict.fromkeys(values, f"bench/<n>/{ENGINE_METRICS_JSONL}"))
    if not per_repeat:
        return {}
    measured = {m for r in repeats for m in r if m.startswith("engine_")}
    block: dict[str, Any] = {
        "engine": engine,
        "file": f"bench/<n>/{ENGINE_METRICS_JSONL}",
        "repeats": per_repeat,
        "absent": {m: why for m, why in absent.items() if m not in measured},
    }
    note = coarse_sampling_note(spans) if engine in ENGINE_FAMILIES else None  # no maxima else
    if note:
        block["note"] = note
    return block


def _span(
    n: int,
    row: Mapping[str, Any] | None,
    exit_doc: Mapping[str, Any] | None,
    samples: Sequence[Sample],
) -> list[ScrapeSpan]:
    """The repeat's span where its load's duration and its scrape interval are recorded."""
    scraped = (exit_doc or {}).get("engine_metrics")
    interval = finite_number(scraped.get("interval_s")) if isinstance(scraped, dict) else None
    duration = finite_number((row or {}).get("duration"))
    if interval is None or duration is None or interval <= 0 or duration <= 0:
        return []
    times = sorted(s.t for s in samples)
    longest = max((b - a for a, b in pairwise(times)), default=0.0)
    return [ScrapeSpan(n, duration, interval, longest)]

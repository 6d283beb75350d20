"""GuideLLM's benchmark client (`guidellm run`, 0.8.x): the playbook's `args` as its registry
flags (`--profile kind=concurrent,streams=4` is `profile: {kind: concurrent, streams: 4}`), and
its benchmarks JSON read field for field into orch's metric names.

GuideLLM 0.8 writes one report per run (`--output kind=json,path=F`): `benchmarks[]`, one per
profile strategy, each with `metrics.<name>.successful.{mean,median,std_dev,percentiles}` and
`scheduler_metrics.measure_{start,end}_time`. Units as it writes them: latencies in ms except
`request_latency` (s), rates per second (docs/FACTS.md, "GuideLLM and AIPerf").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.adapters.base import BenchAdapter, MetricInfo, RepeatResult
from orchestrator.adapters.flags import ListStyle, flags_to_argv, normalize_args
from orchestrator.adapters.outputs import finite_float, json_report_repeat
from orchestrator.adapters.sections import aimed_url, as_mapping, common_bench_fields
from orchestrator.adapters.sglang import launcher_argv
from orchestrator.adapters.sglang_bench import apply_time_scale
from orchestrator.cell import BenchSpec, Cell, ServerSpec
from orchestrator.errors import InputError

RESULT_FILE = "benchmarks.json"
VERSIONS = ("0.8",)
# Registry flags a run may give several times (click `multiple=True`): one per list item.
LIST_STYLES: dict[str, ListStyle] = {
    "data": "repeat",
    "constraint": "repeat",
    "output": "repeat",
    "data-preprocessor": "repeat",
    "label": "repeat",
}
# (GuideLLM's metric, orch's latency name, factor to ms)
_LATENCIES = (
    ("time_to_first_token_ms", "ttft", 1.0),
    ("time_per_output_token_ms", "tpot", 1.0),
    ("inter_token_latency_ms", "itl", 1.0),
    ("request_latency", "e2e_latency", 1000.0),  # GuideLLM writes seconds
)
# orch's stat name -> where it sits in a DistributionSummary
_STATS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mean", ("mean",)),
    ("median", ("median",)),
    ("std", ("std_dev",)),
    ("p90", ("percentiles", "p90")),
    ("p95", ("percentiles", "p95")),
    ("p99", ("percentiles", "p99")),
)
# orch name -> (GuideLLM metric, its successful-requests statistic)
_SCALARS: dict[str, tuple[str, tuple[str, ...]]] = {
    "request_throughput": ("requests_per_second", ("mean",)),
    "output_throughput": ("output_tokens_per_second", ("mean",)),
    "input_throughput": ("prompt_tokens_per_second", ("mean",)),
    "total_throughput": ("tokens_per_second", ("mean",)),
    "total_input_tokens": ("prompt_token_count", ("total_sum",)),
    "total_output_tokens": ("output_token_count", ("total_sum",)),
    "mean_request_concurrency": ("request_concurrency", ("mean",)),
}
_TOTALS = {"completed": "successful", "failed": "errored", "incomplete": "incomplete"}


def _catalogue() -> tuple[MetricInfo, ...]:
    src = f"{RESULT_FILE} benchmarks[].metrics"
    infos = [
        MetricInfo("request_throughput", "req/s", "higher", src + ".requests_per_second", VERSIONS),
        MetricInfo(
            "output_throughput", "tok/s", "higher", src + ".output_tokens_per_second", VERSIONS
        ),
        MetricInfo(
            "input_throughput", "tok/s", "higher", src + ".prompt_tokens_per_second", VERSIONS
        ),
        MetricInfo("total_throughput", "tok/s", "higher", src + ".tokens_per_second", VERSIONS),
        MetricInfo("completed", "requests", "higher", src + ".request_totals", VERSIONS),
        MetricInfo("failed", "requests", "lower", src + ".request_totals.errored", VERSIONS),
        MetricInfo("incomplete", "requests", "lower", src + ".request_totals", VERSIONS),
        MetricInfo(
            "error_rate", "fraction", "lower", src + ".request_totals errored / total", VERSIONS
        ),
        MetricInfo(
            "duration", "s", "lower", f"{RESULT_FILE} scheduler_metrics.measure_*_time", VERSIONS
        ),
        MetricInfo(
            "total_input_tokens", "tokens", "neither", src + ".prompt_token_count", VERSIONS
        ),
        MetricInfo(
            "total_output_tokens", "tokens", "neither", src + ".output_token_count", VERSIONS
        ),
        MetricInfo(
            "mean_request_concurrency",
            "requests",
            "neither",
            src + ".request_concurrency",
            VERSIONS,
        ),
    ]
    for field, latency, factor in _LATENCIES:
        where = f"{src}.{field}" + (" × 1000" if factor != 1.0 else "")
        for stat, _ in _STATS:
            infos.append(MetricInfo(f"{stat}_{latency}_ms", "ms", "lower", where, VERSIONS))
    return tuple(infos)


CATALOGUE = _catalogue()
# per turn of a multi-turn workload (`metrics.turns[]`): `<name>.turn<k>`, k from 0
_TURN_LATENCIES = tuple(item for item in _LATENCIES if item[1] != "tpot")
_TURN_STATS = ("mean", "median", "p99")
TURN_NAMES = frozenset(
    [f"{stat}_{latency}_ms" for _, latency, _ in _TURN_LATENCIES for stat in _TURN_STATS]
    + ["completed"]
)
_SUFFIX = re.compile(r"b\d+|(?:b\d+\.)?turn\d+")


def _dig(data: Any, path: tuple[str, ...]) -> float | None:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return finite_float(data)


def benchmark_metrics(benchmark: Mapping[str, Any]) -> dict[str, float]:
    """orch metrics from one GuideLLM benchmark (an item of `benchmarks[]`): the successful
    requests' statistics, their counts, and the measured window's duration."""
    out: dict[str, float] = {}
    metrics = benchmark.get("metrics")
    if not isinstance(metrics, Mapping):
        return out
    for name, (field, path) in _SCALARS.items():
        value = _dig(metrics, (field, "successful", *path))
        if value is not None:
            out[name] = value
    for name, status in _TOTALS.items():
        value = _dig(metrics, ("request_totals", status))
        if value is not None:
            out[name] = value
    total = _dig(metrics, ("request_totals", "total"))
    if total and "failed" in out:
        out["error_rate"] = out["failed"] / total
    for field, latency, factor in _LATENCIES:
        for stat, path in _STATS:
            value = _dig(metrics, (field, "successful", *path))
            if value is not None:
                out[f"{stat}_{latency}_ms"] = value * factor
    out.update(turn_metrics(metrics))
    start = _dig(benchmark, ("scheduler_metrics", "measure_start_time"))
    end = _dig(benchmark, ("scheduler_metrics", "measure_end_time"))
    if start is not None and end is not None and end >= start:
        out["duration"] = end - start
    return out


def turn_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """`<name>.turn<k>` for each turn of a multi-turn workload (GuideLLM writes `turns: null`
    for a single-turn one): requests completed, and TTFT, ITL and latency by turn."""
    turns = metrics.get("turns")
    out: dict[str, float] = {}
    if not isinstance(turns, list):
        return out
    stats = dict(_STATS)
    for turn in turns:
        if not isinstance(turn, Mapping) or not isinstance(turn.get("turn_index"), int):
            continue
        suffix = f".turn{turn['turn_index']}"
        done = _dig(turn, ("request_totals", "successful"))
        if done is not None:
            out["completed" + suffix] = done
        for field, latency, factor in _TURN_LATENCIES:
            for stat in _TURN_STATS:
                value = _dig(turn, (field, "successful", *stats[stat]))
                if value is not None:
                    out[f"{stat}_{latency}_ms{suffix}"] = value * factor
    return out


def report_metrics(report: Mapping[str, Any]) -> tuple[dict[str, float], list[str]]:
    """Every benchmark of a report: plain names for one, `<name>.b<i>` (1-based, in the
    report's order) for several (a sweep, or several streams or rates), with notes."""
    benchmarks = report.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        return {}, [f"{RESULT_FILE} holds no benchmarks"]
    notes: list[str] = []
    out: dict[str, float] = {}
    for i, bench in enumerate(benchmarks, 1):
        if not isinstance(bench, Mapping):
            notes.append(f"benchmarks[{i - 1}] is not an object")
            continue
        suffix = "" if len(benchmarks) == 1 else f".b{i}"
        lost = unrecorded_note(bench)
        if lost:
            notes.append(lost if not suffix else f"{lost} (b{i})")
        for key, value in benchmark_metrics(bench).items():
            base, dot, turn = key.partition(".")
            out[base + suffix + dot + turn] = value  # `<name>.b<i>.turn<k>`
        if suffix:
            strategy = _dig_text(bench, ("config", "strategy", "type_"))
            notes.append(f"b{i}: benchmark {i} of {len(benchmarks)} ({strategy or '?'} strategy)")
    return out, notes


def unrecorded_note(benchmark: Mapping[str, Any]) -> str | None:
    """A flag where GuideLLM created more requests than its statistics count: 0.8 can close its
    measured window before its last requests end (or with one in flight), and says nothing."""
    created = _dig(benchmark, ("scheduler_state", "created_requests"))
    counted = _dig(benchmark, ("metrics", "request_totals", "total"))  # error_rate's denominator
    if created is None or counted is None or created <= counted:
        return None
    missing = int(created - counted)
    return (
        f"flag: GuideLLM created {int(created)} requests, its statistics count {int(counted)}: "
        f"{missing} ended outside its measured window or {'was' if missing == 1 else 'were'} "
        "still in flight"
    )


def _dig_text(data: Any, path: tuple[str, ...]) -> str | None:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data if isinstance(data, str) else None


def _time_kind(metric: str) -> str | None:
    base = metric.split(".", 1)[0]
    if base.endswith("_ms") or base == "duration":
        return "time"
    if base.endswith("_throughput"):
        return "rate"
    return None


class GuidellmBench(BenchAdapter):
    """`python -m guidellm run --backend kind=openai_http,target=URL ... --output
    kind=json,path=benchmarks.json`: `args.backend` (a mapping) is completed with the server's
    URL as `target`; list-valued registry flags (`data`, `constraint`, `output`) repeat."""

    name = "guidellm"

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """GuideLLM's benchmark fields under orch's names (several benchmarks: `.b<i>`)."""
        return CATALOGUE

    def knows(self, name: str) -> bool:
        """A catalogue name, alone or with a benchmark suffix `.b<i>`, or a per-turn name with
        `.turn<k>` (`.b<i>.turn<k>` with several benchmarks)."""
        base, _, suffix = name.partition(".")
        if not super().knows(base) or (suffix and _SUFFIX.fullmatch(suffix) is None):
            return False
        return "turn" not in suffix or base in TURN_NAMES

    def sends(self, spec: BenchSpec) -> str:
        """What `args.data` and `args.constraint` say, in GuideLLM's own words."""
        data = json.dumps(spec.args.get("data"), separators=(",", ":"))
        limits = spec.args.get("constraint")
        if not limits:
            return f"data {data}"
        return f"data {data} until {json.dumps(limits, separators=(',', ':'))}"

    def build(self, section: Mapping[str, Any], server: ServerSpec | None) -> BenchSpec:
        """argv: the launcher, the backend aimed at the server, the flags, a JSON output."""
        args = normalize_args(as_mapping(section.get("args"), "args"))
        argv = launcher_argv(section, "guidellm")
        if section.get("launcher") is None:
            argv.append("run")  # a launcher names its own subcommand
        backend = args.get("backend")
        if backend is None:
            backend = {"kind": "openai_http"}
        if not isinstance(backend, Mapping):
            raise InputError(
                "guidellm's backend is a mapping of its fields",
                key_path="args.backend",
                hint="write backend: {kind: openai_http, request_format: /v1/completions}",
            )
        backend = dict(backend)
        if backend.get("target") is None:
            backend["target"] = aimed_url(server, "guidellm", "args.backend.target")
        # the args completed are what argv renders, so investigate can swap a setting in them
        flags = {**args, "backend": backend}
        outputs = args.get("output")
        result_file = RESULT_FILE
        if outputs is None:
            flags["output"] = [{"kind": "json", "path": RESULT_FILE}]
        else:
            result_file = _json_output(outputs)
        flags.setdefault("disable-console-interactive", True)  # no progress redraws in stdout
        argv += flags_to_argv(flags, list_styles=LIST_STYLES)
        return BenchSpec(
            adapter=self.name,
            argv=tuple(argv),
            result_file=result_file,
            args=flags,
            **common_bench_fields(section),
        )

    def parse_repeat_with_sources(self, repeat_dir: Path, cell: Cell) -> RepeatResult:
        """The benchmarks JSON's statistics of the successful requests, per benchmark."""
        result = json_report_repeat(repeat_dir, cell, RESULT_FILE, report_metrics)
        apply_time_scale(repeat_dir, cell, result, _time_kind)
        return result


def _json_output(outputs: Any) -> str:
    """The path of the one JSON output among `args.output`, which orch reads."""
    items = outputs if isinstance(outputs, list) else [outputs]
    paths = [
        str(item.get("path") or RESULT_FILE)
        for item in items
        if isinstance(item, Mapping) and item.get("kind") == "json"
    ]
    if len(paths) != 1:
        raise InputError(
            "guidellm's outputs must hold exactly one json output (orch reads it)",
            key_path="args.output",
            hint=f"add {{kind: json, path: {RESULT_FILE}}}",
        )
    return paths[0]

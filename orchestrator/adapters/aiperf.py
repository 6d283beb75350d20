"""AIPerf's benchmark client (`aiperf profile`, 0.13.x): the playbook's `args` as its flags, and
its profile export JSON (`profile_export_aiperf.json`) read field for field into orch's names.

Each metric of the export is `{unit, avg, p1..p99, min, max, std, count, sum}` (counts and
rates carry `avg` alone) and says its own unit, so values are converted by the unit written
beside them and a unit orch does not know is left out with a note (docs/FACTS.md, "GuideLLM
and AIPerf"). AIPerf's `inter_token_latency` is per request, (latency − TTFT) / (output tokens
− 1): what vLLM and SGLang call TPOT, so it is orch's `tpot`; its `inter_chunk_latency`, the gap
between streamed chunks, is orch's `itl`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.adapters.base import BenchAdapter, MetricInfo, RepeatResult
from orchestrator.adapters.flags import flags_to_argv, normalize_args
from orchestrator.adapters.outputs import finite_float, json_report_repeat
from orchestrator.adapters.sections import aimed_url, as_mapping, common_bench_fields
from orchestrator.adapters.sglang import launcher_argv
from orchestrator.adapters.sglang_bench import apply_time_scale
from orchestrator.cell import BenchSpec, Cell, ServerSpec

RESULT_FILE = "profile_export_aiperf.json"
VERSIONS = ("0.13",)
# orch's unit -> {AIPerf's unit: factor to orch's}
_UNITS: dict[str, dict[str, float]] = {
    "ms": {"ms": 1.0, "sec": 1000.0, "s": 1000.0, "ns": 1e-6, "us": 1e-3},
    "s": {"sec": 1.0, "s": 1.0, "ms": 1e-3},
    "req/s": {"requests/sec": 1.0},
    "tok/s": {"tokens/sec": 1.0},
    "tok/s/user": {"tokens/sec/user": 1.0},
    "requests": {"requests": 1.0},
    "tokens": {"tokens": 1.0},
    "fraction": {"%": 0.01},
}
# orch name -> (AIPerf tag, orch unit, better); each read from the tag's `avg`
_SCALARS: dict[str, tuple[str, str, Any]] = {
    "request_throughput": ("request_throughput", "req/s", "higher"),
    "output_throughput": ("output_token_throughput", "tok/s", "higher"),
    "input_throughput": ("input_token_throughput", "tok/s", "higher"),
    "total_throughput": ("total_token_throughput", "tok/s", "higher"),
    "output_throughput_per_user": ("output_token_throughput_per_user", "tok/s/user", "higher"),
    "completed": ("completed_request_count", "requests", "higher"),
    "failed": ("error_request_count", "requests", "lower"),
    "error_rate": ("request_error_rate", "fraction", "lower"),
    "duration": ("benchmark_duration", "s", "lower"),
    "total_input_tokens": ("total_isl", "tokens", "neither"),
    "total_output_tokens": ("total_osl", "tokens", "neither"),
    "mean_request_concurrency": ("effective_concurrency", "requests", "neither"),
}
_LATENCIES = (
    ("time_to_first_token", "ttft"),
    ("inter_token_latency", "tpot"),
    ("inter_chunk_latency", "itl"),
    ("request_latency", "e2e_latency"),
)
_STATS: tuple[tuple[str, str], ...] = (("mean", "avg"), ("median", "p50"), ("std", "std"))
_STATS += (("p90", "p90"), ("p95", "p95"), ("p99", "p99"))


def _catalogue() -> tuple[MetricInfo, ...]:
    infos = [
        MetricInfo(name, unit, better, f"{RESULT_FILE} {tag}.avg", VERSIONS)
        for name, (tag, unit, better) in _SCALARS.items()
    ]
    for tag, latency in _LATENCIES:
        for stat, key in _STATS:
            src = f"{RESULT_FILE} {tag}.{key}"
            infos.append(MetricInfo(f"{stat}_{latency}_ms", "ms", "lower", src, VERSIONS))
    return tuple(infos)


CATALOGUE = _catalogue()


def _value(entry: Any, key: str, unit: str, tag: str, notes: list[str]) -> float | None:
    """`entry[key]` in orch's `unit`, converted by the unit AIPerf wrote beside it."""
    if not isinstance(entry, Mapping):
        return None
    value = finite_float(entry.get(key))
    if value is None:
        return None
    written = str(entry.get("unit", ""))
    factor = _UNITS[unit].get(written)
    if factor is None:
        notes.append(f"{tag}: unit {written!r} is not {unit}: left out")
        return None
    return value * factor


def export_metrics(data: Mapping[str, Any]) -> tuple[dict[str, float], list[str]]:
    """orch metrics from one AIPerf profile export, with a note per value left out."""
    out: dict[str, float] = {}
    notes: list[str] = []
    for name, (tag, unit, _) in _SCALARS.items():
        value = _value(data.get(tag), "avg", unit, tag, notes)
        if value is not None:
            out[name] = value
    if "completed" in out and "failed" not in out and out.get("error_rate") == 0:
        out["failed"] = 0.0  # AIPerf writes error_request_count only when a request failed
    for tag, latency in _LATENCIES:
        for stat, key in _STATS:
            value = _value(data.get(tag), key, "ms", tag, notes)
            if value is not None:
                out[f"{stat}_{latency}_ms"] = value
    if data.get("was_cancelled") is True or data.get("is_complete") is False:
        notes.append("flag: AIPerf says the run was cancelled or is incomplete")
    return out, sorted(set(notes))


def _time_kind(metric: str) -> str | None:
    if metric.endswith("_ms") or metric == "duration":
        return "time"
    if "_throughput" in metric:
        return "rate"
    return None


class AiperfBench(BenchAdapter):
    """`python -m aiperf profile --url URL ... --output-artifact-dir . --ui-type none`: each
    run writes its artifacts into its own repeat directory."""

    name = "aiperf"
    seed_flag = "--random-seed"  # seeds its synthetic prompts (docs/FACTS.md)

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """AIPerf's export fields under orch's names."""
        return CATALOGUE

    def sends(self, spec: BenchSpec) -> str:
        """`N requests` of its synthetic prompts, or what its input file holds."""
        if spec.args.get("input-file") is not None:
            return f"the requests of {spec.args['input-file']}"
        count = spec.args.get("request-count")
        return f"{count} synthetic requests" if count else "synthetic requests (its default count)"

    def build(self, section: Mapping[str, Any], server: ServerSpec | None) -> BenchSpec:
        """argv with the server's URL, the artifact folder and a quiet UI unless `args` says."""
        args = normalize_args(as_mapping(section.get("args"), "args"))
        argv = launcher_argv(section, "aiperf")
        if section.get("launcher") is None:
            argv.append("profile")
        extra: list[str] = []
        if args.get("url") is None:
            extra += ["--url", aimed_url(server, "aiperf", "args.url")]
        folder = str(args.get("output-artifact-dir") or ".")
        if args.get("output-artifact-dir") is None:
            extra += ["--output-artifact-dir", "."]
        if args.get("ui-type") is None:
            extra += ["--ui-type", "none"]  # the dashboard redraws a terminal orch records
        prefix = args.get("profile-export-prefix")
        name = f"{prefix}.json" if prefix else RESULT_FILE  # with a prefix: `<prefix>.json`
        argv += extra + flags_to_argv(args)
        return BenchSpec(
            adapter=self.name,
            argv=tuple(argv),
            result_file=name if folder in (".", "./") else f"{folder}/{name}",
            args=args,
            **common_bench_fields(section),
        )

    def parse_repeat_with_sources(self, repeat_dir: Path, cell: Cell) -> RepeatResult:
        """The profile export's statistics, converted by the units it writes."""
        result = json_report_repeat(repeat_dir, cell, RESULT_FILE, export_metrics)
        apply_time_scale(repeat_dir, cell, result, _time_kind)
        return result

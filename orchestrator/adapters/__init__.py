"""Adapters: how a serving engine or benchmark client becomes argv, readiness and metrics.

`server_adapter(name)` and `bench_adapter(name)` are the registry; an unknown name is an
InputError that suggests the closest known one.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import TypeVar

from orchestrator.adapters.aiperf import AiperfBench
from orchestrator.adapters.base import BenchAdapter, MetricInfo, RepeatResult, ServerAdapter
from orchestrator.adapters.engine_families import ENGINE_CATALOGUE
from orchestrator.adapters.generic import GenericBench, GenericServer
from orchestrator.adapters.guidellm import GuidellmBench
from orchestrator.adapters.sglang import SglangServer
from orchestrator.adapters.sglang_bench import SglangBenchOneBatchServer, SglangBenchServing
from orchestrator.adapters.vllm import VllmBenchServe, VllmServer
from orchestrator.errors import InputError
from orchestrator.results.layout import TELEMETRY_CSV

__all__ = [
    "BENCH_ADAPTERS",
    "COST_CATALOGUE",
    "COST_METRIC",
    "ENGINE_CATALOGUE",
    "SERVER_ADAPTERS",
    "BenchAdapter",
    "MetricInfo",
    "RepeatResult",
    "ServerAdapter",
    "bench_adapter",
    "server_adapter",
]

T = TypeVar("T")

SERVER_ADAPTERS: dict[str, Callable[[], ServerAdapter]] = {
    "generic": GenericServer,
    "sglang": SglangServer,
    "vllm": VllmServer,
}

BENCH_ADAPTERS: dict[str, Callable[[], BenchAdapter]] = {
    "generic": GenericBench,
    "sglang.bench_serving": SglangBenchServing,
    "sglang.bench_one_batch_server": SglangBenchOneBatchServer,
    "vllm.bench_serve": VllmBenchServe,
    "guidellm": GuidellmBench,
    "aiperf": AiperfBench,
}


def _lookup(kind: str, name: str, table: dict[str, Callable[[], T]]) -> T:
    factory = table.get(name)
    if factory is None:
        close = difflib.get_close_matches(str(name), list(table), n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(sorted(table))
        raise InputError(f"unknown {kind} adapter {name!r}", key_path="adapter", hint=hint)
    return factory()


def server_adapter(name: str) -> ServerAdapter:
    """The server adapter called `name` (sglang, vllm, generic)."""
    return _lookup("server", name, SERVER_ADAPTERS)


def bench_adapter(name: str) -> BenchAdapter:
    """The bench adapter called `name` (sglang.bench_serving, vllm.bench_serve, generic, ...)."""
    return _lookup("bench", name, BENCH_ADAPTERS)


# --- metric catalogues --------------------------------------------------------------------------

_TELEMETRY = TELEMETRY_CSV
# Every adapter's repeats get these from GPU telemetry (analyze/energy.py); `throttle_s.<reason>`
# per reason on top.
TELEMETRY_CATALOGUE = (
    MetricInfo("energy_j", "J", "lower", _TELEMETRY + " (all GPUs)"),
    MetricInfo("power_mean_w", "W", "neither", _TELEMETRY + " (per GPU)"),
    MetricInfo("sm_clock_mean_mhz", "MHz", "higher", _TELEMETRY),
    MetricInfo("sm_clock_min_mhz", "MHz", "higher", _TELEMETRY),
    MetricInfo("temperature_max_c", "C", "lower", _TELEMETRY),
    MetricInfo("utilization_mean_pct", "%", "neither", _TELEMETRY),
    MetricInfo("throttle_s", "s", "lower", _TELEMETRY + " (any reason)"),
    MetricInfo("telemetry_coverage", "fraction", "higher", _TELEMETRY),
    MetricInfo("joules_per_output_token", "J/tok", "lower", _TELEMETRY + " and the bench"),
    MetricInfo("output_tokens_per_joule", "tok/J", "higher", _TELEMETRY + " and the bench"),
)


# Every adapter's repeats get these, derived from its own metrics by analyze/cost.py: per GPU
# (the GPUs the cell uses), per user (InferenceX's interactivity) and the price per token.
COST_METRIC = "usd_per_million_output_tokens"
COST_CATALOGUE = (
    MetricInfo(
        "output_throughput_per_gpu", "tok/s/GPU", "higher", "output_throughput / the cell's GPUs"
    ),
    MetricInfo(
        "total_throughput_per_gpu", "tok/s/GPU", "higher", "total_throughput / the cell's GPUs"
    ),
    MetricInfo("interactivity", "tok/s/user", "higher", "1000 / median_tpot_ms (per user)"),
    MetricInfo(
        COST_METRIC,
        "$/Mtok",
        "lower",
        "orch_gpu_hour_usd x the cell's GPUs over the bench's measured duration, per million "
        "output tokens: price x GPUs x 1e6 / (output_throughput x 3600)",
    ),
)


def _telemetry_knows(name: str) -> bool:
    derived = (*TELEMETRY_CATALOGUE, *COST_CATALOGUE, *ENGINE_CATALOGUE)
    return any(i.name == name for i in derived) or name.startswith("throttle_s.")


def metric_unit(name: str, bench: str | None, server: str | None = None) -> str | None:
    """The unit of metric `name` of a cell with these adapters; None when no catalogue says
    (a regex metric, a generic bench's field)."""
    base = name.split(".", 1)[0]
    tables: list[Iterable[MetricInfo]] = [TELEMETRY_CATALOGUE, COST_CATALOGUE, ENGINE_CATALOGUE]
    if bench in BENCH_ADAPTERS:
        tables.insert(0, bench_adapter(bench).catalogue())
    if server in SERVER_ADAPTERS:
        tables.append(server_adapter(server).catalogue())
    for table in tables:
        for info in table:
            if info.name in (name, base):
                return info.unit
    return "s" if name.startswith("throttle_s.") else None


def unknown_metric_hint(bench: str, name: str, declared: Iterable[str] = ()) -> str | None:
    """None when bench adapter `bench` can report metric `name` (or it is one of the `declared`
    regex metrics, or the adapter is open-ended); else a hint with the nearest known name."""
    adapter = bench_adapter(bench)
    declared = set(declared)
    if adapter.open_ended or name in declared or adapter.knows(name) or _telemetry_knows(name):
        return None
    if name in adapter.renamed:
        return f"renamed: write {adapter.renamed[name]}"
    servers = [
        s for s in SERVER_ADAPTERS if any(i.name == name for i in server_adapter(s).catalogue())
    ]
    if servers:
        return (
            f"{name} is a {servers[0]} server metric (metrics.json's server block): expect: "
            "bounds the bench's metrics"
        )
    known = [
        i.name
        for i in (*adapter.catalogue(), *TELEMETRY_CATALOGUE, *COST_CATALOGUE, *ENGINE_CATALOGUE)
    ]
    known += sorted(declared)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    listing = f"see `orch metrics {bench}`"
    return f"did you mean {close[0]!r}? {listing}" if close else listing

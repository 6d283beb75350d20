"""The engines' own Prometheus families orch reads from /metrics, per engine, and the metrics
each measured repeat gets from them (docs/FACTS.md, "Engine /metrics families").

Each engine maps a role (what orch summarises) to the family name as the engine's source
declares it; a counter is exposed as `FAMILY_total`. A role an engine has no family for is
absent: the summary says so rather than write a zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.adapters.base import MetricInfo
from orchestrator.results.layout import ENGINE_METRICS_JSONL

# role -> (family, kind); kind: gauge (mean and max over the repeat) or counter (its delta)
VLLM_FAMILIES: dict[str, tuple[str, str]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "gauge"),  # a fraction, 1 = full
    "requests_running": ("vllm:num_requests_running", "gauge"),
    "requests_waiting": ("vllm:num_requests_waiting", "gauge"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "counter"),  # tokens
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "counter"),  # tokens
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens", "counter"),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens", "counter"),
    "spec_drafts": ("vllm:spec_decode_num_drafts", "counter"),
    "preemptions": ("vllm:num_preemptions", "counter"),
}
SGLANG_FAMILIES: dict[str, tuple[str, str]] = {
    "kv_cache_usage": ("sglang:token_usage", "gauge"),  # a fraction of the KV pool's tokens
    "requests_running": ("sglang:num_running_reqs", "gauge"),
    "requests_waiting": ("sglang:num_queue_reqs", "gauge"),
    "prefix_cache_hits": ("sglang:cached_tokens", "counter"),  # tokens (by cache_source)
    "prefix_cache_queries": ("sglang:prompt_tokens", "counter"),  # every prefill token
    "spec_accept_length": ("sglang:spec_accept_length", "gauge"),  # tokens per verify step
    "spec_accept_rate": ("sglang:spec_accept_rate", "gauge"),  # accepted / draft tokens
    "preemptions": ("sglang:num_retracted_requests", "counter"),  # SGLang's word: retracted
}
ENGINE_FAMILIES: dict[str, dict[str, tuple[str, str]]] = {
    "vllm": VLLM_FAMILIES,
    "sglang": SGLANG_FAMILIES,
}
# server adapter -> the engine whose families it serves
ADAPTER_ENGINE = {"vllm": "vllm", "sglang": "sglang"}

_SOURCE = "bench/<n>/" + ENGINE_METRICS_JSONL + " (the engine's /metrics)"
# Every measured repeat of a cell that scraped its engine gets these (analyze/engine_metrics.py).
ENGINE_CATALOGUE = (
    MetricInfo("engine_kv_cache_usage_mean", "fraction", "neither", _SOURCE),
    MetricInfo("engine_kv_cache_usage_max", "fraction", "neither", _SOURCE),
    MetricInfo("engine_requests_running_mean", "requests", "neither", _SOURCE),
    MetricInfo("engine_requests_running_max", "requests", "neither", _SOURCE),
    MetricInfo("engine_requests_waiting_mean", "requests", "lower", _SOURCE),
    MetricInfo("engine_requests_waiting_max", "requests", "lower", _SOURCE),
    MetricInfo("engine_prefix_cache_hit_rate", "fraction", "higher", _SOURCE + ", tokens"),
    MetricInfo("engine_spec_acceptance_rate", "fraction", "higher", _SOURCE + ", draft tokens"),
    MetricInfo("engine_spec_accept_length", "tokens/step", "higher", _SOURCE),
    MetricInfo("engine_preemptions", "requests", "lower", _SOURCE),
)
# metric -> the roles it needs (any one of the alternatives, in order)
METRIC_ROLES: dict[str, tuple[tuple[str, ...], ...]] = {
    "engine_kv_cache_usage_mean": (("kv_cache_usage",),),
    "engine_kv_cache_usage_max": (("kv_cache_usage",),),
    "engine_requests_running_mean": (("requests_running",),),
    "engine_requests_running_max": (("requests_running",),),
    "engine_requests_waiting_mean": (("requests_waiting",),),
    "engine_requests_waiting_max": (("requests_waiting",),),
    "engine_prefix_cache_hit_rate": (("prefix_cache_hits", "prefix_cache_queries"),),
    "engine_spec_acceptance_rate": (
        ("spec_accepted_tokens", "spec_draft_tokens"),
        ("spec_accept_rate",),
    ),
    "engine_spec_accept_length": (("spec_accepted_tokens", "spec_drafts"), ("spec_accept_length",)),
    "engine_preemptions": (("preemptions",),),
}


def families_of(engine: str) -> tuple[str, ...]:
    """The family names the runner keeps for `engine` (empty for an unknown engine)."""
    return tuple(name for name, _kind in ENGINE_FAMILIES.get(engine, {}).values())


def default_engine(adapter: str, args: Mapping[str, Any]) -> str | None:
    """The engine whose /metrics a server of `adapter` serves by default, None when it serves
    none without being asked: vLLM always; SGLang with `--enable-metrics`."""
    engine = ADAPTER_ENGINE.get(adapter)
    if engine == "sglang" and args.get("enable-metrics") in (None, False, "false", "False"):
        return None
    return engine

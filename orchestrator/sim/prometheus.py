"""The simulated server's /metrics: its state under both engines' Prometheus family names.

SGLang's (`sglang:token_usage`, `num_running_reqs`, `num_queue_reqs`, the prefix cache's
`prompt_tokens`/`cached_tokens` counters and `cache_hit_rate`, `spec_accept_length` and
`spec_accept_rate`, `num_retracted_requests`) and vLLM's (`vllm:kv_cache_usage_perc`,
`num_requests_running`/`waiting`, `prefix_cache_queries`/`hits`, `num_preemptions`, and the
`spec_decode_*` counters only while speculating, as vLLM registers them only then), from one
state, so a cell reads the same load whichever adapter scrapes it. Values follow the engine:
KV use is the running requests' tokens over the pool, the prefix counters are
sim/prefix_cache.py's, acceptance counts the tokens decode steps really emitted. The simulator
never preempts: both preemption counters stay 0. Counters are written as prometheus_client
writes them (`# TYPE NAME_total counter`, then `NAME_total`).
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.sim import model as m
from orchestrator.sim.engine import Engine, Request


class MetricsHost(Protocol):
    """What /metrics reads of the server (sim/server.py's SimServer)."""

    @property
    def cfg(self) -> m.ServingConfig: ...
    def token_usage(self, reqs: list[Request]) -> float: ...


def _family(name: str, kind: str, help_text: str, labels: str, value: float) -> str:
    shown = name + "_total" if kind == "counter" else name
    return (
        f"# HELP {shown} {help_text}\n# TYPE {shown} {kind}\n{shown}{{{labels}}} {float(value)!r}\n"
    )


def exposition(engine: Engine, srv: MetricsHost, model: str) -> str:
    """The /metrics text now."""
    with engine.cv:
        running = list(engine.running)
        waiting = len(engine.waiting)
        emitted, forwards = engine.spec_tokens, engine.spec_forwards
    stats = engine.prefix_cache.stats()
    usage = srv.token_usage(running)
    speculating = bool(srv.cfg.speculating)
    steps = max(1, srv.cfg.num_steps)
    accepted = max(0, emitted - forwards)  # each decode step's bonus token is not a draft's
    sg = f'model_name="{model}"'
    parts = [
        engine.prefix_cache.prometheus(model),
        _family("sglang:token_usage", "gauge", "The token usage.", sg, usage),
        _family("sglang:num_running_reqs", "gauge", "Running requests.", sg, len(running)),
        _family("sglang:num_queue_reqs", "gauge", "Waiting requests.", sg, waiting),
        _family(
            "sglang:spec_accept_length",
            "gauge",
            "Average acceptance length.",
            sg,
            emitted / forwards if speculating and forwards else 0.0,
        ),
        _family(
            "sglang:spec_accept_rate",
            "gauge",
            "Accepted over draft tokens.",
            sg,
            accepted / (forwards * steps) if speculating and forwards else 0.0,
        ),
        _family("sglang:num_retracted_requests", "counter", "Retracted requests.", sg, 0),
    ]
    vl = f'engine="0",model_name="{model}"'
    parts += [
        _family("vllm:num_requests_running", "gauge", "Running requests.", vl, len(running)),
        _family("vllm:num_requests_waiting", "gauge", "Waiting requests.", vl, waiting),
        _family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage, 1 = full.", vl, usage),
        _family(
            "vllm:prefix_cache_queries",
            "counter",
            "Queried tokens.",
            vl,
            stats["prompt_tokens_total"],
        ),
        _family(
            "vllm:prefix_cache_hits", "counter", "Cached tokens.", vl, stats["cached_tokens_total"]
        ),
        _family("vllm:num_preemptions", "counter", "Preemptions.", vl, 0),
    ]
    if speculating:
        parts += [
            _family("vllm:spec_decode_num_drafts", "counter", "Drafts.", vl, forwards),
            _family(
                "vllm:spec_decode_num_draft_tokens",
                "counter",
                "Draft tokens.",
                vl,
                forwards * steps,
            ),
            _family("vllm:spec_decode_num_accepted_tokens", "counter", "Accepted.", vl, accepted),
        ]
    return "".join(parts)

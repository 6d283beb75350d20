"""Adapters: how a serving engine or benchmark client becomes argv, readiness and metrics.

`server_adapter(name)` and `bench_adapter(name)` are the registry; an unknown name is an
InputError that suggests the closest known one.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TypeVar

from orchestrator.adapters.base import BenchAdapter, RepeatResult, ServerAdapter
from orchestrator.adapters.generic import GenericBench, GenericServer
from orchestrator.adapters.sglang import SglangServer
from orchestrator.adapters.sglang_bench import SglangBenchOneBatchServer, SglangBenchServing
from orchestrator.adapters.vllm import VllmBenchServe, VllmServer
from orchestrator.errors import InputError

__all__ = [
    "BENCH_ADAPTERS",
    "SERVER_ADAPTERS",
    "BenchAdapter",
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

"""The simulator's performance model: pure functions from (parameters, config, env, host) to time.

For sim serve, init-repo and the fake nvidia-smi; model file and time units: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_FILE = "orch_sim_model.json"
REFERENCE_TP = 8

DEFAULT_PARAMS: dict[str, Any] = {
    "schema_version": 1,
    "model": "Kimi-K2.5 (simulated MoE, tp 8)",
    "decode_ms": 10.436,
    "batch_slope": 0.03,
    "cuda_graph_off_factor": 1.35,
    "prefill_base_ms": 8.0,
    "prefill_ms_per_token": 0.02,
    "allreduce": {
        "custom_ms": 0.9,
        "nccl_default_ms": 1.76,
        "algo_factor": {
            "Ring": 0.62,
            "Tree": 1.0,
            "NVLS": 0.7,
            "NVLSTree": 0.8,
            "CollNetDirect": 1.1,
            "CollNetChain": 1.1,
            "PAT": 1.2,
        },
        "min_nchannels_gain": 0.2,
        "min_nchannels_full": 32,
        "cross_nic_factor": 0.92,
    },
    "eagle": {
        "draft_step_ms": 0.4,
        "verify_ms": 19.0,
        "verify_ms_per_extra_token": 0.3,
        "acceptance": [0.60, 0.56, 0.52, 0.48, 0.45, 0.42, 0.40, 0.38],
        "topk_gain": 0.3,
    },
    "noise": 0.015,
    "noise_correlation": 0.9,
    # sd of one speed factor drawn per server start (placement, clocks, graph capture, autotuning)
    "start_sd": 0.01,
    "startup_s": 2.0,
    "bugs": {"drop_env": [], "drop_env_ranks": None, "crash_on_start": None},
}


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def model_params(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The default parameters deep-merged with `overrides` (a partial model file)."""
    return _merge(DEFAULT_PARAMS, overrides or {})


def load_params(path: Path) -> dict[str, Any]:
    """Read a model file; missing keys take their defaults, so old files keep working."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the model file must hold a JSON object")
    return model_params(data)


def dump_params(params: Mapping[str, Any]) -> str:
    """The model file's text: indented so a changed number is a one-line diff."""
    return json.dumps(params, indent=2) + "\n"


@dataclass(frozen=True)
class ServingConfig:
    """The launch flags that matter to performance."""

    tp: int = REFERENCE_TP
    speculative_algorithm: str | None = None
    num_steps: int = 0
    eagle_topk: int = 1
    num_draft_tokens: int = 0
    disable_custom_all_reduce: bool = False
    disable_cuda_graph: bool = False

    @property
    def speculating(self) -> bool:
        """True for EAGLE/EAGLE3 with at least one draft step."""
        algo = (self.speculative_algorithm or "").upper()
        return algo in {"EAGLE", "EAGLE3", "NEXTN"} and self.num_steps > 0


# The demo's bisected cell (playbooks/demo.yml, nccl=tuned, spec=eagle3-2): what the bench
# scripts and tests that model its throughput predict it for.
DEMO_EAGLE3_2 = ServingConfig(
    tp=8,
    speculative_algorithm="EAGLE3",
    num_steps=2,
    eagle_topk=1,
    num_draft_tokens=3,
    disable_custom_all_reduce=True,
)
DEMO_TUNED_NCCL = {"NCCL_MIN_NCHANNELS": "32", "NCCL_CROSS_NIC": "1", "NCCL_ALGO": "Ring"}


@dataclass(frozen=True)
class StepCost:
    """One engine iteration for a batch of one request."""

    step_ms: float
    accept_len: float  # expected tokens emitted per request per step
    allreduce_ms: float
    acceptance: tuple[float, ...] = field(default=())  # per draft position, effective

    @property
    def tok_s(self) -> float:
        """Decode tokens per second of one request."""
        return 1000.0 * self.accept_len / self.step_ms


def accept_length(acceptance: list[float] | tuple[float, ...], num_steps: int) -> float:
    """1 + sum over i <= num_steps of prod_{j<=i} acceptance[j] (the last rate repeats)."""
    total, prod = 1.0, 1.0
    for i in range(num_steps):
        rate = acceptance[min(i, len(acceptance) - 1)] if acceptance else 0.0
        prod *= rate
        total += prod
    return total


def effective_acceptance(params: Mapping[str, Any], cfg: ServingConfig) -> tuple[float, ...]:
    """Per-position acceptance for this config: topk > 1 (a tree) accepts a little more often."""
    if not cfg.speculating:
        return ()
    eagle = params["eagle"]
    rates: list[float] = list(eagle["acceptance"]) or [0.0]
    # The chain cannot be longer than the draft tokens verified (topk 1: num_steps + 1).
    steps = cfg.num_steps
    if cfg.num_draft_tokens > 0 and cfg.eagle_topk <= 1:
        steps = min(steps, cfg.num_draft_tokens - 1)
    power = 1.0 + float(eagle["topk_gain"]) * max(0, cfg.eagle_topk - 1)
    out = []
    for i in range(steps):
        rate = min(max(rates[min(i, len(rates) - 1)], 0.0), 1.0)
        out.append(1.0 - (1.0 - rate) ** power)
    return tuple(out)


def _ring_fraction(tp: int) -> float:
    return 2.0 * (tp - 1) / tp if tp > 0 else 0.0


def common_env(envs: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The (name, value) pairs every worker has: what a collective across all ranks sees."""
    if not envs:
        return {}
    shared = dict(envs[0])
    for env in envs[1:]:
        shared = {k: v for k, v in shared.items() if env.get(k) == v}
    return shared


def nccl_factor(params: Mapping[str, Any], env: Mapping[str, str]) -> float:
    """How NCCL_ALGO, NCCL_MIN_NCHANNELS and NCCL_CROSS_NIC scale NCCL's all-reduce time."""
    ar = params["allreduce"]
    factor = 1.0
    algo = env.get("NCCL_ALGO", "").strip()
    if algo:
        # NCCL accepts a list ("Ring,Tree"); the first one named is the one it would pick here.
        first = algo.split(",")[0].split(":")[-1].strip().lower()
        table = {k.lower(): float(v) for k, v in ar["algo_factor"].items()}
        factor *= table.get(first, 1.0)
    try:
        channels = int(env.get("NCCL_MIN_NCHANNELS", "0"))
    except ValueError:
        channels = 0
    full = max(1, int(ar["min_nchannels_full"]))
    factor *= 1.0 - float(ar["min_nchannels_gain"]) * min(max(channels, 0), full) / full
    if env.get("NCCL_CROSS_NIC", "").strip() == "1":
        factor *= float(ar["cross_nic_factor"])
    return factor


def allreduce_ms(params: Mapping[str, Any], cfg: ServingConfig, env: Mapping[str, str]) -> float:
    """All-reduce time per forward pass; NCCL variables matter only with custom AR disabled."""
    ar = params["allreduce"]
    scale = _ring_fraction(cfg.tp) / _ring_fraction(REFERENCE_TP)
    if not cfg.disable_custom_all_reduce:
        return float(ar["custom_ms"]) * scale
    return float(ar["nccl_default_ms"]) * nccl_factor(params, env) * scale


def clock_factor(state: Mapping[str, Any], tp: int) -> float:
    """sm clock / max sm clock of the slowest GPU the server uses (TP runs at its pace)."""
    gpus = gpu_rows(state)[: max(1, tp)]
    factors = []
    for gpu in gpus:
        cur, top = float(gpu["sm_clock"]), float(gpu["max_sm_clock"])
        factors.append(min(1.0, max(0.05, cur / top)) if top > 0 else 1.0)
    return min(factors) if factors else 1.0


def _compute_scale(params: Mapping[str, Any], cfg: ServingConfig, clock: float) -> float:
    scale = REFERENCE_TP / max(1, cfg.tp) / clock
    if cfg.disable_cuda_graph:
        scale *= float(params["cuda_graph_off_factor"])
    return scale


def step_cost(
    params: Mapping[str, Any], cfg: ServingConfig, env: Mapping[str, str], clock: float = 1.0
) -> StepCost:
    """The expected cost of one decode iteration (batch of one) and tokens it emits."""
    ar = allreduce_ms(params, cfg, env)
    scale = _compute_scale(params, cfg, clock)
    if not cfg.speculating:
        return StepCost(
            step_ms=float(params["decode_ms"]) * scale + ar, accept_len=1.0, allreduce_ms=ar
        )
    eagle = params["eagle"]
    rates = effective_acceptance(params, cfg)
    extra_tokens = max(0, cfg.num_draft_tokens - (cfg.num_steps + 1))
    verify = float(eagle["verify_ms"]) + float(eagle["verify_ms_per_extra_token"]) * extra_tokens
    compute = cfg.num_steps * float(eagle["draft_step_ms"]) + verify
    return StepCost(
        step_ms=compute * scale + ar,
        accept_len=accept_length(rates, len(rates)),
        allreduce_ms=ar,
        acceptance=rates,
    )


def step_phases(
    params: Mapping[str, Any], cfg: ServingConfig, env: Mapping[str, str], clock: float = 1.0
) -> dict[str, float]:
    """`step_cost`'s step split into its phases, in order (milliseconds; they sum to step_ms)."""
    ar = allreduce_ms(params, cfg, env)
    scale = _compute_scale(params, cfg, clock)
    if not cfg.speculating:
        return {"target forward": float(params["decode_ms"]) * scale, "all-reduce": ar}
    eagle = params["eagle"]
    extra_tokens = max(0, cfg.num_draft_tokens - (cfg.num_steps + 1))
    verify = float(eagle["verify_ms"]) + float(eagle["verify_ms_per_extra_token"]) * extra_tokens
    return {
        "draft steps": cfg.num_steps * float(eagle["draft_step_ms"]) * scale,
        "target verify forward": verify * scale,
        "all-reduce": ar,
    }


def prefill_ms(
    params: Mapping[str, Any],
    cfg: ServingConfig,
    env: Mapping[str, str],
    new_tokens: int,
    clock: float = 1.0,
) -> float:
    """Time of a prefill iteration over `new_tokens` prompt tokens."""
    compute = float(params["prefill_base_ms"]) + float(params["prefill_ms_per_token"]) * new_tokens
    return compute * _compute_scale(params, cfg, clock) + allreduce_ms(params, cfg, env)


def batch_factor(params: Mapping[str, Any], batch: int) -> float:
    """How much slower a decode step is with `batch` running requests than with one."""
    return 1.0 + float(params["batch_slope"]) * max(0, batch - 1)


def predict_output_throughput(
    params: Mapping[str, Any],
    cfg: ServingConfig,
    env: Mapping[str, str],
    input_len: int,
    output_len: int,
    clock: float = 1.0,
) -> float:
    """Expected bench output tok/s at concurrency 1 (prefill + decode), without noise."""
    cost = step_cost(params, cfg, env, clock)
    decode = max(0, output_len - 1) / cost.accept_len * cost.step_ms
    per_request_ms = prefill_ms(params, cfg, env, input_len, clock) + decode
    return 1000.0 * output_len / per_request_ms


class Noise:
    """Seeded speed factors: AR(1) across requests plus white per-step jitter."""

    def __init__(self, seed: int | None, rel: float, correlation: float) -> None:
        self.rng = random.Random(seed)
        self.rel = max(0.0, rel)
        self.rho = min(max(correlation, 0.0), 0.999)
        # Start from the stationary distribution so the first run varies like the others.
        self.state = self.rng.gauss(0.0, self.rel) if self.rel else 0.0

    def request_factor(self) -> float:
        """The next request's speed factor (>1 is slower); correlated with the previous one."""
        if not self.rel:
            return 1.0
        self.state = self.rho * self.state + math.sqrt(1 - self.rho**2) * self.rng.gauss(
            0.0, self.rel
        )
        return max(0.5, 1.0 + self.state)

    def step_factor(self) -> float:
        """White jitter on one iteration (averages out over a request)."""
        if not self.rel:
            return 1.0
        return max(0.5, 1.0 + self.rng.gauss(0.0, self.rel / 2))


def start_factor(seed: int | None, start: int, sd: float) -> float:
    """The speed factor of server start number `start` (>1 is slower): log-normal with `sd`,
    drawn once per start, from `seed` and the start's number (unseeded without a seed)."""
    if sd <= 0:
        return 1.0
    # A string seed hashes to the same stream on every Python; each start gets its own.
    rng = random.Random(f"{seed}:start:{start}") if seed is not None else random.Random()
    return math.exp(rng.gauss(0.0, sd))


# ---- host state (shared with the fake nvidia-smi) -------------------------------------------

DEFAULT_STATE: dict[str, Any] = {
    "gpu_name": "NVIDIA H200",
    "gpu_count": 8,
    "driver_version": "570.133.20",
    "cuda_version": "12.8",
    "nccl_version": "2.27.5+cuda12.9",
    "compute_cap": "9.0",
    "sm_clock": 1980,
    "max_sm_clock": 1980,
    "mem_clock": 3201,
    "max_mem_clock": 3201,
    "pcie_gen": 5,
    "pcie_max_gen": 5,
    "pcie_width": 16,
    "pcie_max_width": 16,
    "power_draw": 118.5,
    "power_limit": 700.0,
    "temperature": 34,
    "memory_total_mib": 143771,
    "memory_used_mib": 0,
    "utilization": 0,
    "persistence_mode": "Enabled",
    "ecc_mode": "Enabled",
    "pstate": "P0",
    "throttle_reasons": "0x0000000000000000",
    "nvidia_smi_fields": "both",  # "old": only pre-535.113 names; "new": only current names
    "gpus": {},  # per-GPU overrides: {"3": {"sm_clock": 1200}}
}


def host_state(data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Host state with defaults filled in."""
    return _merge(DEFAULT_STATE, data or {})


def episode_clock(
    row: Mapping[str, Any],
    episodes: list[Mapping[str, Any]],
    now: float,
    loaded_since: float | None,
) -> tuple[float, list[str]]:
    """One GPU's SM clock at `now` under the scheduled throttle episodes (`at`: epoch seconds,
    or `after_load`: seconds after a server loaded it), and the reasons of those active."""
    index = int(row["index"])
    clock, top = float(row["sm_clock"]), float(row["max_sm_clock"])
    reasons: list[str] = []
    for ep in episodes:
        if ep.get("gpus") is not None and index not in {int(g) for g in ep["gpus"]}:
            continue
        if "after_load" in ep:
            if loaded_since is None:
                continue
            begin = loaded_since + float(ep["after_load"])
        else:
            begin = float(ep.get("at", 0.0))
        if begin <= now < begin + float(ep.get("duration", 0.0)):
            clock = min(clock, float(ep.get("sm_clock", 0.6 * top)))
            reasons.append(str(ep.get("reason", "sw_power_cap")))
    return clock, reasons


def throttle_slowdown(
    state: Mapping[str, Any], tp: int, now: float, loaded_since: float | None
) -> float:
    """How much longer a step takes at `now` than at start under the host state's
    `throttle_episodes` (which the fake nvidia-smi reports too): an episode lowers the clock of
    the GPUs it names, and TP runs at the pace of the slowest of the first `tp`."""
    episodes = state.get("throttle_episodes") or []
    if not episodes:
        return 1.0
    factors = []
    for row in gpu_rows(state)[: max(1, tp)]:
        clock, _reasons = episode_clock(row, episodes, now, loaded_since)
        top = float(row["max_sm_clock"])
        factors.append(min(1.0, max(0.05, clock / top)) if top > 0 else 1.0)
    return clock_factor(state, tp) / min(factors)


def contention_slowdown(
    state: Mapping[str, Any], requests: int, sim_since_load: float | None
) -> float:
    """How much longer everything takes now under the host state's `contention_episodes`: other
    processes hogging the host's CPUs, which nvidia-smi cannot see (GPU clocks stay at max).

    An episode is `{after_requests, requests, slowdown}`, active while the server serves request
    number `after_requests` + 1 .. `after_requests` + `requests` (counted from 1 since it started,
    its own warm-up generate first; at concurrency 1 the same requests on every run), or
    `{after_load_s, duration_s, slowdown}` in simulated seconds after the weights loaded. The
    largest active `slowdown` (default 2) applies.
    """
    factor = 1.0
    for ep in state.get("contention_episodes") or []:
        if "after_requests" in ep:
            first = int(ep["after_requests"])
            active = first < requests <= first + int(ep.get("requests", 1))
        elif "after_load_s" in ep and sim_since_load is not None:
            begin = float(ep["after_load_s"])
            active = begin <= sim_since_load < begin + float(ep.get("duration_s", 0.0))
        else:
            active = False
        if active:
            factor = max(factor, float(ep.get("slowdown", 2.0)))
    return factor


def gpu_rows(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One dict per GPU: the host-wide values with that GPU's overrides applied."""
    count = int(state.get("gpu_count", DEFAULT_STATE["gpu_count"]))
    overrides = state.get("gpus") or {}
    rows = []
    for i in range(count):
        row = {k: v for k, v in state.items() if k != "gpus"}
        row.update(overrides.get(str(i), {}) if isinstance(overrides, Mapping) else {})
        row["index"] = i
        rows.append(row)
    return rows

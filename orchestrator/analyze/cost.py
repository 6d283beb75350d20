"""Cost and per-GPU figures, as InferenceX reports them: throughput per GPU, per user
(interactivity) and dollars per million output tokens, derived from a repeat's own metrics.

What is priced: the GPUs the cell uses for the bench's measured duration, at the hosts' declared
`orch_gpu_hour_usd` (InferenceX's `price × 1e6 / (output_tput_per_gpu × 3600)`). Server start,
warm-ups and the idle time between repeats are not priced. The price and the GPU count are
recorded in metrics.json's `cost` block, so a report of the bundle needs no inventory; a cell
whose hosts declare no price has no dollar figure, and the block says why (never a zero).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters import COST_METRIC
from orchestrator.cell import Cell
from orchestrator.config.inventory.connection import PRICE_VAR

PRICED = (
    "the GPUs the cell uses for the bench's measured duration: price x GPUs x 1e6 / "
    "(output_throughput x 3600); server start, warm-ups and idle time are not priced"
)
# A server's parallel sizes, by what its args call them (`-` and `_` alike, as adapters render).
_SIZES = {
    "tp": ("tp", "tp_size", "tensor_parallel_size"),
    "pp": ("pp", "pp_size", "pipeline_parallel_size"),
    "dp": ("dp", "dp_size", "data_parallel_size"),
}
_ENGINES = ("vllm", "sglang")  # engines whose undeclared sizes default to 1


@dataclass(frozen=True)
class GpuCount:
    """The GPUs a cell uses and how that was found (what a reader needs to trust a per-GPU
    figure); `n` None where nothing says."""

    n: int | None
    how: str


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number > 0 else None


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes", "on")


def cell_gpus(cell: Cell, telemetry_gpus: int = 0) -> GpuCount:
    """The GPUs the cell's server uses, first found of: its parallel sizes (tp × pp × dp, the
    engine's world size over every node; SGLang's dp with dp-attention shares tp's GPUs), 1 for
    vLLM or SGLang declaring none (their default), CUDA_VISIBLE_DEVICES, the GPUs telemetry
    sampled on each node."""
    args = cell.server.args if cell.server is not None else {}
    named = {str(k).lstrip("-").replace("-", "_"): v for k, v in args.items()}
    sizes: dict[str, int] = {}
    for size, names in _SIZES.items():
        for name in names:
            if name in named and _whole(named[name]) is not None:
                sizes[size] = _whole(named[name]) or 1
                break
    if "dp" in sizes and _truthy(named.get("enable_dp_attention")):
        del sizes["dp"]  # dp attention splits tp's GPUs, it adds none
    if sizes:
        n = 1
        for value in sizes.values():
            n *= value
        return GpuCount(n, " x ".join(f"{k} {v}" for k, v in sizes.items()) + " (server args)")
    adapter = cell.server.adapter if cell.server is not None else None
    if adapter in _ENGINES:
        return GpuCount(1, f"tp 1 ({adapter}'s default: no parallel size in the server args)")
    visible = cell.env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        n = len([d for d in visible.split(",") if d.strip()]) * len(cell.hosts)
        return GpuCount(n, "CUDA_VISIBLE_DEVICES")
    if telemetry_gpus > 0:
        return GpuCount(telemetry_gpus * len(cell.hosts), "the GPUs telemetry sampled")
    return GpuCount(None, "unknown: no parallel size, CUDA_VISIBLE_DEVICES or telemetry")


def cell_price(cell: Cell, prices: Mapping[str, float | None]) -> tuple[float | None, str | None]:
    """USD per GPU-hour of the cell's GPUs (its hosts' mean: each node holds an equal share)
    and, without one, why not."""
    missing = [h for h in cell.hosts if prices.get(h) is None]
    if missing:
        return None, f"host {missing[0]!r} declares no {PRICE_VAR}"
    return sum(prices[h] or 0.0 for h in cell.hosts) / len(cell.hosts), None


def _positive(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def derived_metrics(
    repeat: Mapping[str, Any], gpus: int | None, usd_per_gpu_hour: float | None
) -> dict[str, float]:
    """A repeat's per-GPU, per-user and cost metrics from its own; a figure whose inputs are
    missing is absent (no price: no dollar figure, never 0)."""
    out: dict[str, float] = {}
    output = _positive(repeat.get("output_throughput"))
    total = _positive(repeat.get("total_throughput"))
    if gpus:
        if output is not None:
            out["output_throughput_per_gpu"] = output / gpus
        if total is not None:
            out["total_throughput_per_gpu"] = total / gpus
    tpot = _positive(repeat.get("median_tpot_ms"))
    if tpot is not None:
        out["interactivity"] = 1000.0 / tpot  # InferenceX's median_intvty: tok/s per user
    if gpus and output is not None and usd_per_gpu_hour is not None:
        out[COST_METRIC] = usd_per_gpu_hour * gpus * 1e6 / (output * 3600.0)
    return out


def cost_block(gpus: GpuCount, price: float | None, why_not: str | None) -> dict[str, Any]:
    """metrics.json's `cost`: what was priced, at what, over how many GPUs and how they were
    counted, and why there is no dollar figure where there is none."""
    block: dict[str, Any] = {
        "usd_per_gpu_hour": price,
        "gpus": gpus.n,
        "gpus_from": gpus.how,
        "priced": PRICED,
    }
    if price is None or gpus.n is None:
        block["no_price"] = why_not or f"the GPUs are {gpus.how}"
    return block


def add_cost_metrics(
    repeats: Sequence[dict[str, Any]],
    sources: dict[str, Any],
    cell: Cell,
    prices: Mapping[str, float | None],
    telemetry_gpus: int = 0,
) -> dict[str, Any]:
    """Put each repeat's derived metrics into `repeats`; returns metrics.json's `cost` block."""
    gpus = cell_gpus(cell, telemetry_gpus)
    price, why_not = cell_price(cell, prices)
    for repeat in repeats:
        values = derived_metrics(repeat, gpus.n, price)
        repeat.update(values)
        sources.update(dict.fromkeys(values, "derived (analyze/cost.py)"))
    return cost_block(gpus, price, why_not)


def cost_notes(cells: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """What a report says of cost: the price and GPUs each priced cell was costed at, and why
    a cell has no dollar figure when another cell of the report has one."""
    blocks = [(cid, m["cost"]) for cid, m in cells if isinstance(m.get("cost"), Mapping)]
    if not any(b.get("usd_per_gpu_hour") is not None for _, b in blocks):
        return []
    lines = [f"{COST_METRIC}: {PRICED}"]
    for cid, b in blocks:
        if b.get("no_price"):
            lines.append(f"{cid}: no {COST_METRIC}: {b['no_price']}")
        else:
            lines.append(
                f"{cid}: ${b.get('usd_per_gpu_hour'):g}/GPU-hour x {b.get('gpus')} GPUs: "
                f"{b.get('gpus_from')}"
            )
    return lines

"""Issue 11, items 15 and 16: verdicts that respect noise, on bundles built from fixtures.

A busy host (one wild repeat, the load rising) beside a changed NCCL: the diff flags the
outlier, shows the load and names no likely cause. A no-change run with 18 metrics where one
crosses p < 0.05 by chance: Holm's correction calls it no change, and the deciding metric leads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from analyze_fixtures import base_cell, snapshot, write_run

from orchestrator.analyze.diff.cells import diff_runs
from orchestrator.analyze.diff.model import CellDiff
from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import load_run

BUSY = [54.9, 55.5, 11.2, 49.5, 39.9, 46.1]
STEADY = [55.0, 55.8, 56.6, 57.4, 58.2, 59.0]
SLOWER = [46.0, 46.5, 47.0, 47.5, 48.0, 48.5]  # a steady -16%


def _snap(load_1m: float, nccl: str = "2.21.5") -> dict[str, Any]:
    return snapshot(
        load={"1m": load_1m, "5m": 1.0, "15m": 1.0, "running": 2, "total": 300},
        torch={"version": "2.5.1+cu124", "cuda": "12.4", "nccl": nccl},
        nccl={"torch": nccl, "server_log": None},
    )


def _diff(tmp: Path, a: dict[str, Any], b: dict[str, Any]) -> tuple[CellDiff, str]:
    cell = base_cell("nccl-1a2b3c4d")
    good = load_run(write_run(tmp, "good", [{"cell": cell, **a}]))
    bad = load_run(write_run(tmp, "bad", [{"cell": cell, **b}]))
    diff = diff_runs(good.cells, bad.cells)
    return diff.pairs[0], render_diff(diff)


def _orch_diff(*args: str) -> str:
    """`orch diff ARGS` for real; its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "diff", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _repeats(values: list[float]) -> list[dict[str, float]]:
    return [{"output_throughput": v, "median_ttft_ms": 100.0 + i} for i, v in enumerate(values)]


def test_a_busy_host_is_repeats_unstable_not_a_cause(tmp_path: Path) -> None:
    good = {"repeats": _repeats(STEADY), "snapshot_pre": _snap(0.4), "snapshot_post": _snap(0.5)}
    busy = {
        "repeats": _repeats(BUSY),
        "snapshot_pre": _snap(1.9, nccl="2.21.5+cuda12.4"),
        "snapshot_post": _snap(2.8, nccl="2.21.5+cuda12.4"),
    }
    pair, text = _diff(tmp_path / "busy", good, busy)
    assert [s.name for s in pair.differing] == ["system", "metrics"]
    (throughput,) = pair.unstable
    assert throughput.metric == "output_throughput" and throughput.significant  # -16%, p=0.004
    assert [(o.repeat, o.value) for o in throughput.outliers_b] == [(3, 11.2)]
    lines = text.splitlines()
    first = lines.index("B: nccl-1a2b3c4d on gpu01 in bad [passed]") + 1  # leads the pair
    assert lines[first].startswith("repeats unstable (output_throughput: B outlier #3=11.20; B ")
    assert "no likely cause is named" in lines[first]
    assert "differences, most likely cause first" not in text
    assert "repeats unstable in 1 of 1 pairs (no cause named for them; rerun)" in text
    load = next(line for line in lines if "host load (1-minute" in line)
    assert "A 0.40 -> 0.50 (224 CPUs); B 1.90 -> 2.80 (224 CPUs)" in load
    row = next(line for line in lines if line.strip().startswith("output_throughput *"))
    assert "yes (mann-whitney, p=0.00433; repeats of one start, n=6/6)" in row
    assert "B outlier #3=11.20" in row

    # the command line says the same, and --json names the unstable metric
    runs = (str(tmp_path / "busy" / "good"), str(tmp_path / "busy" / "bad"))
    printed = _orch_diff(*runs)
    assert "repeats unstable in 1 of 1 pairs" in printed and load in printed
    data = json.loads(_orch_diff(*runs, "--json"))
    assert data["pairs"][0]["unstable"] == ["output_throughput"]

    # the same NCCL change with steady repeats: a cause, system first
    steady = {**busy, "repeats": _repeats(SLOWER)}
    pair, text = _diff(tmp_path / "steady", good, steady)
    assert pair.unstable == []
    assert "repeats unstable" not in text
    assert "differences, most likely cause first:\n  system: 1 of 1 pairs" in text


NAMES = [
    "output_throughput",
    "request_throughput",
    "input_throughput",
    "median_ttft_ms",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "mean_itl_ms",
    "p95_itl_ms",
    "median_e2e_latency_ms",
    "mean_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "duration",
    "accept_length",
    "p99_itl_ms",
]


def _many(p99_itl: list[float]) -> list[dict[str, float]]:
    rows = []
    for i in range(6):
        row = {name: 100.0 + k + 0.1 * ((i * 7 + k) % 6) for k, name in enumerate(NAMES)}
        row["p99_itl_ms"] = p99_itl[i]
        rows.append(row)
    return rows


def test_one_of_18_metrics_at_p_0041_is_no_change_after_holm(tmp_path: Path) -> None:
    a = _many([20.0, 21.0, 22.0, 23.0, 24.0, 25.0])
    b = _many([17.5, 18.5, 19.5, 20.5, 21.5, 21.7])  # -11%, p = 0.041 alone
    pair, text = _diff(tmp_path, {"repeats": a}, {"repeats": b})
    metrics = pair.section("metrics").metrics
    itl = next(m for m in metrics if m.metric == "p99_itl_ms")
    assert round(itl.p_value or 0, 3) == 0.041 and round(itl.delta_pct or 0) == -11
    assert not itl.significant and itl.family == 17  # the 17 metrics that do not decide
    assert itl.p_adjusted is not None and itl.p_adjusted >= 0.05
    assert pair.differing == []
    assert "differences, most likely cause first" not in text
    assert "hardware, metrics" in text.split("no differences in any pair: ")[1]
    # the deciding metric leads, marked; the test and the correlation of repeats are said
    assert metrics[0].metric == "output_throughput" and metrics[0].decides
    assert [m.metric for m in metrics if m.decides] == ["output_throughput"]
    lines = text.splitlines()
    table = [line.strip() for line in lines if line.startswith("  ") and "n=6/6" in line]
    assert table[0].startswith("output_throughput *")
    itl_row = next(line for line in table if line.startswith("p99_itl_ms"))
    assert "no (mann-whitney, p=0.0411, Holm p=" in itl_row and "over 17" in itl_row
    assert "repeats of one start: each side ran one server start" in text
    assert "start-to-start spread was not measured" in text and "bench.starts: N" in text


def test_expect_names_decide_and_lead(tmp_path: Path) -> None:
    cell = base_cell("nccl-1a2b3c4d")
    cell["expect"] = {"median_ttft_ms": {"max": 200}}
    rows = _repeats(STEADY)
    good = load_run(write_run(tmp_path, "good", [{"cell": cell, "repeats": rows}]))
    diff = diff_runs(good.cells, good.cells).pairs[0]
    assert diff.deciding == ["median_ttft_ms"] and diff.deciding_from == "expect"
    assert diff.section("metrics").metrics[0].metric == "median_ttft_ms"


def test_small_samples_get_the_exact_test_and_say_what_they_cannot_reach(tmp_path: Path) -> None:
    """Issue 36 item 3: 3 v 3 is tested (exact p 0.1), not judged by ranges outside Holm."""
    pair, text = _diff(
        tmp_path, {"repeats": _repeats(STEADY[:3])}, {"repeats": _repeats(SLOWER[:3])}
    )
    metrics = pair.section("metrics").metrics
    assert [m.method for m in metrics] == ["mann-whitney", "mann-whitney"]
    assert all(m.p_value is not None and m.family == 1 for m in metrics)
    assert not any(m.significant for m in metrics)  # -16%, but 3 v 3 cannot reach 5%
    assert "3 v 3: cannot reach 5%; smallest p 0.1" in text


def test_a_run_diff_corrects_across_its_cells(tmp_path: Path) -> None:
    """Issue 36 item 11: 4 cells of 6 v 6 at p = 0.0022 each pass alone; Holm over the run's
    four deciding metrics and four others (and their families said) keeps each one."""
    cells = [base_cell(f"c{i}-1a2b3c4d") for i in range(4)]
    good = load_run(
        write_run(tmp_path, "good", [{"cell": c, "repeats": _repeats(STEADY)} for c in cells])
    )
    bad = load_run(
        write_run(tmp_path, "bad", [{"cell": c, "repeats": _repeats(SLOWER)} for c in cells])
    )
    diff = diff_runs(good.cells, bad.cells)
    deciding = [m for p in diff.pairs for m in p.section("metrics").metrics if m.decides]
    assert len(deciding) == 4 and all(m.family == 4 for m in deciding)
    assert all(m.p_adjusted == pytest.approx(4 * m.p_value) for m in deciding if m.p_value)
    assert all(m.significant for m in deciding)  # 4 x 0.0022 is still below 5%

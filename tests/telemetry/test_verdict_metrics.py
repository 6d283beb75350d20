"""A cell folder's telemetry.csv and its repeats' exit.json windows become metrics.json metrics:
per measured repeat (with energy per output token from the bench's numbers), warm-ups and
throttle episodes in the `telemetry` block; a cell without telemetry is left as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.analyze.metrics import summarize
from orchestrator.analyze.verdict import add_telemetry_metrics, output_tokens

HEADER = "t,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active"


def _cell(tmp_path: Path) -> Path:
    """0..30 s at 1 s, 2 GPUs at 200 W; GPU 1 power-capped (0x4, 1200 MHz) over 14..20 s."""
    rows = [HEADER]
    for i in range(31):
        t = 1000.0 + i
        rows.append(f"{t:.3f},0,1980,200,50,90,0x0")
        capped = 14 <= i < 20
        rows.append(f"{t:.3f},1,{1200 if capped else 1980},200,61,90,{'0x4' if capped else '0x0'}")
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "telemetry.csv").write_text("\n".join(rows) + "\n")
    for name, start, end in (("warmup-1", 1, 5), ("1", 6, 12), ("2", 12, 22)):
        (cell / "bench" / name).mkdir(parents=True)
        doc = {"rc": 0, "start": 1000.0 + start, "end": 1000.0 + end}
        (cell / "bench" / name / "exit.json").write_text(json.dumps(doc))
    return cell


def test_each_measured_repeat_gets_its_energy_clock_and_throttle_metrics(tmp_path: Path) -> None:
    cell = _cell(tmp_path)
    repeats = [
        {"n": 1, "output_throughput": 100.0, "duration": 6.0},
        {"n": 2, "output_throughput": 100.0, "duration": 10.0},
    ]
    sources: dict[str, str] = {}
    block = add_telemetry_metrics(cell, repeats, sources)
    one, two = repeats
    assert one["energy_j"] == pytest.approx(6 * 400)
    assert two["energy_j"] == pytest.approx(10 * 400)
    assert one["throttle_s"] == 0 and "throttle_s.sw_power_cap" not in one
    # 14..20 s lies inside repeat 2 (12..22 s): six seconds capped, on GPU 1 only
    assert two["throttle_s"] == pytest.approx(6.0)
    assert two["throttle_s.sw_power_cap"] == pytest.approx(6.0)
    assert two["sm_clock_min_mhz"] == 1200 and one["sm_clock_min_mhz"] == 1980
    assert two["temperature_max_c"] == 61
    # output tokens = throughput × duration (600 and 1000)
    assert one["joules_per_output_token"] == pytest.approx(2400 / 600)
    assert two["output_tokens_per_joule"] == pytest.approx(1000 / 4000)
    assert sources["energy_j"] == "telemetry.csv"
    assert block["gpus"] == [0, 1] and block["interval_s"] == 1.0
    assert block["warmups"]["1"]["energy_j"] == pytest.approx(4 * 400)
    (episode,) = block["episodes"]
    assert episode["reasons"] == ["sw_power_cap"] and episode["gpus"] == [1]
    assert episode["seconds"] == pytest.approx(6.0)
    assert episode["measured_overlap_s"] == pytest.approx(6.0)
    assert episode["measured_repeats"] == [2]
    assert episode["clock_drop_mhz"] == pytest.approx(780)
    # summarized like every metric (report, expect, diff read the summary)
    assert summarize(repeats)["energy_j"]["median"] == pytest.approx(3200)


def test_no_telemetry_or_no_timed_repeats_adds_nothing(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    repeats = [{"n": 1, "output_throughput": 1.0}]
    assert add_telemetry_metrics(bare, repeats, {}) == {}
    assert repeats == [{"n": 1, "output_throughput": 1.0}]
    cell = _cell(tmp_path)
    for name in ("warmup-1", "1", "2"):  # exit.json of a bundle from before repeats were timed
        (cell / "bench" / name / "exit.json").write_text('{"rc": 0, "seconds": 3}')
    block = add_telemetry_metrics(cell, repeats, {})
    assert repeats == [{"n": 1, "output_throughput": 1.0}]
    assert block["warmups"] == {} and len(block["episodes"]) == 1
    assert block["episodes"][0]["measured_overlap_s"] == 0


def test_output_tokens_reported_or_derived() -> None:
    assert output_tokens({"total_output_tokens": 980}) == 980
    assert output_tokens({"output_throughput": 50.0, "duration": 2.0}) == 100
    assert output_tokens({"output_throughput": 50.0}) is None
    assert output_tokens({"total_output_tokens": True}) is None


def test_telemetry_metrics_are_checked_by_expect_like_any_metric(tmp_path: Path) -> None:
    from orchestrator.analyze.verdict import score_cell
    from orchestrator.cell import BenchSpec, Cell, Expectation

    cell_dir = _cell(tmp_path)
    (cell_dir / "cell.json").write_text(json.dumps({"schema_version": 1, "status": "passed"}))
    for n in ("1", "2"):
        (cell_dir / "bench" / n / "result.json").write_text('{"output_throughput": 100.0}')
    cell = Cell(
        id="x-0000",
        playbook="p",
        host="h",
        axes={},
        bench=BenchSpec(adapter="generic", argv=("b",), result_file="result.json", repeats=2),
        expect={"throttle_s": Expectation(max=0.0), "energy_j": Expectation(min=1.0)},
    )
    verdict = score_cell(cell_dir, cell)
    assert verdict.status == "failed" and verdict.failed_step == "expect", verdict.reason
    assert "expectation throttle_s" in str(verdict.reason)
    assert "energy_j" not in str(verdict.reason)
    assert verdict.metrics["summary"]["throttle_s"]["max"] == pytest.approx(6.0)
    assert verdict.metrics["telemetry"]["episodes"][0]["measured_repeats"] == [2]

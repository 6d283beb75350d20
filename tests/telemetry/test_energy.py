"""Per-repeat metrics and throttle episodes from telemetry rows, checked against hand arithmetic."""

from __future__ import annotations

import pytest

from orchestrator.analyze.energy import (
    RepeatWindow,
    energy_summary,
    parse_telemetry,
    reason_names,
    repeat_metrics,
    throttle_episodes,
    window_metrics,
)

HEADER = "t,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active"


def _csv(rows: list[tuple[float, int, str, str, str, str, str]]) -> str:
    return HEADER + "\n" + "".join(",".join(str(v) for v in row) + "\n" for row in rows)


def test_energy_is_the_trapezoid_clipped_to_the_window_and_summed_over_gpus() -> None:
    # GPU 0: power ramps 100 -> 200 W over 0..10 s; GPU 1: flat 300 W; 1 s samples.
    rows = []
    for i in range(11):
        rows.append((100.0 + i, 0, "1980", f"{100 + 10 * i}", "40", "50", "0x1"))
        rows.append((100.0 + i, 1, "1980", "300.00", "60", "100", "0x0"))
    tel = parse_telemetry(_csv(rows))
    # Window 102.5..107.5 s: GPU 0 averages 150 W, GPU 1 300 W, over 5 s; edges interpolated.
    m = window_metrics(tel, RepeatWindow("measure", 1, 102.5, 107.5, output_tokens=900.0))
    assert m["energy_j"] == pytest.approx(5 * 150 + 5 * 300)
    assert m["power_mean_w"] == pytest.approx((150 + 300) / 2)
    assert m["joules_per_output_token"] == pytest.approx(2250 / 900)
    assert m["output_tokens_per_joule"] == pytest.approx(900 / 2250)
    assert m["sm_clock_mean_mhz"] == m["sm_clock_min_mhz"] == 1980
    assert m["temperature_max_c"] == 60
    assert m["utilization_mean_pct"] == pytest.approx(75)
    # gpu_idle (0x1) is not throttling.
    assert m["throttle_s"] == 0 and not [k for k in m if k.startswith("throttle_s.")]
    assert m["telemetry_coverage"] == pytest.approx(1.0)
    # Only GPU 1, and a window half outside the samples: coverage says so.
    half = window_metrics(tel, RepeatWindow("measure", 2, 105.0, 115.0), gpus={1})
    assert half["energy_j"] == pytest.approx(5 * 300)
    assert half["telemetry_coverage"] == pytest.approx(0.5)
    assert window_metrics(tel, RepeatWindow("measure", 3, 200.0, 210.0)) == {
        "throttle_s": 0.0,
        "telemetry_coverage": 0.0,
    }


def test_missing_values_and_a_window_between_two_samples() -> None:
    text = _csv(
        [
            (0.0, 0, "1980", "100", "", "", ""),
            (1.0, 0, "", "[N/A]", "", "", ""),
            (2.0, 0, "1500", "200", "", "", ""),
        ]
    )
    tel = parse_telemetry(text)
    m = window_metrics(tel, RepeatWindow("measure", 1, 0.5, 1.5))
    # The N/A sample is skipped: the line runs from 100 W at 0 s to 200 W at 2 s.
    assert m["energy_j"] == pytest.approx(150.0)
    assert m["sm_clock_min_mhz"] == pytest.approx(1980 - 480 * 1.5 / 2)
    assert "temperature_max_c" not in m and "utilization_mean_pct" not in m


def test_throttle_seconds_by_reason_and_episodes_with_their_overlap() -> None:
    rows = []
    for i in range(30):
        t = 1000.0 + i
        # GPU 2: sw_power_cap from 10 s to 16 s (samples 10..15), hw_slowdown also at 12..13.
        mask = (0x4 if 10 <= i < 16 else 0) | (0x8 if 12 <= i < 14 else 0)
        clock = "1200" if mask else "1980"
        for gpu in range(4):
            g_mask, g_clock = (mask, clock) if gpu == 2 else (0x1 if i > 25 else 0, "1980")
            rows.append((t, gpu, g_clock, "500", "50", "90", f"{g_mask:#x}"))
        # A second, short episode on GPU 0 at 20 s.
        if i == 20:
            rows[-4] = (t, 0, "1700", "500", "50", "90", "0x20")
    tel = parse_telemetry(_csv(rows))
    assert tel.interval_s == 1.0
    windows = [
        RepeatWindow("warmup", 1, 1000.0, 1008.0),
        RepeatWindow("measure", 1, 1008.0, 1014.0),
        RepeatWindow("measure", 2, 1014.0, 1029.0),
    ]
    metrics = repeat_metrics(tel, windows)
    assert metrics[("warmup", 1)]["throttle_s"] == 0
    first = metrics[("measure", 1)]
    assert first["throttle_s"] == pytest.approx(4.0)
    assert first["throttle_s.sw_power_cap"] == pytest.approx(4.0)
    assert first["throttle_s.hw_slowdown"] == pytest.approx(2.0)
    assert first["sm_clock_min_mhz"] == 1200
    second = metrics[("measure", 2)]
    assert second["throttle_s.sw_power_cap"] == pytest.approx(2.0)
    assert second["throttle_s.sw_thermal_slowdown"] == pytest.approx(1.0)
    assert second["throttle_s"] == pytest.approx(3.0)

    big, small = throttle_episodes(tel, windows)
    assert big.gpus == (2,)
    assert big.reasons == ("sw_power_cap", "hw_slowdown")
    assert (big.start, big.seconds) == (1010.0, 6.0)
    assert big.sm_clock_before_mhz == 1980 and big.clock_drop_mhz == 780
    assert big.measured_repeats == (1, 2) and big.measured_overlap_s == pytest.approx(6.0)
    assert small.gpus == (0,) and small.reasons == ("sw_thermal_slowdown",)
    assert small.seconds == 1.0 and small.clock_drop_mhz == 280
    assert small.to_dict()["measured_repeats"] == [2]
    # Warm-up repeats do not count as measured.
    assert throttle_episodes(tel, windows[:1])[0].measured_overlap_s == 0

    summary = energy_summary(metrics)
    assert summary["energy_j"] == pytest.approx((6 + 15) * 4 * 500 / 2)


def test_reason_names_decode_the_nvml_bitmask() -> None:
    assert reason_names(0x0) == []
    assert reason_names(0x4 | 0x40 | 0x1) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert reason_names(0x400) == ["bit_0x400"]


def test_the_older_column_name_and_unreadable_rows() -> None:
    text = "t,index,power.draw,clocks_throttle_reasons.active\n1.0,0,100,0x8\nbad\n2.0,x,1,0\n"
    text += "2.0,0,100,0x8\n"
    (episode,) = throttle_episodes(parse_telemetry(text))
    assert episode.reasons == ("hw_slowdown",)
    assert parse_telemetry("").gpus == {}

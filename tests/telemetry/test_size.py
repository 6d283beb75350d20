"""Hours of sampling stay small and quick to read: 10,000 samples x 8 GPUs through the writer."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.analyze.energy import RepeatWindow, read_telemetry, window_metrics
from orchestrator.runner.telemetry import DEFAULT_FIELDS, TelemetryFile, query_fields

SAMPLES, GPUS = 10_000, 8
SIZE_BOUND = 6_000_000  # bytes: ~75 bytes a row at the widest values nvidia-smi prints


def _line(i: int, gpu: int) -> str:
    # The widest realistic values: 4-digit clocks, 3-digit power, 6-digit MiB, a set reason.
    reasons = "0x0000000000000004" if i % 7 == 0 else "0x0000000000000000"
    power = f"{600 + (i + gpu) % 100}.{i % 100:02d}"
    return f"{gpu}, 1980, 3201, {power}, 700.00, 71, 100, 140512, {reasons}\n"


def test_ten_thousand_samples_of_eight_gpus(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.csv"
    writer = TelemetryFile(str(path), query_fields(DEFAULT_FIELDS))
    t0 = 1_764_000_000.0
    for i in range(SAMPLES):
        for gpu in range(GPUS):
            assert writer.write_line(t0 + i + gpu * 0.0004, _line(i, gpu), flush=False)
    writer.close()
    assert writer.rows == SAMPLES * GPUS
    size = path.stat().st_size
    assert size < SIZE_BOUND, f"{size} bytes for {SAMPLES} x {GPUS} samples"

    begin = time.perf_counter()
    tel = read_telemetry(path)
    parsed_s = time.perf_counter() - begin
    assert sorted(tel.gpus) == list(range(GPUS))
    assert all(len(s.t) == SAMPLES for s in tel.gpus.values())
    assert tel.gpus[3].power[5] == 608.05
    # Generous: the figure itself is measured in bench/telemetry_overhead.py.
    assert parsed_s < 5.0, f"parsing took {parsed_s:.2f} s"

    hour = window_metrics(tel, RepeatWindow("measure", 1, t0 + 100, t0 + 3700))
    assert 8 * 600 * 3600 < hour["energy_j"] < 8 * 700 * 3600
    assert hour["throttle_s.sw_power_cap"] > 0


def test_a_reopened_file_keeps_one_header(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.csv"
    for t in (1.0, 2.0):
        writer = TelemetryFile(str(path), ["index", "power.draw"])
        assert writer.write_line(t, "0, [N/A]\n")
        assert not writer.write_line(t, "Failed to initialize NVML: Unknown Error\n")
        writer.close()
    assert path.read_text().splitlines() == ["t,index,power.draw", "1.000,0,", "2.000,0,"]

"""What GPU telemetry costs: the sampler's CPU at 1 s intervals, the file's size and parse time.

    .venv/bin/python bench/telemetry_overhead.py [--seconds 20] [--interval 1.0] [--gpus 8]

1. Runs `python -m orchestrator.runner.telemetry` (the host-side sampler and nothing else) for
   `--seconds` against the simulated nvidia-smi first on PATH, and prints the sampler process's
   CPU time (`time.process_time()` from just before `start()` to after `stop()`, imports
   excluded) as a % of one core over the wall time. The goal is < 1%. nvidia-smi's own CPU is
   printed too; the simulator's (a Python process re-reading a JSON file per tick) says nothing
   about the real tool's.
2. Writes 10,000 samples x `--gpus` GPUs through the sampler's writer and prints the file size
   and how long `orchestrator.analyze.energy.read_telemetry` and `repeat_metrics` over ten
   repeats take.

Nothing is asserted: the figures are for reading (tests/telemetry checks behaviour).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.analyze.energy import RepeatWindow, read_telemetry, repeat_metrics  # noqa: E402
from orchestrator.runner.telemetry import DEFAULT_FIELDS, TelemetryFile, query_fields  # noqa: E402
from orchestrator.sim.smi import install_fake_nvidia_smi  # noqa: E402
from orchestrator.sim.state import write_host_state  # noqa: E402


def sampler_cpu(tmp: Path, seconds: float, interval: float, gpus: int) -> dict[str, float]:
    """Run the sampler alone against the sim nvidia-smi; its CPU and wall seconds."""
    state = write_host_state(tmp / "state.json", gpu_count=gpus)
    install_fake_nvidia_smi(tmp / "bin", sys.executable, state=state)
    env = {**os.environ, "PATH": f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ORCH_SIM_STATE", None)
    argv = [sys.executable, "-m", "orchestrator.runner.telemetry", str(tmp / "cell")]
    out = subprocess.run(
        [*argv, str(interval), str(seconds)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=True,
    )
    info: dict[str, float] = json.loads(out.stdout)
    return info


def file_figures(tmp: Path, gpus: int, samples: int = 10_000) -> dict[str, float]:
    """Size of `samples` x `gpus` rows and the time to read and aggregate them."""
    path = tmp / "big.csv"
    writer = TelemetryFile(str(path), query_fields(DEFAULT_FIELDS))
    t0 = 1_764_000_000.0
    for i in range(samples):
        for g in range(gpus):
            reasons = "0x0000000000000004" if i % 7 == 0 else "0x0000000000000000"
            line = f"{g}, 1980, 3201, {600 + (i + g) % 100}.{i % 100:02d}, 700.00, 71, 100, "
            writer.write_line(t0 + i, line + f"140512, {reasons}\n", flush=False)
    writer.close()
    begin = time.perf_counter()
    tel = read_telemetry(path)
    parsed = time.perf_counter() - begin
    begin = time.perf_counter()
    windows = [RepeatWindow("measure", n, t0 + 360 * n, t0 + 360 * n + 300) for n in range(10)]
    repeat_metrics(tel, windows)
    aggregated = time.perf_counter() - begin
    return {
        "bytes": path.stat().st_size,
        "rows": samples * gpus,
        "parse_s": parsed,
        "ten_windows_s": aggregated,
    }


def main() -> int:
    """Print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-telemetry-") as d:
        tmp = Path(d)
        info = sampler_cpu(tmp, args.seconds, args.interval, args.gpus)
        share = 100.0 * info["cpu_s"] / info["wall_s"]
        child = 100.0 * info["child_cpu_s"] / info["wall_s"]
        print(
            f"sampler: {info['rows']} rows in {info['wall_s']:.1f} s at {args.interval:g} s, "
            f"{info['cpu_s']:.3f} CPU s = {share:.3f}% of one core (goal < 1%)"
        )
        print(f"sim nvidia-smi (not the real tool's cost): {child:.2f}% of one core")
        figs = file_figures(tmp, args.gpus)
        print(
            f"10,000 samples x {args.gpus} GPUs: {figs['bytes'] / 1e6:.2f} MB "
            f"({figs['bytes'] / figs['rows']:.1f} bytes a row), read in {figs['parse_s']:.2f} s, "
            f"ten 5-minute repeats aggregated in {figs['ten_windows_s']:.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

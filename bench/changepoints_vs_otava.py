"""orch's change points against Apache Otava's on the same synthetic series.

    .venv/bin/python bench/changepoints_vs_otava.py [--series 200] [--runs 30 60] [--seed 0]

Otava (apache-otava, the Hunter paper's algorithm: E-Divisive on sliding windows, then a
t-test merge) is not an orch dependency: the first run makes a venv for it under
~/.cache/orch/otava-venv (`pip install --no-deps apache-otava` plus numpy and scipy, all
`otava.analysis` imports) and runs this script again there, with this checkout on PYTHONPATH.

Series: RUNS runs around 100 with 1-3 % noise (relative sd); half of them pure noise, the
others with one or two steps of 5-15 % either way at random runs (at least 5 runs from an end
and from each other). A detection counts when it is within one run of a true step. Printed per
noise level and method: recall (true steps found), precision (detections that are true),
noise series with any detection, and milliseconds per series. Methods: orch (its defaults:
kappa searched, a t test at the split with Bonferroni over the splits searched, Benjamini-
Hochberg at 5 % over the series's own tests, a 3 % step at least), Otava
`compute_change_points` (its defaults, max_pvalue 0.001, window 50) and with min_magnitude
0.03 (orch's floor), and Otava's `compute_change_points_orig` (plain E-Divisive, 100
permutations) at p 0.01. Figures only.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
VENV = Path.home() / ".cache" / "orch" / "otava-venv"


def _otava_python() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--no-deps", "apache-otava"], check=True)
        subprocess.run([*pip, "numpy==2.2.*", "scipy>=1.16,<1.17", "tabulate"], check=True)
    return python


def make_series(rng: random.Random, runs: int, noise: float) -> tuple[list[float], list[int]]:
    """One series and the indexes of its true steps (the first run of each new level)."""
    steps: list[int] = []
    if rng.random() < 0.5:
        for _ in range(rng.choice([1, 2])):
            for _try in range(50):
                at = rng.randrange(5, runs - 4)
                if all(abs(at - s) >= 5 for s in steps):
                    steps.append(at)
                    break
    factors = {s: 1 + rng.choice([-1, 1]) * rng.uniform(0.05, 0.15) for s in steps}
    level, out = 100.0, []
    for i in range(runs):
        level *= factors.get(i, 1.0)
        out.append(level * (1 + noise * rng.gauss(0, 1)))
    return out, sorted(steps)


def methods() -> dict[str, Callable[[Sequence[float]], list[int]]]:
    from otava.analysis import compute_change_points, compute_change_points_orig

    from orchestrator.analyze.changepoints import change_points

    return {
        "orch (t test, BH 5 %, >= 3 %)": lambda xs: [c.index for c in change_points(xs)],
        "otava (defaults)": lambda xs: [c.index for c in compute_change_points(xs)[0]],
        "otava (min_magnitude 0.03)": lambda xs: [
            c.index for c in compute_change_points(xs, min_magnitude=0.03)[0]
        ],
        "otava orig E-Divisive (p 0.01)": lambda xs: [
            c.index for c in compute_change_points_orig(xs, max_pvalue=0.01, seed=1)[0]
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--series", type=int, default=200)
    p.add_argument("--runs", type=int, nargs="+", default=[30, 60])
    p.add_argument("--noise", type=float, nargs="+", default=[0.01, 0.02, 0.03])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        import otava.analysis  # noqa: F401
    except ImportError:
        python = _otava_python()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        return subprocess.run([str(python), __file__, *(argv or sys.argv[1:])], env=env).returncode
    rows = []
    for runs in args.runs:
        for noise in args.noise:
            rng = random.Random(f"{args.seed}-{runs}-{noise}")
            cases = [make_series(rng, runs, noise) for _ in range(args.series)]
            for name, find in methods().items():
                true_pos = detections = steps_total = noisy_alarms = noise_series = 0
                started = time.monotonic()
                for values, steps in cases:
                    found = find(values)
                    detections += len(found)
                    steps_total += len(steps)
                    true_pos += sum(1 for s in steps if any(abs(f - s) <= 1 for f in found))
                    if not steps:
                        noise_series += 1
                        noisy_alarms += bool(found)
                ms = 1000 * (time.monotonic() - started) / len(cases)
                hits = sum(
                    1 for values, steps in cases for f in find(values)
                    if any(abs(f - s) <= 1 for s in steps)
                )  # fmt: skip
                rows.append([
                    runs, f"{100 * noise:g}%", name,
                    f"{true_pos / max(1, steps_total):.1%}",
                    f"{hits / max(1, detections):.1%}",
                    f"{noisy_alarms / max(1, noise_series):.1%}",
                    f"{ms:.1f}",
                ])  # fmt: skip
    headers = ["runs", "noise", "method", "recall", "precision", "alarms on noise", "ms/series"]
    print(tabulate(rows, headers=headers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The results history at scale: how long `orch history` takes for one series, and what
indexing one run adds to `orch apply`.

    .venv/bin/python bench/history_scale.py [--runs 10000] [--cells 50] [--metrics 20]

Fills a fresh history.sqlite (the real schema, results/history/db.py) with RUNS runs of CELLS
cells (each its own series, as a matrix's points are) and METRICS metrics per cell, then times
the series query plus change-point detection of one series (what `orch history` does per
series), cold and warm. Then makes a small real run with the simulator (2 cells) and times
`index_run` on it with its manifest check, as `orch apply` calls it. Figures only.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from orchestrator.analyze.history import steps_of
from orchestrator.results.history.db import open_db, series_of
from orchestrator.results.history.index import index_run
from orchestrator.results.read import open_run

ROOT = Path(__file__).resolve().parents[1]


def fill(db: Path, runs: int, cells: int, metrics: int) -> float:
    """Seconds to write the synthetic history."""
    started = time.monotonic()
    rng = random.Random(0)
    names = ["output_throughput", *(f"metric_{k}" for k in range(metrics - 1))]
    with open_db(db) as conn, conn.transaction():
        conn.executemany(
            "INSERT INTO series VALUES (?, ?, ?, ?, ?)",
            [
                (f"s{c}", "nightly", "gpu01", f"nightly point={c} @gpu01", "{}")
                for c in range(cells)
            ],
        )
        for r in range(runs):
            run_id = f"run-{r:06d}"
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, f"/results/{run_id}", "nightly", "", "", "passed", ""),
            )
            conn.executemany(
                "INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        f"c{c}",
                        f"s{c}",
                        f"{r:040x}",
                        None,
                        None,
                        "passed",
                        1e9 + 3600 * r,
                        f"cells/c{c}",
                    )
                    for c in range(cells)
                ],
            )
            level = 94.0 if r < runs * 0.7 else 62.0
            conn.executemany(
                "INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        f"c{c}",
                        m,
                        "tok/s",
                        level * (1 + 0.02 * rng.gauss(0, 1)),
                        5,
                        1.0,
                        0.0,
                        0.0,
                    )
                    for c in range(cells)
                    for m in names
                ],
            )
    return time.monotonic() - started


def one_series(db: Path, last: int | None) -> tuple[float, float, int, int]:
    """(query seconds, change-point seconds, points, change points) for series s7's
    output_throughput."""
    started = time.monotonic()
    with open_db(db) as conn:
        (series,) = series_of(conn, "output_throughput", series_ids=["s7"])
    queried = time.monotonic()
    if last:
        series.points[:] = series.points[-last:]
    steps = steps_of(series, "output_throughput")
    return queried - started, time.monotonic() - queried, len(series.points), len(steps)


def apply_index_cost(work: Path) -> float:
    """Milliseconds `index_run` takes on a real 2-cell run, its manifest checked."""
    repo = work / "repo"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "sim",
            "init-repo",
            str(repo),
            "--commits",
            "4",
            "--regress-at",
            "3",
        ],
        check=True,
        capture_output=True,
    )
    results = work / "results"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "apply",
            str(ROOT / "playbooks" / "demo.yml"),
            "-e",
            f"sim_repo={repo}",
            "-e",
            "time_scale=0.01",
            "-e",
            "repeats=2",
            "-e",
            "num_prompts=1",
            "-e",
            "output_len=64",
            "-e",
            "port=30177",
            "--cells",
            "spec=off,nccl=tuned",
            "--results",
            str(results),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    (run_dir,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    with open_run(run_dir) as run, open_db(work / "apply.sqlite") as conn:
        started = time.monotonic()
        index_run(conn, run)
        return 1000 * (time.monotonic() - started)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--cells", type=int, default=50)
    p.add_argument("--metrics", type=int, default=20)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="orch-history-scale-") as tmp:
        work = Path(tmp)
        db = work / "history.sqlite"
        filled = fill(db, args.runs, args.cells, args.metrics)
        size = db.stat().st_size / 2**20
        print(
            f"history: {args.runs} runs x {args.cells} cells x {args.metrics} metrics, "
            f"{size:.0f} MiB, written in {filled:.1f} s"
        )
        for last in (None, 365):
            for label in ("cold", "warm"):
                query, detect, points, found = one_series(db, last)
                window = f"last {last} runs" if last else "all runs"
                print(
                    f"one series ({window}, {label}): query {query:.2f} s, change points "
                    f"{detect:.2f} s, {points} points, {found} change point(s)"
                )
        print(f"indexing one 2-cell run as orch apply does: {apply_index_cost(work):.1f} ms")
    print(json.dumps({"runs": args.runs, "cells": args.cells, "metrics": args.metrics}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

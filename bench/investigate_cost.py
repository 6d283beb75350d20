"""What `orch investigate` spends on the demo's story, against a naive plan.

    .venv/bin/python bench/investigate_cost.py [--commits 32] [--regress-at 21] [--time-scale 0.02]

On this machine (localhost, the simulator): an `orch sim init-repo` repository, then the demo
playbook's GOOD cell (commit good, tuned NCCL, EAGLE-3 2-step) and BAD cell (commit bad, NCCL as
shipped, EAGLE-3 2-step) applied with 3 repeats each, then `orch investigate GOOD BAD`. Counted
from the bundles it wrote: cells, measured repeats and their bench seconds (the bench client's
own time per repeat, cell.json's bench step), and the investigation's wall time.

The naive plan is what a careful person does by hand without it: GOOD and BAD again, every
factor alone (BAD with it set back) at a fixed 6 repeats, then a bisect with fixed repeats (5 at
each end, 6 at each of ceil(log2(commits - 1)) inner commits). It is not run: it is costed at the
investigation's own measured median seconds per repeat, so both rows use one machine's speed.
Figures only: nothing here asserts on a timing.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
ORCH = [sys.executable, "-m", "orchestrator"]
NAIVE_REPEATS, NAIVE_END_REPEATS = 6, 5
GOOD, BAD = "commit=good,nccl=tuned,spec=eagle3-2", "commit=bad,nccl=default,spec=eagle3-2"


def orch(*args: str, cwd: Path) -> str:
    """One orch command to the end; its stdout (stderr shown on failure)."""
    done = subprocess.run([*ORCH, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"orch {' '.join(args[:2])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def repeat_seconds(run: Path) -> list[float]:
    """Every measured repeat's bench seconds in a run folder."""
    out: list[float] = []
    for cell_json in sorted(run.glob("cells/*/cell.json")):
        bench = (json.loads(cell_json.read_text()).get("steps") or {}).get("bench") or {}
        seconds = (bench.get("detail") or {}).get("seconds") or []
        out += [float(s) for s in seconds if isinstance(s, int | float)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--commits", type=int, default=32)
    p.add_argument("--regress-at", type=int, default=21)
    p.add_argument("--time-scale", default="0.02")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="orch-investigate-cost-") as tmp:
        work = Path(tmp)
        results = work / "results"
        repo = work / "repo"
        orch("sim", "init-repo", str(repo), "--commits", str(args.commits), "--regress-at",
             str(args.regress_at), cwd=ROOT)  # fmt: skip
        common = ["-e", f"sim_repo={repo}", "-e", f"time_scale={args.time_scale}", "-e",
                  "repeats=3", "-e", "num_prompts=2", "-e", "output_len=256", "-e",
                  f"port={free_port()}", "-e", f"sim_dest=.orch/bench-investigate/{work.name}",
                  "--results", str(results)]  # fmt: skip
        sides = []
        for cells in (GOOD, BAD):
            before = set(results.iterdir()) if results.is_dir() else set()
            orch("apply", str(ROOT / "playbooks" / "demo.yml"), *common, "--cells", cells, cwd=ROOT)
            (run,) = [p for p in set(results.iterdir()) - before if p.is_dir()]
            (cell,) = (run / "cells").iterdir()
            sides.append(str(cell))
        before = set(results.iterdir())
        started = time.monotonic()
        orch("investigate", *sides, "--results", str(results), cwd=ROOT)
        wall = time.monotonic() - started
        made = sorted(set(results.iterdir()) - before)
        (folder,) = [r for r in made if (r / "investigation.json").is_file()]
        doc = json.loads((folder / "investigation.json").read_text())
        seconds = [s for r in made for s in repeat_seconds(r)]
        cells = sum(len(list(r.glob("cells/*/cell.json"))) for r in made)
    per_repeat = statistics.median(seconds)
    factors = sum(1 for f in doc["factors"] if f["testable"])
    inner = math.ceil(math.log2(max(2, args.commits - 1)))
    naive_repeats = 2 * NAIVE_REPEATS + factors * NAIVE_REPEATS
    naive_repeats += 2 * NAIVE_END_REPEATS + inner * NAIVE_REPEATS
    naive_cells = 2 + factors + 2 + inner
    print(f"verdict: {doc['verdict']}\n")
    rows = [
        ["orch investigate (measured)", cells, len(seconds), f"{sum(seconds):.1f}", f"{wall:.0f}"],
        ["naive plan (costed)", naive_cells, naive_repeats,
         f"{naive_repeats * per_repeat:.1f}", "-"],
    ]  # fmt: skip
    print(tabulate(rows, headers=["plan", "cells", "repeats", "bench s", "wall s"]))
    print(
        f"\n{factors} testable factors, {args.commits} commits; a repeat's bench seconds "
        f"(median, measured) {per_repeat:.3f} at time scale {args.time_scale}; bench seconds "
        f"{100 * (sum(seconds) / (naive_repeats * per_repeat) - 1):+.0f}% against the naive plan"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How often `orch bisect`'s noise-aware search names the right commit, and what it costs.

    .venv/bin/python bench/bisect_accuracy.py [--trials 100] [--commits 32 64]
        [--noise 0.01 0.02 0.05] [--end-repeats 5] [--repeats 6] [--max-runs 2]
        [--error 0.001] [--e2e K]

For every repo size N, noise level and scenario, `--trials` seeded trials: the regression sits at
a random commit, and the REAL search (`orchestrator.execute.bisect.search.bisect`, the CLI's default
policy unless told otherwise) measures each commit with the throughput the simulator's
performance model (`orchestrator.sim.model`) predicts for that commit's parameters (good, or the
regressed ones `orch sim init-repo` writes), EAGLE-3 2-step at tp 8 with tuned NCCL, times
(1 + a seeded gaussian of the given relative noise) per repeat. Printed per row: how often the
first bad commit named is the right one, how often the search refused (ends not separated) or
gave a skip range, the mean and max number of tested commits (points) against
ceil(log2 N) + 2, the mean cell runs, the mean benchmark repeats spent, and the mean bench
seconds: each repeat costs the demo's 4 requests x 512 output tokens at the throughput it
measured, the GPU time a repeat holds. A run at an inner commit stops once the sequential test
decides (`run_until_decided`, what the runner does on the host); run against a search without
that (an older orch on the path), every run takes all its repeats.

Scenarios: the demo's regression (verify 19 -> 29 ms, -33%) and a small one (verify 19 -> 20 ms,
-4.7%), where noise starts to matter.

`--e2e K` also runs K real `orch bisect` commands on the simulator on localhost (a fresh
`orch sim init-repo` repo of the first --commits size per run, regression at a seeded random
commit, time scale 0.05) and prints the same figures with the wall time. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import yaml  # noqa: E402

from orchestrator.execute.bisect.search import BisectError, BisectPolicy, BisectResult, bisect  # noqa: E402

try:  # the sequential stop (absent from an older search, whose runs take all their repeats)
    from orchestrator.execute.bisect.search import run_until_decided
except ImportError:  # pragma: no cover

    def run_until_decided(draw: Any, repeats: int, ends: Any) -> list[float]:  # type: ignore[misc]
        return [draw() for _ in range(repeats)]


from orchestrator.sim import model as m  # noqa: E402
from orchestrator.sim.repo import apply_bug, init_repo  # noqa: E402

TUNED_NCCL = m.DEMO_TUNED_NCCL
EAGLE3_2 = m.DEMO_EAGLE3_2
SCENARIOS = (("verify 19->29 ms", "verify"), ("verify 19->20 ms", "verify:20"))
# What one repeat of the demo asks of the GPU: 4 requests of 512 output tokens, one at a time.
TOKENS_PER_REPEAT = 4 * 512


def model_throughputs(
    bug: str, input_len: int = 1024, output_len: int = 512
) -> tuple[float, float]:
    """(good, regressed) output tok/s as the simulator's model predicts them, without noise."""
    good = m.model_params()
    bad = apply_bug(good, bug)
    return (
        m.predict_output_throughput(good, EAGLE3_2, TUNED_NCCL, input_len, output_len),
        m.predict_output_throughput(bad, EAGLE3_2, TUNED_NCCL, input_len, output_len),
    )


@dataclass
class Tally:
    """One row of the table."""

    trials: int = 0
    right: int = 0
    wrong: int = 0
    refused: int = 0
    ranges: int = 0
    confirmed: int = 0  # answers confirmed beside their parent (search.py's confirmation)
    points: list[int] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    repeats: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)

    def add(self, result: BisectResult | None, truth: str, wall: float = 0.0) -> None:
        """Count one trial (None: the search refused to start)."""
        self.trials += 1
        self.walls.append(wall)
        if result is None:
            self.refused += 1
            return
        if result.first_bad == truth:
            self.right += 1
        elif result.first_bad is None:
            self.ranges += 1
        else:
            self.wrong += 1
        self.confirmed += bool(getattr(result, "confirmed", False))
        # the probes after a confirmed answer look for a revert: not the search's points
        self.points.append(len([p for p in result.points if not getattr(p, "probe", False)]))
        self.runs.append(result.cell_runs)
        self.repeats.append(sum(len(p.values) for p in result.points))
        self.seconds.append(
            sum(TOKENS_PER_REPEAT / v for p in result.points for v in p.values if v > 0)
        )

    def row(self, label: Sequence[Any], bound: int) -> list[Any]:
        """The printed row."""

        def mean(xs: list[int] | list[float]) -> str:
            return f"{statistics.fmean(xs):.2f}" if xs else "-"

        return [
            *label,
            self.trials,
            f"{100 * self.right / self.trials:.1f}%" if self.trials else "-",
            self.wrong,
            self.confirmed,
            self.refused,
            self.ranges,
            mean(self.points),
            max(self.points, default=0),
            bound,
            mean(self.runs),
            mean(self.repeats),
            f"{statistics.fmean(self.seconds):.0f}" if self.seconds else "-",
        ]


def simulate(n: int, noise: float, bug: str, trials: int, policy: BisectPolicy, seed: int) -> Tally:
    """`trials` pure bisects over n commits with model throughputs and seeded noise."""
    good_tps, bad_tps = model_throughputs(bug)
    tally = Tally()
    commits = [f"{i:040x}" for i in range(n)]
    index = {c: i for i, c in enumerate(commits)}
    for trial in range(trials):
        rng = random.Random(f"{seed}-{n}-{noise}-{bug}-{trial}")
        regress = rng.randrange(1, n)  # commits[0] is good, commits[-1] bad

        def measure(
            commit: str, repeats: int, ends: Any = None, rng: random.Random = rng, r: int = regress
        ) -> list[float]:
            mean = good_tps if index[commit] < r else bad_tps
            return run_until_decided(lambda: mean * (1 + rng.gauss(0.0, noise)), repeats, ends)

        try:
            result: BisectResult | None = bisect(commits, measure, policy)
        except BisectError:
            result = None
        tally.add(result, commits[regress])
    return tally


# -- --e2e: real `orch bisect` runs on localhost ------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _playbook(path: Path, repo: Path, port: int) -> Path:
    data: dict[str, Any] = {
        "name": "bisect-accuracy",
        "vars": {"sim_repo": str(repo), "port": port, "time_scale": "0.05"},
        "matrix": {"commit": ["good", "bad"]},
        "repo": {"url": "{{ sim_repo }}", "dest": ".orch/bench/sglang-sim",
                 "version": "{{ matrix.commit }}", "setup": "sh setup.sh"},
        "env": {"ORCH_SIM_TIME_SCALE": "{{ time_scale }}", **TUNED_NCCL},
        "server": {
            "adapter": "sglang",
            "launcher": ["{{ orch_python }}", "-m", "orchestrator.sim", "serve"],
            "args": {"model-path": "/models/Kimi-K2.5", "host": "127.0.0.1", "port": "{{ port }}",
                     "tp-size": 8, "disable-custom-all-reduce": True,
                     "speculative-algorithm": "EAGLE3",
                     "speculative-draft-model-path": "/models/Kimi-K2.5-EAGLE3",
                     "speculative-num-steps": 2, "speculative-eagle-topk": 1,
                     "speculative-num-draft-tokens": 3},
            "ready": {"timeout": 60},
        },
        "bench": {
            "adapter": "sglang.bench_serving",
            "launcher": ["{{ orch_python }}", "-m", "orchestrator.sim", "bench"],
            "args": {"dataset-name": "random-ids", "random-input-len": 1024,
                     "random-output-len": 128, "random-range-ratio": 1, "num-prompts": 2,
                     "max-concurrency": 1},
            "warmup": 1,
        },
        "snapshot": {"pip_freeze": False, "topo": False},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def e2e(k: int, n: int, policy: BisectPolicy, seed: int) -> Tally:
    """K real `orch bisect` runs on the simulator on localhost."""
    tally = Tally()
    for trial in range(k):
        rng = random.Random(f"e2e-{seed}-{n}-{trial}")
        regress_at = rng.randrange(2, n + 1)  # 1-based, as init-repo counts
        with tempfile.TemporaryDirectory(prefix="orch-bisect-acc-") as tmp_name:
            tmp = Path(tmp_name)
            repo = init_repo(tmp / "repo", commits=n, regress_at=regress_at, seed=trial)
            playbook = _playbook(tmp / "playbook.yml", repo.path, _free_port())
            (tmp / "home").mkdir()
            env = {**os.environ, "HOME": str(tmp / "home")}
            env.pop("ORCH_SIM_STATE", None)
            argv = [sys.executable, "-m", "orchestrator", "bisect", str(playbook),
                    "--cell", "commit=good", "--good", "good", "--bad", "bad",
                    "--end-repeats", str(policy.end_repeats), "--repeats", str(policy.repeats),
                    "--max-runs", str(policy.max_runs_per_point),
                    "--results", str(tmp / "results")]  # fmt: skip
            started = time.monotonic()
            proc = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True)
            wall = time.monotonic() - started
            runs = [p for p in (tmp / "results").glob("*") if (p / "bisect.json").is_file()]
            if proc.returncode != 0 or not runs:
                print(f"  e2e trial {trial}: rc {proc.returncode}: {proc.stderr.strip()[-300:]}")
                tally.add(None, repo.regress, wall)
                continue
            doc = json.loads((runs[0] / "bisect.json").read_text())
            res = doc["result"]
            result = BisectResult(
                first_bad=res["first_bad"],
                last_good=res["last_good"],
                points=[_point(p) for p in res["points"]],
                good_mean=res["good_mean"],
                bad_mean=res["bad_mean"],
                noise=res["noise"],
                cell_runs=res["cell_runs"],
                message=res["message"],
            )
            tally.add(result, repo.regress, wall)
            print(
                f"  e2e trial {trial}: regression at #{regress_at}, "
                f"{'right' if result.first_bad == repo.regress else 'WRONG'}, "
                f"{len(result.points)} points, {result.cell_runs} runs, noise "
                f"{100 * result.noise / max(result.good_mean, 1e-9):.1f}% of good, {wall:.0f} s"
            )
    return tally


def _point(p: dict[str, Any]) -> Any:
    from orchestrator.execute.bisect.search import Point

    return Point(p["commit"], p["index"], list(p.get("values") or []), p.get("verdict"),
                 p.get("z"), bool(p.get("uncertain")), int(p.get("runs") or 0))  # fmt: skip


HEADERS = ["N", "scenario", "noise", "trials", "right", "wrong", "confirmed", "refused", "range",
           "points", "max", "log2N+2", "runs", "repeats", "bench s"]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table (and the e2e rows with --e2e)."""
    from tabulate import tabulate

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--commits", type=int, nargs="+", default=[32, 64])
    p.add_argument("--noise", type=float, nargs="+", default=[0.01, 0.02, 0.05])
    default = BisectPolicy()
    p.add_argument("--end-repeats", type=int, default=default.end_repeats)
    p.add_argument("--repeats", type=int, default=default.repeats)
    p.add_argument("--max-runs", type=int, default=default.max_runs_per_point)
    p.add_argument("--error", type=float, default=getattr(default, "error", None))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--e2e", type=int, default=0, metavar="K", help="K real orch bisect runs")
    args = p.parse_args(argv)
    chosen: dict[str, Any] = {"error": args.error} if args.error is not None else {}
    policy = BisectPolicy(
        end_repeats=args.end_repeats,
        repeats=args.repeats,
        max_runs_per_point=args.max_runs,
        **chosen,
    )
    for label, bug in SCENARIOS:
        good, bad = model_throughputs(bug)
        print(f"{label}: model {good:.2f} -> {bad:.2f} tok/s ({100 * (bad / good - 1):+.1f}%)")
    print(
        f"policy: end repeats {policy.end_repeats}, repeats {policy.repeats}, max runs per point "
        f"{policy.max_runs_per_point}, z threshold {policy.z_threshold:g}, "
        f"error per call {getattr(policy, 'error', '-')}\n"
    )
    rows = []
    started = time.monotonic()
    for n in args.commits:
        bound = math.ceil(math.log2(n)) + 2
        for label, bug in SCENARIOS:
            for noise in args.noise:
                tally = simulate(n, noise, bug, args.trials, policy, args.seed)
                rows.append(tally.row([n, label, f"{100 * noise:g}%"], bound))
    print(tabulate(rows, headers=HEADERS))
    print(
        f"\nright: first bad commit named correctly; confirmed: answers confirmed beside their "
        f"parent; range: a skip range instead; points: searched commits (ends included, probes "
        f"not), mean; runs: cell runs; repeats: benchmark repeats; bench s: "
        f"their GPU seconds. "
        f"({time.monotonic() - started:.1f} s)"
    )
    if args.e2e:
        n = args.commits[0]
        print(f"\n--e2e {args.e2e}: real orch bisect on the simulator, N={n}, time scale 0.05")
        tally = e2e(args.e2e, n, policy, args.seed)
        row = tally.row([n, "sim repo (verify 19->29)", "real"], math.ceil(math.log2(n)) + 2)
        print(tabulate([row], headers=HEADERS))
        if tally.walls:
            print(f"wall per bisect: mean {statistics.fmean(tally.walls):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

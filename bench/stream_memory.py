"""The controller's peak memory for a run whose cells send large archives (issue 23, item 6).

    .venv/bin/python bench/stream_memory.py [--mb 100] [--cells 2] [--repo PATH]

Runs `orch apply` (a subprocess, on the local host) of a generic bench that prints MB
megabytes of random bytes, so each cell's archive is about that large, and prints the
controller's own peak RSS (its VmHWM, sampled until it exits) and the wall time. `--repo` runs
another checkout's orch (an older commit, for a before/after figure) with the same playbook.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _hwm_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM, kB) so far; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="megabytes each cell prints")
    parser.add_argument("--cells", type=int, default=2)
    parser.add_argument("--repo", type=Path, default=ROOT, help="the orch checkout to run")
    args = parser.parse_args()
    code = (
        "import os, sys; n = int(sys.argv[1]) << 20\n"
        "while n > 0:\n    k = min(n, 1 << 20); sys.stdout.buffer.write(os.urandom(k)); n -= k\n"
        "print(); print('x 1')"
    )
    with tempfile.TemporaryDirectory(prefix="orch-bench-mem-") as tmp:
        work = Path(tmp)
        playbook = {
            "name": "stream-memory",
            "matrix": {"i": list(range(args.cells))},
            "bench": {
                "command": [sys.executable, "-c", code, str(args.mb), "{{ matrix.i }}"],
                "metrics": {"x": r"x ([0-9]+)"},
                "timeout": 900,
            },
            "snapshot": {"pip_freeze": False, "topo": False},
        }
        (work / "pb.yml").write_text(yaml.safe_dump(playbook))
        (work / "home").mkdir()
        env = {**os.environ, "HOME": str(work / "home"), "PYTHONPATH": str(args.repo)}
        argv = [sys.executable, "-m", "orchestrator", "apply", "pb.yml", "--results", "r"]
        started = time.monotonic()
        errors = (work / "stderr.txt").open("wb")  # a file: a full pipe would stall orch
        proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.DEVNULL,
                                stderr=errors)  # fmt: skip
        # VmHWM is the controller's own peak: ru_maxrss of wait4 would also count its children
        # (the local runner, which packs and sends each archive, and the bench)
        peak_kb = 0
        while proc.poll() is None:
            peak_kb = max(peak_kb, _hwm_kb(proc.pid))
            time.sleep(0.05)
        wall = time.monotonic() - started
        rc = proc.returncode
        errors.close()
        stderr = (work / "stderr.txt").read_text(errors="replace")
    peak_mb = peak_kb / 1024
    print(f"orch at {args.repo}: {args.cells} cells x {args.mb} MB printed each")
    print(f"  exit {rc}, wall {wall:.1f} s, controller peak RSS {peak_mb:.0f} MB")
    if rc != 0:
        print(stderr[-2000:])
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

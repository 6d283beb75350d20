"""Per-cell overhead of `orch apply` on the SSH test hosts: a no-op server and bench.

    .venv/bin/python bench/cell_overhead.py [--cells 24] [--hosts 3] [--snapshots]

Starts H real sshd hosts (tests/sshhosts.py), runs N cells spread over them through the
controller (in process), and prints: total wall time; per cell, the controller's wall time, the
server's and the bench's own time (ready step, bench exit.json) and the difference (orch's
overhead), with the runner's step times; and the number of remote commands per cell, counted
by wrapping each connection's `run` (and `get`/`put` for file transfers).
Snapshots are off by default (the probe's cost is its own figure: pass --snapshots).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import yaml  # noqa: E402
from sshhosts import SSHTestHosts  # noqa: E402

import orchestrator.execute.apply.outcomes as outcomes  # noqa: E402
import orchestrator.execute.apply.run as controller  # noqa: E402
from orchestrator.config.host import Host  # noqa: E402
from orchestrator.config.inventory.load import load_inventory  # noqa: E402
from orchestrator.config.playbook import load_playbook  # noqa: E402
from orchestrator.execute.apply.progress import Progress  # noqa: E402
from orchestrator.execute.transport.connect import Connection, connect  # noqa: E402
from orchestrator.plan.build import build_cells  # noqa: E402

NOOP_SERVER = """\
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("ready", flush=True)
s.serve_forever(poll_interval=0.05)
"""


class Counts:
    """Remote operations per phase ('host' before the first cell, then 'cell')."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_kind: Counter[str] = Counter()
        self.argv0: Counter[str] = Counter()

    def add(self, kind: str, what: str = "") -> None:
        with self.lock:
            self.by_kind[kind] += 1
            if what:
                self.argv0[what] += 1


def counting_connect(counts: Counts) -> Callable[..., Connection]:
    """`connect` whose connections count every run/get/put they do."""

    def wrapped(host: Host, **kwargs: Any) -> Connection:
        conn = connect(host, **kwargs)
        run, get, put = conn.run, conn.get, conn.put

        def run_counted(argv: Any, **kw: Any) -> Any:
            if str(argv[1]).endswith("runner.pyz"):
                label = f"runner.pyz {argv[2]}"
            else:
                label = " ".join(str(a) for a in argv[1:2]) + " (inline script)"
            counts.add("run", label)
            return run(argv, **kw)

        def get_counted(remote: str, local: Path) -> None:
            counts.add("get")
            get(remote, local)

        def put_counted(local: Path, remote: str) -> None:
            counts.add("put")
            put(local, remote)

        conn.run = run_counted  # type: ignore[method-assign]
        conn.get = get_counted  # type: ignore[method-assign]
        conn.put = put_counted  # type: ignore[method-assign]
        return conn

    return wrapped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=24, help="cells in all (default 24)")
    parser.add_argument("--hosts", type=int, default=3, help="SSH test hosts (default 3)")
    parser.add_argument("--snapshots", action="store_true", help="keep the pre/post probes")
    args = parser.parse_args()
    per_host = max(1, args.cells // args.hosts)
    total = per_host * args.hosts

    with tempfile.TemporaryDirectory(prefix="orch-overhead-") as tmp_name:
        tmp = Path(tmp_name)
        server = tmp / "noop_server.py"
        server.write_text(NOOP_SERVER)
        started_hosts = time.monotonic()
        hosts = SSHTestHosts(args.hosts, tmp / "hosts").start()
        try:
            print(
                f"{args.hosts} sshd hosts up in {time.monotonic() - started_hosts:.1f} s "
                f"({'network namespaces' if hosts.isolated else 'loopback ports'})"
            )
            ports = {h.name: 20000 + i for i, h in enumerate(hosts.hosts)}
            inventory_path = hosts.write_inventory(
                tmp / "hosts.yml",
                extra_host_vars={name: {"srv_port": p} for name, p in ports.items()},
            )
            playbook = {
                "name": "overhead",
                "matrix": {"i": list(range(per_host))},
                "vars": {"noop": str(server)},
                "server": {
                    "command": "{{ orch_python }} {{ noop }} {{ srv_port }}",
                    "port": "{{ srv_port }}",
                    "host": "127.0.0.1",
                    "ready": {"path": "/", "timeout": 10, "interval": 0.01},
                    "stop_grace": 3,
                },
                "bench": {"command": "true", "repeats": 1, "timeout": 10},
                "snapshot": {"pip_freeze": args.snapshots, "topo": args.snapshots},
                "timeouts": {"cell": 60},
            }
            playbook_path = tmp / "overhead.yml"
            playbook_path.write_text(yaml.safe_dump(playbook, sort_keys=False))
            loaded = load_playbook(playbook_path, {})
            inventory = load_inventory(inventory_path)
            cells = build_cells(loaded, inventory, limit=None)
            counts = Counts()
            run = controller.Run(
                playbook_name=loaded.name,
                playbook_files=loaded.files,
                playbook_dir=tmp,
                inventory=inventory,
                cells=cells,
                options=outcomes.ApplyOptions(results_dir=tmp / "results"),
                progress=Progress({h.name: per_host for h in hosts.hosts}, stream=io.StringIO()),
                secrets=[],
                opener=counting_connect(counts),
            )
            started = time.monotonic()
            outcome = run.execute()
            wall = time.monotonic() - started
        finally:
            hosts.stop()
        report(outcome, wall, total, args.hosts, counts)
    return 0 if outcome.ok else 1


def report(
    outcome: outcomes.RunOutcome, wall: float, total: int, nhosts: int, counts: Counts
) -> None:
    """Print the figures."""
    cell_s: list[float] = []
    own_server: list[float] = []
    own_bench: list[float] = []
    steps: dict[str, float] = {}
    for cid, o in outcome.cells.items():
        cell_dir = outcome.path / "cells" / cid
        doc = json.loads((cell_dir / "cell.json").read_text())
        # A cell that took its session's server over has no start of its own: from `ready`.
        start = doc["steps"]["server_start"].get("start") or doc["steps"]["ready"]["start"]
        server = float(doc["steps"]["ready"]["end"]) - float(start)
        bench = sum(
            float(json.loads(p.read_text())["seconds"])
            for p in (cell_dir / "bench").glob("*/exit.json")
        )
        cell_s.append(float(o.seconds or 0.0))
        own_server.append(server)
        own_bench.append(bench)
        for name, step in doc["steps"].items():
            if step.get("start") is not None and step.get("end") is not None:
                steps[name] = steps.get(name, 0.0) + float(step["end"]) - float(step["start"])
    overhead = [c - s - b for c, s, b in zip(cell_s, own_server, own_bench, strict=True)]
    passed = sum(o.status == "passed" for o in outcome.cells.values())
    print(f"cells: {total} over {nhosts} hosts ({passed} passed)")
    print(f"total wall: {wall:.2f} s  ({wall / total * nhosts:.3f} s per cell per host)")
    print(f"per cell (controller's view, mean / median): {statistics.mean(cell_s):.3f} / "
          f"{statistics.median(cell_s):.3f} s")  # fmt: skip
    print(f"  server own (start -> ready): {statistics.mean(own_server):.3f} s")
    print(f"  bench own (exit.json):       {statistics.mean(own_bench):.3f} s")
    print(f"  overhead:                    {statistics.mean(overhead):.3f} s mean, "
          f"{statistics.median(overhead):.3f} median, {max(overhead):.3f} max")  # fmt: skip
    print("  runner steps (mean s): " + ", ".join(
        f"{name} {sec / total:.3f}" for name, sec in steps.items()))  # fmt: skip
    runs = counts.by_kind["run"]
    per_cell_runs = counts.argv0["runner.pyz run"]
    host_runs = runs - per_cell_runs
    print(f"remote commands: {runs} in all = {per_cell_runs} cell runs "
          f"({per_cell_runs / total:.2f} per cell) + {host_runs} per-host "
          f"({host_runs / nhosts:.1f} per host: {_others(counts)})")  # fmt: skip
    print(f"file transfers: {counts.by_kind['get']} get ({counts.by_kind['get'] / total:.2f} "
          f"per cell), {counts.by_kind['put']} put")  # fmt: skip


def _others(counts: Counts) -> str:
    return ", ".join(f"{k} x{n}" for k, n in sorted(counts.argv0.items()) if k != "runner.pyz run")


if __name__ == "__main__":
    sys.exit(main())

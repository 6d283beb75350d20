"""orch against plain ssh on the same real sshd test hosts: wall time and overhead per cell.

    .venv/bin/python bench/vs_ssh.py [--cells 8] [--hosts 1,4] [--repeats 3] [--ready-interval S]

The job (issue 12): N cells per host; a cell checks out a pinned commit of a small local git
repo, starts a tiny HTTP server from it, waits until it answers, runs a 5-request bench (a tiny
Python client doing 5 GETs), stops the server and brings its output back. It is run three ways:

- the workload alone, locally: the plain-ssh cell script run by `bash` here, cells in sequence;
- plain ssh: per cell one `ssh host '<cell script>'` and one `ssh host cat <output>`, through a
  ControlMaster (ControlPersist=60); hosts in parallel, the cells of a host in sequence;
- orch: `orch apply` as a subprocess (the `.venv/bin/orch` next to this checkout) of a playbook
  with the repo pin, a generic server (`ready.url`), a generic bench and
  `snapshot: {pip_freeze: false, topo: false}`, N matrix points on every host; run twice: with
  `server.restart: per_cell` (a server start per cell, as plain ssh does: the overhead figure)
  and with the default `per_config` (the N cells share one server start); and once more per
  cell with the default snapshots (pip freeze, topology), the row `orch, default snapshots`.

Each repeat clones into a fresh directory on every host (both sides pay one clone per host).
Hosts come from tests/sshhosts.py (network namespaces when root, loopback ports otherwise); the
largest of --hosts is started once, and each size uses the first hosts. Printed, medians over
--repeats: wall seconds, overhead per cell beyond the workload ((wall - workload) / cells per
host) and the ratio orch / ssh. Figures only: nothing here asserts on a timing.
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import yaml  # noqa: E402
from sshhosts import SSHTestHost, SSHTestHosts  # noqa: E402

ORCH = ROOT / ".venv" / "bin" / "orch"
PYTHON = sys.executable  # the hosts share this machine's filesystem, so this path works there
REQUESTS = 5

# The server lives in the repo (the pinned commit is what runs); the same as cell_overhead.py's.
SERVER = """\
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

# The bench client: waits (10 ms polls) until the server answers, then times REQUESTS GETs.
CLIENT = f"""\
import json, sys, time, urllib.request
url = "http://127.0.0.1:%s/" % sys.argv[1]
deadline = time.monotonic() + 10
while True:
    try:
        urllib.request.urlopen(url, timeout=1).read()
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.01)
seconds = []
for _ in range({REQUESTS}):
    started = time.perf_counter()
    urllib.request.urlopen(url, timeout=5).read()
    seconds.append(time.perf_counter() - started)
print(json.dumps({{"requests": len(seconds), "mean_latency_s": sum(seconds) / len(seconds)}}))
"""


@dataclass
class Job:
    """What every side runs: the source repo, its pinned commit, the client, the ports."""

    tmp: Path
    repo: Path
    sha: str
    client: Path
    cells: int
    ports: dict[str, int]  # host name -> the server's port there
    ready_interval: float | None


@dataclass
class Figures:
    """Wall seconds per repeat: the local workload, and per host count, each side."""

    workload: list[float] = field(default_factory=list)
    ssh: dict[int, list[float]] = field(default_factory=dict)
    orch: dict[int, list[float]] = field(default_factory=dict)  # server.restart: per_cell
    sessions: dict[int, list[float]] = field(default_factory=dict)  # per_config: one start
    full: dict[int, list[float]] = field(default_factory=dict)  # per_cell, default snapshots


def make_repo(tmp: Path) -> tuple[Path, str]:
    """A small git repo with the server in it, two commits; the pinned one is the first."""
    repo = tmp / "src-repo"
    repo.mkdir()

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
            cwd=repo, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout.strip()

    git("init", "-q")
    (repo / "server.py").write_text(SERVER)
    git("add", "server.py")
    git("commit", "-q", "-m", "server")
    sha = git("rev-parse", "HEAD")
    (repo / "README").write_text("a later commit the cells must not run\n")
    git("add", "README")
    git("commit", "-q", "-m", "later")
    return repo, sha


def free_port() -> int:
    """A TCP port nobody on this machine listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cell_script(job: Job, base: str, index: int, port: int) -> str:
    """One plain cell: checkout, server in the background, wait, bench into a file, stop."""
    py = shlex.quote(PYTHON)
    return "\n".join(
        [
            "set -e",
            f"cd {base}",
            f"[ -d repo/.git ] || git clone -q {shlex.quote(str(job.repo))} repo",
            "cd repo",
            f"git checkout -q {job.sha}",
            f"{py} server.py {port} > server.log 2>&1 &",
            "pid=$!",
            f"until (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; do sleep 0.01; done",
            f"{py} {shlex.quote(str(job.client))} {port} > out-{index}.json",
            'kill "$pid"',
            'wait "$pid" || true',
        ]
    )


def check_output(text: str, where: str) -> None:
    """The client's line says it made every request (else the figures would be a failure's)."""
    try:
        ok = json.loads(text)["requests"] == REQUESTS
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise RuntimeError(f"{where}: unexpected bench output {text!r}")


def run_workload(job: Job, repeat: int) -> float:
    """The cells of one host run here by bash, with no ssh: the workload's own wall time."""
    base = job.tmp / f"local-r{repeat}"
    base.mkdir()
    port = free_port()
    started = time.monotonic()
    for index in range(job.cells):
        subprocess.run(["bash", "-c", cell_script(job, shlex.quote(str(base)), index, port)],
                       check=True)  # fmt: skip
        out = subprocess.run(["cat", str(base / "repo" / f"out-{index}.json")],
                             capture_output=True, text=True, check=True)  # fmt: skip
        check_output(out.stdout, "local")
    return time.monotonic() - started


def ssh_argv(hosts: SSHTestHosts, host: SSHTestHost, control: Path, command: str) -> list[str]:
    """`ssh` through this host's ControlMaster, running `command` (a shell string)."""
    master = ["-o", "ControlMaster=auto", "-o", f"ControlPath={control}/%C",
              "-o", "ControlPersist=60"]  # fmt: skip
    return ["ssh", *master, *hosts.ssh_argv(host, command)[1:]]


def run_ssh(job: Job, hosts: SSHTestHosts, chosen: Sequence[SSHTestHost], repeat: int) -> float:
    """Plain ssh: hosts in parallel, per cell one ssh running it and one `ssh cat` of its output."""
    control = job.tmp / f"cm-{repeat}-{len(chosen)}"  # short: a socket path has ~100 bytes
    control.mkdir()
    base = f'"$HOME"/vsssh/ssh-r{repeat}-h{len(chosen)}'
    errors: list[BaseException] = []

    def one_host(host: SSHTestHost) -> None:
        try:
            port = job.ports[host.name]
            prepare = f"mkdir -p {base}"
            subprocess.run(ssh_argv(hosts, host, control, prepare), check=True)
            for index in range(job.cells):
                script = cell_script(job, base, index, port)
                argv = ssh_argv(hosts, host, control, f"bash -c {shlex.quote(script)}")
                subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
                cat = ssh_argv(hosts, host, control, f"cat {base}/repo/out-{index}.json")
                out = subprocess.run(cat, capture_output=True, text=True, check=True)
                check_output(out.stdout, f"ssh {host.name}")
        except BaseException as exc:  # reported by the caller, after every thread ended
            errors.append(exc)

    threads = [threading.Thread(target=one_host, args=(h,)) for h in chosen]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    for host in chosen:  # the masters go, so the next repeat pays its connections again
        close = ["ssh", "-o", f"ControlPath={control}/%C", "-O", "exit", *hosts.ssh_argv(host)[1:]]
        subprocess.run(close, capture_output=True, check=False)
    if errors:
        raise RuntimeError(f"plain ssh failed: {errors[0]}") from errors[0]
    return wall


def orch_playbook(
    job: Job, repeat: int, nhosts: int, restart: str, snapshots: str = "light"
) -> dict[str, Any]:
    """The same job as an orch playbook (`restart: per_cell` starts a server per cell, as the
    plain-ssh side does; `per_config` lets the cells share one start)."""
    ready: dict[str, Any] = {"url": "http://127.0.0.1:{{ srv_port }}/", "timeout": 10}
    if job.ready_interval is not None:
        ready["interval"] = job.ready_interval
    return {
        "name": "vs-ssh",
        "hosts": "all",
        "matrix": {"i": list(range(job.cells))},
        "repo": {
            "url": str(job.repo),
            "dest": f"vsssh/orch-r{repeat}-h{nhosts}-{restart}-{snapshots}",
            "version": job.sha,
        },
        "server": {
            "command": "{{ orch_python }} server.py {{ srv_port }}",
            "ready": ready,
            "stop_grace": 3,
            "restart": restart,
        },
        "bench": {
            "command": f"{{{{ orch_python }}}} {job.client} {{{{ srv_port }}}}",
            "repeats": 1,
            "timeout": 30,
        },
        "snapshot": {"pip_freeze": snapshots == "default", "topo": snapshots == "default"},
        "timeouts": {"cell": 60},
    }


def run_orch(
    job: Job,
    hosts: SSHTestHosts,
    chosen: Sequence[SSHTestHost],
    repeat: int,
    restart: str,
    snapshots: str = "light",
) -> float:
    """`orch apply` as a subprocess on the chosen hosts; its wall time (start-up included)."""
    where = job.tmp / f"orch-r{repeat}-h{len(chosen)}-{restart}-{snapshots}"
    where.mkdir()
    inventory = {
        "all": {
            "hosts": {
                h.name: {**hosts.inventory_vars(h), "srv_port": job.ports[h.name]} for h in chosen
            }
        }
    }
    (where / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    playbook = orch_playbook(job, repeat, len(chosen), restart, snapshots)
    (where / "job.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    argv = [str(ORCH), "apply", "job.yml", "-i", "hosts.yml", "--results", "results"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=where, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"orch apply failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    outputs = sorted((where / "results").glob("*/cells/*/bench/*/stdout"))
    if len(outputs) != job.cells * len(chosen):  # every cell's output came back, in its bundle
        raise RuntimeError(
            f"orch: {len(outputs)} bench outputs in the bundle, not {job.cells * len(chosen)}"
        )
    for out in outputs:
        check_output(out.read_text(), f"orch {out}")
    return wall


def main() -> int:
    """Parse flags, start the hosts, run every side --repeats times, print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", type=int, default=8, help="cells per host (default 8)")
    parser.add_argument("--hosts", default="1,4", help="host counts, comma-separated (default 1,4)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side (medians)")
    parser.add_argument(
        "--ready-interval",
        type=float,
        default=None,
        help="orch's server.ready.interval (default: orch's own default)",
    )
    args = parser.parse_args()
    counts = sorted({int(n) for n in args.hosts.split(",") if n.strip()})
    if not counts or counts[0] < 1 or args.cells < 1 or args.repeats < 1:
        parser.error("--hosts, --cells and --repeats must be positive")
    if not ORCH.exists():
        parser.error(f"{ORCH} is missing: run scripts/bootstrap.sh")

    with tempfile.TemporaryDirectory(prefix="orch-vsssh-") as tmp_name:
        tmp = Path(tmp_name)
        repo, sha = make_repo(tmp)
        client = tmp / "client.py"
        client.write_text(CLIENT)
        started = time.monotonic()
        hosts = SSHTestHosts(counts[-1], tmp / "hosts").start()
        try:
            mode = "network namespaces" if hosts.isolated else "loopback ports"
            print(f"{counts[-1]} sshd hosts up in {time.monotonic() - started:.1f} s ({mode})")
            job = Job(
                tmp=tmp,
                repo=repo,
                sha=sha,
                client=client,
                cells=args.cells,
                ports={h.name: free_port() for h in hosts.hosts},
                ready_interval=args.ready_interval,
            )
            figures = Figures()
            for repeat in range(args.repeats):
                figures.workload.append(run_workload(job, repeat))
                for n in counts:
                    chosen = hosts.hosts[:n]
                    figures.ssh.setdefault(n, []).append(run_ssh(job, hosts, chosen, repeat))
                    figures.orch.setdefault(n, []).append(
                        run_orch(job, hosts, chosen, repeat, "per_cell")
                    )
                    figures.sessions.setdefault(n, []).append(
                        run_orch(job, hosts, chosen, repeat, "per_config")
                    )
                    figures.full.setdefault(n, []).append(
                        run_orch(job, hosts, chosen, repeat, "per_cell", "default")
                    )
                print(f"repeat {repeat + 1}/{args.repeats} done", flush=True)
        finally:
            hosts.stop()
    print_table(figures, args.cells, counts, args.repeats, args.ready_interval)
    return 0


def print_table(
    figures: Figures, cells: int, counts: Sequence[int], repeats: int, interval: float | None
) -> None:
    """Medians: wall s and overhead per cell for each side and host count, and orch / ssh."""
    workload = statistics.median(figures.workload)
    ready = "orch's default" if interval is None else f"{interval} s"
    print(f"\n{cells} cells per host, medians of {repeats}; orch: light snapshots unless said, "
          f"ready.interval {ready}")  # fmt: skip
    print(f"the workload alone, locally: {workload:.2f} s ({workload / cells:.3f} s per cell)")
    header = f"{'':<22}" + "".join(f"{f'{n} host(s): wall s':>20}{'overhead/cell s':>17}"
                                   for n in counts)  # fmt: skip
    print(header)
    sides = (
        ("plain ssh (2 per cell)", figures.ssh),
        ("orch, start per cell", figures.orch),
        ("orch, one start", figures.sessions),
        ("orch, default snapshots", figures.full),
    )
    for label, side in sides:
        cols = []
        for n in counts:
            wall = statistics.median(side[n])
            cols.append(f"{wall:>20.2f}{(wall - workload) / cells:>17.3f}")
        print(f"{label:<22}" + "".join(cols))
    for label, side in (
        ("per cell / ssh", figures.orch),
        ("one start / ssh", figures.sessions),
        ("default snaps / ssh", figures.full),
    ):
        ratio = []
        for n in counts:
            ssh, orch = statistics.median(figures.ssh[n]), statistics.median(side[n])
            over_ssh, over_orch = ssh - workload, orch - workload
            over = f"{over_orch / over_ssh:.2f}x" if over_ssh > 0 else "n/a"
            ratio.append(f"{orch / ssh:>19.2f}x{over:>17}")
        print(f"{label:<22}" + "".join(ratio))
    extra = []
    for n in counts:
        light = statistics.median(figures.orch[n]) - workload
        full = statistics.median(figures.full[n]) - workload
        extra.append(f"{n} host(s) {full / light:.2f}x" if light > 0 else f"{n} host(s) n/a")
    print("default / light snapshots, overhead: " + ", ".join(extra))


if __name__ == "__main__":
    sys.exit(main())

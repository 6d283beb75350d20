"""A host that goes silent (its runner frozen: as a cut link or a hung machine looks) is given up
after --silent-host-timeout, while the other hosts finish; nothing waits for TCP's retries."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

PLAYBOOK = {
    "name": "silent",
    "matrix": {"n": [1, 2]},
    "server": {
        "command": "{{ orch_python }} -m http.server {{ port }} --bind 127.0.0.1",
        "port": "{{ port }}",
        "host": "127.0.0.1",
        "ready": {"path": "/", "timeout": 20},
        "stop_grace": 3,
    },
    "bench": {
        # a request, then 2 s: long enough to freeze the runner in the middle of a cell
        "command": '{{ orch_python }} -c "import time, urllib.request; '
        "urllib.request.urlopen('http://127.0.0.1:{{ port }}/').read(); time.sleep(2); "
        "print('n={{ matrix.n }}')\"",
        "repeats": 1,
        "timeout": 30,
    },
    "snapshot": {"pip_freeze": False, "topo": False},
    "timeouts": {"cell": 60},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_silent_host_is_given_up_and_the_others_finish(tmp_path: Path) -> None:
    pidfile = tmp_path / "runner-b.pid"
    wrapper = tmp_path / "python-b"
    # host b's interpreter: the real one, which records the pid of the queue's runner
    wrapper.write_text(
        "#!/bin/sh\n"
        # the queue's command ends in `run` (the bootstrap execs the runner: the pid stays)
        'for last in "$@"; do :; done\n'
        f'if [ "$last" = run ]; then echo $$ > {pidfile}; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    inventory = {
        "all": {
            "hosts": {
                "a": {"ansible_connection": "local", "orch_workdir": str(tmp_path / "wa"),
                      "port": free_port()},
                "b": {"ansible_connection": "local", "orch_workdir": str(tmp_path / "wb"),
                      "port": free_port(), "ansible_python_interpreter": str(wrapper)},
            }
        }
    }  # fmt: skip
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(PLAYBOOK))
    argv = [sys.executable, "-m", "orchestrator", "apply", "play.yml", "-i", "hosts.yml",
            "--results", "results", "--silent-host-timeout", "3"]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    runner_pid = 0
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline, "host b's runner never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        runner_pid = int(pidfile.read_text())
        cell_dirs = tmp_path / "wb" / "runs"
        while not list(cell_dirs.glob("*/.*.partial/bench")):  # b's first cell is benching
            assert time.monotonic() < deadline, "host b's first cell never reached its bench"
            time.sleep(0.05)
        os.kill(runner_pid, signal.SIGSTOP)  # silent: no events, no heartbeats, link alive
        out, err = proc.communicate(timeout=90)
    finally:
        if runner_pid:
            os.kill(runner_pid, signal.SIGCONT)  # it then reads EOF and stops its server
        if proc.poll() is None:
            proc.kill()
    wall = time.monotonic() - started
    assert proc.returncode == 1, out + err
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    cells = json.loads((run / "run.json").read_text())["cells"]
    by_host = {h: {c["status"] for c in cells.values() if c["host"] == h} for h in "ab"}
    assert by_host == {"a": {"passed"}, "b": {"failed"}}, cells
    for entry in cells.values():
        if entry["host"] == "b":
            assert entry["failed_step"] == "connection"
            assert "the host went silent: nothing from its runner for 3 s" in entry["reason"]
    # given up after the limit, not after the kernel's retries or the cells' timeouts
    assert wall < 45, wall
    # the frozen runner, once thawed, sees its controller gone and cleans up
    deadline = time.monotonic() + 30
    while Path(f"/proc/{runner_pid}").exists() and _state(runner_pid) not in "ZX":
        assert time.monotonic() < deadline, "the thawed runner never ended"
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return stat[stat.rfind(")") + 2]

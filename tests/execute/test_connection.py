"""Connections against real processes and real sshd hosts (no mocks).

`PYTHONPATH=tests python tests/execute/test_connection.py` measures per-command latency
over one reused SSH connection (printed, never asserted).
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshhosts import SSHTestHosts

from orchestrator.config.host import Host
from orchestrator.errors import ConnectionFailure, ExecutionError, HostKeyError, OrchError
from orchestrator.execute.apply.pool import HostPool, StartSpacing
from orchestrator.execute.ship import ensure_runner, runner_path
from orchestrator.execute.transport.connect import (
    CommandTimeout,
    Connection,
    LocalConnection,
    SSHConnection,
    connect,
)

PY = sys.executable


def ssh_host(hosts: SSHTestHosts, which: str = "host1", **overrides: object) -> Host:
    """An inventory Host that reaches test host `which` with the test key and known_hosts."""
    test_host = hosts.host(which)
    fields: dict[str, object] = {
        "name": which,
        "vars": {},
        "groups": (),
        "connection": "ssh",
        "address": test_host.address,
        "port": test_host.port,
        "user": hosts.user,
        "key_file": str(hosts.user_key),
        "python": PY,
        "known_hosts": str(hosts.known_hosts),
    }
    fields.update(overrides)
    return Host(**fields)  # type: ignore[arg-type]


def local_host() -> Host:
    return Host(name="localhost", vars={}, groups=(), connection="local", python=PY)


def wait_for(predicate: object, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def shared_ssh(ssh_hosts: SSHTestHosts) -> Iterator[Connection]:
    conn = connect(ssh_host(ssh_hosts))
    yield conn
    conn.close()


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.ssh)])
def conn(request: pytest.FixtureRequest) -> Connection:
    if request.param == "local":
        return LocalConnection(local_host())
    connection: Connection = request.getfixturevalue("shared_ssh")
    return connection


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.ssh)])
def fresh_conn(request: pytest.FixtureRequest) -> Iterator[Connection]:
    """A connection of each kind that the test may close."""
    if request.param == "local":
        connection: Connection = LocalConnection(local_host())
    else:
        connection = connect(ssh_host(request.getfixturevalue("ssh_hosts"), "host2"))
    yield connection
    connection.close()


def home_of(connection: Connection, hosts: SSHTestHosts | None) -> Path:
    """Where the connection's $HOME is on this (shared) filesystem."""
    if isinstance(connection, SSHConnection):
        assert hosts is not None
        return hosts.host(connection.host.name).home
    return Path.home()


# -- behaviour shared by both kinds ----------------------------------------------------------


def test_run_returns_rc_stdout_stderr(conn: Connection) -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    result = conn.run([PY, "-c", code])
    assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.seconds > 0


def test_argv_arrives_literally(conn: Connection, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    args = ["a b", "it's", '"q"', f"$(touch {pwned})", f"; touch {pwned}", "*", "$HOME", "\\n", ""]
    code = "import json, sys; print(json.dumps(sys.argv[1:]))"
    result = conn.run([PY, "-c", code, *args])
    assert result.rc == 0, result.stderr
    assert json.loads(result.stdout) == args
    assert not pwned.exists()


def test_cwd_is_home(conn: Connection) -> None:
    code = "import os; print(os.getcwd() == os.path.expanduser('~'))"
    assert conn.run([PY, "-c", code]).stdout == "True\n"


def test_stdout_lines_stream_before_the_command_ends(conn: Connection, tmp_path: Path) -> None:
    # The program waits for a file that only our callback creates: streaming or it never ends.
    signal_file = tmp_path / "seen-first"
    code = (
        "import os, sys, time\n"
        "print('first', flush=True)\n"
        "deadline = time.time() + 10\n"
        "while not os.path.exists(sys.argv[1]) and time.time() < deadline: time.sleep(0.02)\n"
        "print('saw-file' if os.path.exists(sys.argv[1]) else 'no-file')\n"
    )
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        if line == "first":
            signal_file.touch()

    result = conn.run([PY, "-c", code, str(signal_file)], on_stdout_line=on_line, timeout=30)
    assert lines == ["first", "saw-file"]
    assert result.stdout == "first\nsaw-file\n"


def test_every_line_read_is_handled_before_run_returns(conn: Connection) -> None:
    """Issue 23 item 3: the local reader was given 1 s after the program's exit, while the
    controller still imported the last cell's archive from its last line: run() returned, the
    cell counted as "archive never arrived", and its folder still landed in the bundle."""
    handled: list[str] = []

    def slow(line: str) -> None:
        if line == "last":
            time.sleep(2.5)  # an import of a large archive
        handled.append(line)

    code = "print('first'); print('last')"
    result = conn.run([sys.executable, "-c", code], on_stdout_line=slow, timeout=60)
    assert result.rc == 0
    assert handled == ["first", "last"]


def test_a_program_that_reads_no_stdin_never_holds_up_a_stop(conn: Connection) -> None:
    """Issue 23 item 1: srun reads no stdin while its job waits in the queue; the stdin writer
    blocked on a full pipe, and closing stdin (a stop, Ctrl-C) waited on the writer for good:
    not even the deadline could act. Now the stop closes stdin at once and the deadline ends it."""
    stop = threading.Event()
    stop.set()
    started = time.monotonic()
    with pytest.raises(CommandTimeout):
        conn.run(
            [PY, "-c", "import time; time.sleep(20)"],
            stdin=b"x" * (4 << 20),  # far more than a pipe holds
            keep_stdin_open=True,
            timeout=2,
            stop=stop,
        )
    assert time.monotonic() - started < 15  # the program's own 20 s never had to pass


def test_partial_last_line_is_delivered(conn: Connection) -> None:
    lines: list[str] = []
    conn.run([PY, "-c", "import sys; sys.stdout.write('a\\nb')"], on_stdout_line=lines.append)
    assert lines == ["a", "b"]


def test_stdin_payload_then_eof(conn: Connection) -> None:
    payload = b"x" * 300_000 + b"\nend\n"  # larger than pipe and channel windows
    code = "import sys; data = sys.stdin.buffer.read(); print(len(data))"
    result = conn.run([PY, "-c", code], stdin=payload, timeout=30)
    assert result.stdout.strip() == str(len(payload))


def test_keep_stdin_open_until_stop(conn: Connection) -> None:
    code = (
        "import sys, time\n"
        "first = sys.stdin.readline().strip()\n"
        "print('got', first, flush=True)\n"
        "t = time.time(); rest = sys.stdin.read()\n"
        "print('eof after %.2f' % (time.time() - t), repr(rest), flush=True)\n"
    )
    stop = threading.Event()

    def on_line(line: str) -> None:
        if line.startswith("got"):
            threading.Timer(0.6, stop.set).start()

    result = conn.run(
        [PY, "-c", code],
        stdin=b'{"hello": 1}\n',
        keep_stdin_open=True,
        on_stdout_line=on_line,
        stop=stop,
        timeout=30,
    )
    got, eof = result.stdout.splitlines()
    assert got == 'got {"hello": 1}'
    assert eof.startswith("eof after ") and eof.endswith("''")
    assert float(eof.split()[2]) >= 0.4  # EOF only once stop was set


def test_close_gives_the_program_eof(
    fresh_conn: Connection, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pid_file, eof_file = tmp_path / "pid", tmp_path / "eof"
    code = (
        "import os, sys\n"
        "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "sys.stdin.read()\n"
        "open(sys.argv[2], 'w').write('eof')\n"
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fresh_conn.run(
                [PY, "-c", code, str(pid_file), str(eof_file)],
                keep_stdin_open=True,
                timeout=30,
            )
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text())
    pid = int(pid_file.read_text())
    assert pid_alive(pid)
    fresh_conn.close()
    assert wait_for(eof_file.exists), "the program never saw EOF"
    assert wait_for(lambda: not pid_alive(pid)), "the program outlived the connection"
    runner.join(timeout=10)
    assert not runner.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ConnectionFailure)


def test_timeout_raises_and_stops_the_program(
    fresh_conn: Connection, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pid_file = tmp_path / "pid"
    code = (
        "import os, sys, time\n"
        "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as caught:
        fresh_conn.run([PY, "-c", code, str(pid_file)], timeout=1.0)
    assert time.monotonic() - started < 8
    assert caught.value.result.stdout == "started\n"
    assert "timed out after 1 s" in str(caught.value)
    pid = int(pid_file.read_text())
    hosts = request.getfixturevalue("ssh_hosts") if isinstance(fresh_conn, SSHConnection) else None
    # sshd delivers the TERM signal request only with privilege separation (root, as in CI)
    if hosts is None or os.geteuid() == 0:
        assert wait_for(lambda: not pid_alive(pid)), "the program survived its timeout"


def test_put_get_round_trip(
    conn: Connection, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    hosts = request.getfixturevalue("ssh_hosts") if isinstance(conn, SSHConnection) else None
    top = f"orch-conn-test-{secrets.token_hex(4)}"
    source = tmp_path / "runner.py"
    source.write_bytes(b"#!/bin/sh\necho hi\n" + os.urandom(100_000))
    source.chmod(0o755)
    try:
        conn.put(source, f"{top}/lib/abc/runner.py")
        conn.put(source, f"~/{top}/other.py")
        landed = home_of(conn, hosts) / top / "lib" / "abc" / "runner.py"
        assert landed.read_bytes() == source.read_bytes()
        assert landed.stat().st_mode & 0o777 == 0o755
        assert (home_of(conn, hosts) / top / "other.py").is_file()
        assert not [p for p in landed.parent.iterdir() if p.name != "runner.py"]  # no tmp left
        back = tmp_path / "back" / "deep" / "copy.py"
        conn.get(f"{top}/lib/abc/runner.py", back)
        assert back.read_bytes() == source.read_bytes()
        absolute = tmp_path / "abs" / "dir" / "file.bin"
        conn.put(source, str(absolute))
        conn.get(str(absolute), tmp_path / "abs-back")
        assert (tmp_path / "abs-back").read_bytes() == source.read_bytes()
    finally:
        shutil.rmtree(home_of(conn, hosts) / top, ignore_errors=True)


def test_get_missing_file_is_an_error(conn: Connection, tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"not found|No such file|cannot get"):
        conn.get(f"does-not-exist-{secrets.token_hex(4)}", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_connect_local_gives_a_local_connection() -> None:
    assert isinstance(connect(local_host()), LocalConnection)


# -- ssh only --------------------------------------------------------------------------------


@pytest.mark.ssh
def test_one_connection_is_safe_across_threads(shared_ssh: Connection, tmp_path: Path) -> None:
    results: dict[int, str] = {}
    errors: list[BaseException] = []
    source = tmp_path / "f"
    source.write_text("payload")

    def work(n: int) -> None:
        try:
            results[n] = shared_ssh.run([PY, "-c", f"print({n})"]).stdout.strip()
            shared_ssh.put(source, str(tmp_path / f"put-{n}"))
            shared_ssh.get(str(tmp_path / f"put-{n}"), tmp_path / f"got-{n}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert results == {n: str(n) for n in range(8)}
    assert all((tmp_path / f"got-{n}").read_text() == "payload" for n in range(8))


@pytest.mark.ssh
def test_get_on_a_closed_connection_is_a_connection_failure(
    ssh_hosts: SSHTestHosts, tmp_path: Path
) -> None:
    """A fetch cut by a closed link says so (the controller reconnects or, after a second
    Ctrl-C, calls the cell interrupted); a missing file on a live link is not a lost link."""
    conn = connect(ssh_host(ssh_hosts, "host2"))
    source = tmp_path / "f"
    source.write_text("payload")
    conn.put(source, str(tmp_path / "there"))  # SFTP is open from here on
    with pytest.raises(ExecutionError) as missing:
        conn.get(str(tmp_path / "absent"), tmp_path / "x")
    assert not isinstance(missing.value, ConnectionFailure)
    conn.close()
    with pytest.raises(ConnectionFailure, match="cannot get"):
        conn.get(str(tmp_path / "there"), tmp_path / "back")
    assert not (tmp_path / "back").exists()


# Run on the host: the per-connection sshd processes above this one (not the listener).
_SSHD_SESSIONS = """
from pathlib import Path
pid, found = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[1], []
while int(pid) > 1:
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\\0", b" ").decode()
    if cmd.startswith("sshd:") and "[listener]" not in cmd and " -D " not in cmd:
        found.append(pid)
    pid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
print(" ".join(found))
"""


@pytest.mark.ssh
def test_get_over_a_dropped_link_is_a_connection_failure(
    ssh_hosts: SSHTestHosts, tmp_path: Path
) -> None:
    """The link drops (the host's sshd for it dies) with SFTP open: a lost connection, which
    the controller reconnects for, not a file it could not read."""
    conn = connect(ssh_host(ssh_hosts, "host2"))
    try:
        source = tmp_path / "f"
        source.write_text("payload")
        conn.put(source, str(tmp_path / "there"))  # SFTP is open from here on
        sessions = conn.run([PY, "-c", _SSHD_SESSIONS]).stdout.split()
        assert sessions, "no per-connection sshd above the remote command"
        for pid in sessions:  # the connection's own sshd processes: the TCP connection drops
            os.kill(int(pid), signal.SIGKILL)
        with pytest.raises(ConnectionFailure, match="cannot get"):
            conn.get(str(tmp_path / "there"), tmp_path / "back")
    finally:
        conn.close()


# Run as its own process: pytest replaces threading.excepthook inside tests.
_CLOSE_MID_GET = """
import json, sys, threading, time
from pathlib import Path
from orchestrator.config.host import Host
from orchestrator.execute.transport.connect import connect
fields, big, out = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
for attempt in range(5):
    conn = connect(Host(**fields))
    def fetch():
        try:
            conn.get(big, out / f"back-{attempt}")
        except Exception as exc:
            print("get raised", type(exc).__name__, flush=True)
    worker = threading.Thread(target=fetch)
    worker.start()
    time.sleep(0.05 + 0.05 * attempt)
    conn.close()
    worker.join(60)
    time.sleep(0.3)  # a dying prefetch thread prints now, if it would
"""


@pytest.mark.ssh
def test_closing_mid_get_prints_no_thread_traceback(
    ssh_hosts: SSHTestHosts, tmp_path: Path
) -> None:
    """A second Ctrl-C closes links mid-fetch: paramiko's prefetch thread must not spill a
    traceback over the terminal (the get itself raises, and that is reported)."""
    big = tmp_path / "big"
    big.write_bytes(os.urandom(64 * 1024 * 1024))
    host = ssh_host(ssh_hosts, "host2")
    fields = {f: getattr(host, f) for f in host.__dataclass_fields__}
    proc = subprocess.run(
        [sys.executable, "-c", _CLOSE_MID_GET, json.dumps(fields), str(big), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    assert "get raised ConnectionFailure" in proc.stdout, proc.stdout  # cut, and said so
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.ssh
def test_per_host_bin_dir_comes_first_on_path(ssh_hosts: SSHTestHosts) -> None:
    fake = ssh_hosts.host("host2").bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho fake nvidia-smi on $(hostname)\n")
    fake.chmod(0o755)
    try:
        with connect(ssh_host(ssh_hosts, "host2")) as host2:
            result = host2.run(["nvidia-smi"])
            assert result.rc == 0 and result.stdout.startswith("fake nvidia-smi on")
            path = host2.run(["sh", "-c", "echo $PATH"]).stdout.strip()
            assert str(ssh_hosts.host("host2").bin_dir) in path.split(":")
            if ssh_hosts.isolated:  # own $HOME, so no ~/.bashrc prepends anything
                assert path.split(":")[0] == str(ssh_hosts.host("host2").bin_dir)
                assert result.stdout.strip() == "fake nvidia-smi on host2"
        with connect(ssh_host(ssh_hosts, "host1")) as host1:
            assert host1.run(["nvidia-smi"]).rc == 127  # host1 has none
            state = host1.run(["sh", "-c", "echo $ORCH_SIM_STATE"]).stdout.strip()
            assert state == str(ssh_hosts.host("host1").state_file)
    finally:
        fake.unlink()


@pytest.mark.ssh
def test_unknown_host_key_is_refused_without_retry(ssh_hosts: SSHTestHosts, tmp_path: Path) -> None:
    known = ssh_hosts.write_known_hosts(tmp_path / "known", omit=["host1"])
    started = time.monotonic()
    with pytest.raises(HostKeyError) as caught:
        connect(
            ssh_host(ssh_hosts, known_hosts=str(known)),
            attempts=4,
            retry_initial_wait=10.0,
            retry_max_wait=10.0,
        )
    assert time.monotonic() - started < 8.0  # one retry would have waited >= 10 s
    message = str(caught.value)
    assert "host1" in message and "not in known_hosts" in message
    assert "ssh-keyscan" in message and "host_key_checking: false" in message


@pytest.mark.ssh
def test_changed_host_key_is_refused(ssh_hosts: SSHTestHosts, tmp_path: Path) -> None:
    known = ssh_hosts.write_known_hosts(tmp_path / "known", wrong_key_for=["host1"])
    started = time.monotonic()
    with pytest.raises(HostKeyError, match="CHANGED") as caught:
        connect(
            ssh_host(ssh_hosts, known_hosts=str(known)),
            retry_initial_wait=10.0,
            retry_max_wait=10.0,
        )
    assert time.monotonic() - started < 8.0  # no retry (it would wait >= 10 s)
    assert "man-in-the-middle" in str(caught.value)


@pytest.mark.ssh
def test_host_key_checking_off_connects_and_says_so(
    ssh_hosts: SSHTestHosts, tmp_path: Path
) -> None:
    known = ssh_hosts.write_known_hosts(tmp_path / "known", wrong_key_for=["host1"])
    host = ssh_host(ssh_hosts, known_hosts=str(known), host_key_checking=False)
    with connect(host) as connection:
        assert connection.host_key_verified is False
        assert connection.run(["true"]).rc == 0
    with connect(ssh_host(ssh_hosts)) as checked:
        assert checked.host_key_verified is True


@pytest.mark.ssh
def test_unreachable_host_fails_after_retries_in_bounded_time(ssh_hosts: SSHTestHosts) -> None:
    address, port = ssh_hosts.unreachable_address()
    host = ssh_host(ssh_hosts, address=address, port=port)
    started = time.monotonic()
    with pytest.raises(ConnectionFailure) as caught:
        connect(host, attempts=3, connect_timeout=2.0, retry_initial_wait=0.05, retry_max_wait=0.2)
    assert time.monotonic() - started < 10
    assert not isinstance(caught.value, HostKeyError)
    message = str(caught.value)
    assert f"{address}:{port}" in message and "host1" in message
    assert "after 3 attempts" in message and "connection refused" in message


def test_silent_server_times_out_with_a_clear_cause(tmp_path: Path) -> None:
    # A listener that accepts TCP but never sends an SSH banner.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        host = Host(name="silent", vars={}, groups=(), address="127.0.0.1", port=port)
        started = time.monotonic()
        with pytest.raises(ConnectionFailure) as caught:
            connect(
                host, attempts=2, connect_timeout=0.5, retry_initial_wait=0.05, retry_max_wait=0.2
            )
        assert time.monotonic() - started < 8
    assert "timed out" in str(caught.value) and "after 2 attempts" in str(caught.value)


@pytest.mark.ssh
def test_wrong_user_key_is_an_auth_failure_not_retried(
    ssh_hosts: SSHTestHosts, tmp_path: Path
) -> None:
    other_key = tmp_path / "other_key"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {other_key}")
    started = time.monotonic()
    with pytest.raises(ConnectionFailure, match="authentication") as caught:
        connect(
            ssh_host(ssh_hosts, key_file=str(other_key)),
            retry_initial_wait=10.0,
            retry_max_wait=10.0,
        )
    assert time.monotonic() - started < 8.0  # no retry (it would wait >= 10 s)
    assert not isinstance(caught.value, HostKeyError)


@pytest.mark.ssh
def test_ssh_config_alias_is_honoured(ssh_hosts: SSHTestHosts, tmp_path: Path) -> None:
    config = ssh_hosts.write_ssh_config(tmp_path / "ssh_config")
    bare = Host(name="alias-host2", vars={}, groups=())  # address, port, user, key: from config
    with connect(bare, ssh_config_path=config) as connection:
        assert connection.run([PY, "-c", "print('via alias')"]).stdout == "via alias\n"
        if ssh_hosts.isolated:
            assert connection.run(["hostname"]).stdout.strip() == "host2"


@pytest.mark.ssh
def test_proxy_jump_checks_both_host_keys(ssh_hosts: SSHTestHosts, tmp_path: Path) -> None:
    if not ssh_hosts.isolated:
        pytest.skip("needs namespace hosts (each sshd also listens on its own 127.0.0.1:22)")
    host1 = ssh_hosts.host("host1")
    inner_known = tmp_path / "inner_known"
    inner_known.write_text(f"127.0.0.1 {host1.host_key_pub}\n")
    config = ssh_hosts.write_ssh_config(tmp_path / "ssh_config")
    with config.open("a") as extra:
        extra.write(
            "\nHost jumped\n    HostName 127.0.0.1\n    Port 22\n    ProxyJump alias-host1\n"
            f"    User {ssh_hosts.user}\n    IdentityFile {ssh_hosts.user_key}\n"
            f"    UserKnownHostsFile {inner_known}\n"
        )
    with connect(Host(name="jumped", vars={}, groups=()), ssh_config_path=config) as connection:
        assert connection.run(["hostname"]).stdout.strip() == "host1"
    inner_known.write_text(f"127.0.0.1 {ssh_hosts.host('host3').host_key_pub}\n")  # wrong key
    with pytest.raises(HostKeyError, match="CHANGED"):
        connect(Host(name="jumped", vars={}, groups=()), ssh_config_path=config)


# -- HostPool --------------------------------------------------------------------------------


def test_host_pool_bounds_concurrency_and_keeps_failures_apart() -> None:
    hosts = [Host(name=f"h{i}", vars={}, groups=(), connection="local") for i in range(6)]
    lock = threading.Lock()
    active = {"now": 0, "max": 0}

    def work(host: Host) -> str:
        with lock:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
        time.sleep(0.2)
        with lock:
            active["now"] -= 1
        if host.name == "h3":
            raise RuntimeError("h3 broke")
        return host.name.upper()

    outcomes = HostPool(max_parallel=2, stagger=0.01).map(hosts, work)
    assert active["max"] == 2
    assert list(outcomes) == [h.name for h in hosts]
    assert outcomes["h1"].value == "H1" and outcomes["h1"].ok
    assert not outcomes["h3"].ok and "h3 broke" in str(outcomes["h3"].error)


def test_host_pool_staggers_starts() -> None:
    hosts = [Host(name=f"h{i}", vars={}, groups=(), connection="local") for i in range(4)]
    outcomes = HostPool(max_parallel=4, stagger=0.1).map(hosts, lambda h: h.name)
    turns = sorted(o.turn for o in outcomes.values())
    assert all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(turns)), turns


def _ctrl_c_soon(delay: float = 0.2) -> None:
    threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT)).start()


def test_host_pool_hands_ctrl_c_to_its_caller_and_goes_on_waiting() -> None:
    hosts = [Host(name=f"h{i}", vars={}, groups=(), connection="local") for i in range(3)]
    stop = threading.Event()
    calls: list[float] = []

    def interrupted() -> None:
        calls.append(time.monotonic())
        stop.set()

    def work(host: Host) -> str:
        assert stop.wait(10), "the pool never passed Ctrl-C on"
        return host.name

    _ctrl_c_soon()
    outcomes = HostPool(max_parallel=3).map(hosts, work, spaced=False, on_interrupt=interrupted)
    assert len(calls) == 1
    assert [o.value for o in outcomes.values()] == ["h0", "h1", "h2"]  # every worker finished


def test_host_pool_without_a_handler_ends_on_ctrl_c_once_its_workers_return() -> None:
    hosts = [Host(name=f"h{i}", vars={}, groups=(), connection="local") for i in range(2)]
    returned: list[str] = []

    def work(host: Host) -> None:
        time.sleep(0.5)
        returned.append(host.name)

    _ctrl_c_soon()
    with pytest.raises(KeyboardInterrupt):
        HostPool(max_parallel=2).map(hosts, work)
    assert sorted(returned) == ["h0", "h1"]  # no worker is left running behind the caller


def test_start_spacing_spaces_threads_and_refuses_negative_seconds() -> None:
    spacing = StartSpacing(0.1)
    turns: list[float] = []
    # the turns granted, not when each thread ran on: a loaded machine may run a thread late
    threads = [threading.Thread(target=lambda: turns.append(spacing.wait())) for _ in range(3)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    turns.sort()
    assert all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(turns)), turns
    assert time.monotonic() - started >= 0.2 - 1e-3  # the last waited its turn
    with pytest.raises(ValueError, match="0 or more"):
        StartSpacing(-1)


@pytest.mark.ssh
def test_host_pool_connects_to_every_host(ssh_hosts: SSHTestHosts) -> None:
    address, port = ssh_hosts.unreachable_address()
    hosts = [ssh_host(ssh_hosts, h.name) for h in ssh_hosts.hosts]
    hosts.append(ssh_host(ssh_hosts, "host1", name="nowhere", address=address, port=port))
    outcomes = HostPool(max_parallel=2).connect_all(
        hosts, attempts=2, retry_initial_wait=0.05, retry_max_wait=0.2
    )
    try:
        assert [name for name, o in outcomes.items() if o.ok] == ["host1", "host2", "host3"]
        assert isinstance(outcomes["nowhere"].error, ConnectionFailure)
        if ssh_hosts.isolated:
            names = {}
            for name, outcome in outcomes.items():
                if outcome.value is not None:
                    names[name] = outcome.value.run(["hostname"]).stdout.strip()
            assert names == {"host1": "host1", "host2": "host2", "host3": "host3"}
    finally:
        for outcome in outcomes.values():
            if outcome.value is not None:
                outcome.value.close()


def measure_latency(count: int = 50) -> None:
    """Print per-command latency over one reused SSH connection to a test host."""
    import tempfile

    with SSHTestHosts(1, Path(tempfile.mkdtemp())) as hosts:
        started = time.monotonic()
        connection = connect(ssh_host(hosts))
        connect_seconds = time.monotonic() - started
        for argv in (["true"], [PY, "-c", "pass"]):
            connection.run(argv)  # warm up
            samples = []
            for _ in range(count):
                t = time.monotonic()
                connection.run(argv)
                samples.append(time.monotonic() - t)
            samples.sort()
            print(
                f"{' '.join(argv)[-30:]:>30}: median {1000 * samples[len(samples) // 2]:.1f} ms, "
                f"min {1000 * samples[0]:.1f} ms, max {1000 * samples[-1]:.1f} ms (n={count})"
            )
        connection.close()
        print(f"connect: {1000 * connect_seconds:.0f} ms; netns hosts: {hosts.isolated}")


if __name__ == "__main__":
    measure_latency()


@pytest.mark.ssh
def test_host3_really_has_no_sftp_and_the_runner_still_ships(
    ssh_hosts: SSHTestHosts, tmp_path: Path
) -> None:
    """The test harness's host3 runs sshd without the SFTP subsystem, so every e2e test that
    runs cells there shows orch needs none: the runner ships through a command's stdin."""
    top = f".orch-ship-{secrets.token_hex(4)}"
    host = ssh_host(ssh_hosts, "host3", workdir=top)
    conn = connect(host)
    try:
        source = tmp_path / "f"
        source.write_text("payload")
        with pytest.raises(OrchError):
            conn.put(source, str(tmp_path / "there"))
        path = ensure_runner(conn)
        assert path == runner_path(host)
        ran = conn.run([host.python, path, "probe", "--no-pip-freeze", "--no-topo"], timeout=60)
        assert ran.rc == 0 and json.loads(ran.stdout)["hostname"]
        assert ensure_runner(conn) == path  # cached: not sent twice
    finally:
        conn.run(["rm", "-rf", top])
        conn.close()

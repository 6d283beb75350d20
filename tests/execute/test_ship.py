"""runner.pyz shipped and started in one command (the bootstrap), on a real local connection."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from orchestrator.config.host import Host
from orchestrator.errors import ExecutionError
from orchestrator.execute.ship import runner_archive, runner_invocation, runner_path
from orchestrator.execute.transport.local import LocalConnection

PYTHON38 = Path.home() / ".pyenv" / "versions" / "3.8.18" / "bin" / "python3.8"


def local_host(workdir: Path, python: str = "python3") -> Host:
    return Host(
        name="localhost",
        vars={},
        groups=(),
        connection="local",
        python=python,
        workdir=str(workdir),
    )


def probe(conn: LocalConnection, host: Host, stdin_prefix: bytes = b"") -> dict[str, object]:
    argv, shipped = runner_invocation(host, "probe", "--no-pip-freeze", "--no-topo")
    res = conn.run(argv, stdin=stdin_prefix or shipped, timeout=60)
    assert res.rc == 0, res.stderr
    data: dict[str, object] = json.loads(res.stdout)
    return data


@pytest.mark.parametrize(
    "python",
    [
        "python3",
        pytest.param(
            str(PYTHON38),
            marks=pytest.mark.skipif(not PYTHON38.exists(), reason="no Python 3.8 here"),
        ),
    ],
)
def test_the_bootstrap_ships_once_and_runs_the_runner(tmp_path: Path, python: str) -> None:
    host = local_host(tmp_path / "work", python)
    conn = LocalConnection(host)
    path = Path(os.path.expanduser("~")) / runner_path(host)
    assert not path.exists()
    assert probe(conn, host)["hostname"]
    assert path.read_bytes() == runner_archive()  # written where the runner is cached
    before = path.stat().st_mtime_ns
    assert probe(conn, host)["hostname"]
    assert path.stat().st_mtime_ns == before  # there already: not written again


def test_a_damaged_runner_is_refused_and_never_cached(tmp_path: Path) -> None:
    host = local_host(tmp_path / "work")
    conn = LocalConnection(host)
    argv, shipped = runner_invocation(host, "probe")
    damaged = bytes([shipped[0] ^ 0xFF]) + shipped[1:]
    res = conn.run(argv, stdin=damaged, timeout=60)
    assert res.rc != 0 and "runner.pyz arrived damaged" in res.stderr
    short = conn.run(argv, stdin=shipped[:100], timeout=60)
    assert short.rc != 0 and "stdin ended inside runner.pyz" in short.stderr
    assert not (Path(os.path.expanduser("~")) / runner_path(host)).exists()


def test_a_missing_interpreter_says_so(tmp_path: Path) -> None:
    host = dataclasses.replace(local_host(tmp_path / "work"), python="/nonexistent/python9")
    conn = LocalConnection(host)
    argv, shipped = runner_invocation(host, "probe")
    with pytest.raises(ExecutionError, match="nonexistent"):
        conn.run(argv, stdin=shipped, timeout=30)


def _unpacked(host: Host) -> Path:
    return Path(os.path.expanduser("~")) / (runner_path(host) + ".d")


def test_an_edited_cached_runner_is_unpacked_again_never_run(tmp_path: Path) -> None:
    """Issue 23 item 5: the bootstrap checked the bytes it received, then ran whatever the
    cache held: an edited module ran, a truncated one broke every later run for good."""
    host = local_host(tmp_path / "work")
    conn = LocalConnection(host)
    assert probe(conn, host)["hostname"]
    folder = _unpacked(host)
    main = folder / "__main__.py"
    original = main.read_bytes()
    main.write_text("import sys; print('PLANTED'); sys.exit(9)\n")
    (folder / "orchestrator" / "runner" / "extra.py").write_text("x = 1\n")
    assert probe(conn, host)["hostname"]  # the planted code did not run
    assert main.read_bytes() == original
    assert not (folder / "orchestrator" / "runner" / "extra.py").exists()
    module = folder / "orchestrator" / "runner" / "probe" / "gather.py"
    module.write_bytes(module.read_bytes()[:100])  # truncated
    assert probe(conn, host)["hostname"]
    pyz = Path(os.path.expanduser("~")) / runner_path(host)
    pyz.write_bytes(pyz.read_bytes()[:1000])  # the archive itself damaged in the cache
    assert probe(conn, host)["hostname"]
    assert pyz.read_bytes() == runner_archive()


def test_a_cache_writable_by_others_is_closed_and_one_of_another_user_refused(
    tmp_path: Path,
) -> None:
    host = local_host(tmp_path / "work")
    conn = LocalConnection(host)
    assert probe(conn, host)["hostname"]
    cache = _unpacked(host).parent
    cache.chmod(0o777)
    assert probe(conn, host)["hostname"]
    assert cache.stat().st_mode & 0o022 == 0
    if os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    os.chown(cache, 65534, 65534)  # nobody's
    argv, shipped = runner_invocation(host, "probe")
    res = conn.run(argv, stdin=shipped, timeout=60)
    assert res.rc != 0 and "is not a folder of this user" in res.stderr
    assert "orch_workdir" in res.stderr

"""`orch_executor: slurm` in an inventory: which hosts run through Slurm, with which options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config.host import DEFAULT_PENDING_TIMEOUT, SlurmOptions
from orchestrator.config.inventory.load import load_inventory
from orchestrator.errors import InputError, SourceLocation
from orchestrator.execute.transport.connect import LocalConnection, SlurmConnection, connect

INVENTORY = """\
cluster:
  vars:
    orch_executor: slurm
    slurm_partition: gpu
    slurm_gres: gpu:8
  hosts:
    login01:
      ansible_connection: local
      slurm_account: lab
      slurm_time: "1:00:00"
      slurm_nodes: 2
      slurm_extra: --exclusive --constraint="h100 x"
      slurm_pending_timeout: 30
    login02:
      ansible_host: login02.example
lab:
  hosts:
    box:
      ansible_connection: local
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_group_and_host_vars_declare_the_slurm_executor(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path / "inv.yml", INVENTORY))
    first, second, plain = (inventory.hosts[n] for n in ("login01", "login02", "box"))
    assert first.executor == second.executor == "slurm"
    assert first.connection == "local" and second.connection == "ssh"
    assert first.slurm == SlurmOptions(
        partition="gpu",
        account="lab",
        gres="gpu:8",
        time="1:00:00",
        nodes=2,
        extra=("--exclusive", "--constraint=h100 x"),
        pending_timeout=30.0,
    )
    assert second.slurm == SlurmOptions(partition="gpu", gres="gpu:8")
    assert second.slurm.pending_timeout == DEFAULT_PENDING_TIMEOUT
    assert plain.executor == "direct" and plain.slurm is None


def test_a_list_of_extra_options_and_no_pending_timeout(tmp_path: Path) -> None:
    text = (
        "all:\n  hosts:\n    l:\n      orch_executor: slurm\n"
        "      slurm_extra: [--exclusive, --mem=0]\n      slurm_pending_timeout: 0\n"
    )
    host = load_inventory(write(tmp_path / "inv.yml", text)).hosts["l"]
    assert host.slurm is not None
    assert host.slurm.extra == ("--exclusive", "--mem=0")
    assert host.slurm.pending_timeout is None  # 0: wait for resources as long as allowed


@pytest.mark.parametrize(
    ("value", "needle", "col"),
    [
        ("slurn", "unknown executor 'slurn' (orch runs commands direct or through slurm)", 22),
        ("[slurm]", "unknown executor ['slurm']", 22),
    ],
)
def test_an_unknown_executor_is_refused_where_it_was_set(
    tmp_path: Path, value: str, needle: str, col: int
) -> None:
    path = write(tmp_path / "inv.yml", f"all:\n  hosts:\n    l:\n      orch_executor: {value}\n")
    with pytest.raises(InputError) as info:
        load_inventory(path)
    assert info.value.exit_code == 2
    assert needle in info.value.message
    assert info.value.location == SourceLocation(str(path), 4, col)
    if value == "slurn":
        assert "slurm" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("slurm_nodes: 0", "expected a whole number of nodes (1 or more), got 0"),
        ("slurm_nodes: two", "expected a whole number of nodes"),
        ("slurm_pending_timeout: -1", "expected seconds (0 or more), got -1"),
        ("slurm_extra: {a: 1}", "expected srun options as a string or a list"),
        ("slurm_extra: '--x=\"open'", "cannot split slurm_extra like a shell"),
        ("slurm_gres: [gpu]", "expected a string"),
    ],
)
def test_bad_slurm_options_are_refused_in_the_group_vars_file(
    tmp_path: Path, line: str, needle: str
) -> None:
    inv = write(tmp_path / "inv.yml", "cluster:\n  hosts:\n    l:\n")
    vars_file = write(tmp_path / "group_vars" / "cluster.yml", f"orch_executor: slurm\n{line}\n")
    with pytest.raises(InputError) as info:
        load_inventory(inv)
    assert needle in info.value.message
    assert info.value.location is not None
    assert (info.value.location.file, info.value.location.line) == (str(vars_file), 2)


def test_slurm_vars_without_the_executor_change_nothing(tmp_path: Path) -> None:
    text = "all:\n  hosts:\n    l:\n      slurm_nodes: zero\n"
    host = load_inventory(write(tmp_path / "inv.yml", text)).hosts["l"]
    assert host.executor == "direct" and host.slurm is None


def test_connect_wraps_the_login_connection_for_a_slurm_host(tmp_path: Path) -> None:
    host = load_inventory(write(tmp_path / "inv.yml", INVENTORY)).hosts["login01"]
    with connect(host) as connection:
        assert isinstance(connection, SlurmConnection)
        assert isinstance(connection.login, LocalConnection)
        assert connection.host is host
        assert connection.options is host.slurm


def test_the_cli_exits_2_naming_the_inventory_line(tmp_path: Path) -> None:
    inv = write(tmp_path / "inv.yml", "all:\n  hosts:\n    l:\n      orch_executor: pbs\n")
    playbook = write(
        tmp_path / "pb.yml",
        "name: t\nserver: {command: 'true', port: 8000}\nbench: {command: 'true'}\n",
    )
    shown = subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", str(playbook), "-i", str(inv)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 2, shown.stderr
    assert f"{inv}:4" in shown.stderr
    assert "unknown executor 'pbs'" in shown.stderr
    assert "Traceback" not in shown.stderr

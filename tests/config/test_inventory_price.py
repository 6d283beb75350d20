"""`orch_gpu_hour_usd` in an inventory: what a host's GPU-hour costs, checked where it is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.inventory.connection import price_from_vars
from orchestrator.config.inventory.load import load_inventory
from orchestrator.errors import InputError, SourceLocation


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_group_price_reaches_its_hosts_and_a_host_price_wins(tmp_path: Path) -> None:
    inv = write(
        tmp_path / "inv.yml",
        "gpus:\n  vars:\n    orch_gpu_hour_usd: 2.5\n  hosts:\n    a:\n    b:\n"
        "      orch_gpu_hour_usd: '0'\nlab:\n  hosts:\n    c:\n",
    )
    hosts = load_inventory(inv).hosts
    assert hosts["a"].gpu_hour_usd == 2.5
    assert hosts["b"].gpu_hour_usd == 0.0  # free is a price; it is not "no price"
    assert hosts["c"].gpu_hour_usd is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [("-1", "-1"), ("two", "'two'"), ("[2]", "a list"), ("true", "true"), (".nan", "nan")],
)
def test_a_bad_price_is_refused_where_it_was_set(tmp_path: Path, value: str, shown: str) -> None:
    inv = write(tmp_path / "inv.yml", f"all:\n  hosts:\n    h:\n      orch_gpu_hour_usd: {value}\n")
    with pytest.raises(InputError) as info:
        load_inventory(inv)
    assert info.value.exit_code == 2
    assert f"expected USD per GPU-hour (a number, 0 or more), got {shown}" in info.value.message
    assert "host 'h'" in info.value.message
    assert info.value.key_path == "orch_gpu_hour_usd"
    assert info.value.location == SourceLocation(str(inv), 4, 26)


def test_a_bad_price_in_group_vars_names_that_file(tmp_path: Path) -> None:
    inv = write(tmp_path / "inv.yml", "cluster:\n  hosts:\n    l:\n")
    vars_file = write(tmp_path / "group_vars" / "cluster.yml", "x: 1\norch_gpu_hour_usd: -3\n")
    with pytest.raises(InputError) as info:
        load_inventory(inv)
    assert info.value.location is not None
    assert (info.value.location.file, info.value.location.line) == (str(vars_file), 2)


def test_a_bundles_recorded_vars_give_the_same_price() -> None:
    where = SourceLocation("run/inventory.json", 1, 1)
    assert price_from_vars("h", {"orch_gpu_hour_usd": "1.25", "x": 1}, where) == 1.25
    assert price_from_vars("h", {"x": 1}, where) is None
    with pytest.raises(InputError):
        price_from_vars("h", {"orch_gpu_hour_usd": -1}, where)

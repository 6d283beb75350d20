"""Bisect step cells: their ids, like planned ones, never depend on a secret value."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cell import BenchSpec, Cell, RepoPin
from orchestrator.config.host import Group, Host, Inventory
from orchestrator.execute.bisect.run import Bisection, BisectSetup


def _setup(token: str, *, in_inventory: bool = False) -> BisectSetup:
    """A bisect whose token comes from -e, or from the host's inventory vars only."""
    base = Cell(
        id="base",
        playbook="p",
        host="h",
        axes={"commit": "good"},
        repo=RepoPin(url=f"https://u:{token}@example.com/r.git", dest="/srv/r", version="good"),
        env={"NCCL_ALGO": "Ring"} if in_inventory else {"HF_TOKEN": token, "NCCL_ALGO": "Ring"},
        secrets=("HF_TOKEN", "hf_token"),
        bench=BenchSpec(argv=("bench", f"--token={token}")),
    )
    host_vars = {"hf_token": token} if in_inventory else {}
    host = Host(name="h", vars=host_vars, groups=(), connection="local")
    return BisectSetup(
        base=base,
        host=host,
        inventory=Inventory(hosts={"h": host}, groups={"all": Group("all", hosts=("h",))}),
        good="good",
        bad="bad",
        metric="x",
        results_dir=Path("results"),
        playbook_name="p",
        playbook_files=(),
        playbook_dir=Path(),
        argv=(),
        commit_axes=frozenset({"commit"}),
        secret_vars={} if in_inventory else {"hf_token": token},
    )


def test_bisect_step_ids_do_not_depend_on_secret_values() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    first = Bisection(_setup("hf_first_token_value"))._step_cell(sha, 3, 1)
    rotated = Bisection(_setup("hf_rotated_token_xyz"))._step_cell(sha, 3, 1)
    assert first.bench.argv[1] == "--token=hf_first_token_value"
    assert first.id == rotated.id
    other_commit = Bisection(_setup("hf_first_token_value"))._step_cell("f" * 40, 3, 1)
    assert other_commit.id != first.id


def test_bisect_step_ids_do_not_depend_on_an_inventory_secret() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    first = Bisection(_setup("hf_first_token_value", in_inventory=True))._step_cell(sha, 3, 1)
    rotated = Bisection(_setup("hf_rotated_token_xyz", in_inventory=True))._step_cell(sha, 3, 1)
    assert first.bench.argv[1] == "--token=hf_first_token_value"
    assert first.id == rotated.id

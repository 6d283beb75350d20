"""Running cells again from a bundle alone: `orch replay` and `orch audit --rerun`.

A bundle holds every rendered cell (plan.json and each cell.json), so nothing but the bundle is
needed, except secret values, which never reach a bundle: they come from the environment of the
person replaying, or the replay stops before anything runs.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.cell import Cell
from orchestrator.config.host import Group, Host, Inventory
from orchestrator.config.inventory.connection import executor_from_vars, price_from_vars
from orchestrator.config.patterns import select_hosts_checked
from orchestrator.errors import InputError, SourceLocation
from orchestrator.execute.apply.outcomes import ApplyOptions, RunOutcome
from orchestrator.execute.apply.run import Run
from orchestrator.execute.machine import machine_id
from orchestrator.plan.select import select_cells
from orchestrator.results.read import RunBundle
from orchestrator.runner.redaction import REDACTED
from orchestrator.secrets.values import extra_vars_in_argv, secrets_of_run


def restore_secrets(data: dict[str, Any], environ: Mapping[str, str] | None = None) -> Cell:
    """A recorded cell with its redacted env values taken from the environment again."""
    environ = os.environ if environ is None else environ
    env = dict(data.get("env") or {})
    missing = []
    for name, value in env.items():
        if value == REDACTED:
            if name in environ:
                env[name] = environ[name]
            else:
                missing.append(name)
    if missing:
        raise InputError(
            f"cell {data.get('id')} needs secret value(s) the bundle never holds: "
            + ", ".join(missing),
            hint="export them in this shell, then run again",
        )
    # A secret that was a playbook or host var went into argv or a URL: the bundle holds only
    # the marker, and running with it would fail in a way nothing explains.
    elsewhere = _redacted_paths({k: v for k, v in data.items() if k != "env"})
    if elsewhere:
        raise InputError(
            f"cell {data.get('id')} was recorded with secret values in "
            + ", ".join(elsewhere[:6])
            + (f" and {len(elsewhere) - 6} more" if len(elsewhere) > 6 else "")
            + "; a bundle never holds them, so it cannot be replayed as recorded",
            hint="run the playbook again with `orch apply` (it renders the secrets afresh)",
        )
    return Cell.model_validate({**data, "env": env})


def _redacted_paths(data: Any, path: str = "") -> list[str]:
    """Key paths (`server.argv[4]`) whose value holds the redaction marker."""
    if isinstance(data, str):
        return [path or "(value)"] if REDACTED in data else []
    if isinstance(data, dict):
        return [
            p
            for k, v in data.items()
            for p in _redacted_paths(v, f"{path}.{k}" if path else str(k))
        ]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in _redacted_paths(v, f"{path}[{i}]")]
    return []


def recorded_cells(run: RunBundle) -> list[dict[str, Any]]:
    """Every rendered cell of a run: plan.json's, else those in the cell directories."""
    plan = run.plan or {}
    cells = [c for c in plan.get("cells") or [] if isinstance(c, dict)]
    if not cells:
        cells = [rec.cell for rec in run.cells.values() if rec.cell]
    return cells


def pick_cells(run: RunBundle, selector: str | None) -> list[dict[str, Any]]:
    """The recorded cells a selector (`axis=value,...` or an id prefix) picks."""
    return select_cells(
        recorded_cells(run),
        selector,
        cell_id=lambda c: str(c.get("id", "")),
        axes=lambda c: dict(c.get("axes") or {}),
        host=lambda c: str(c.get("host", "")),
    )


def inventory_from_bundle(run: RunBundle) -> Inventory:
    """The hosts as the run recorded them (inventory.json), to reach the same hosts again."""
    recorded = (run.inventory or {}).get("hosts") or {}
    hosts: dict[str, Host] = {}
    for name, h in recorded.items():
        if not isinstance(h, dict):
            continue
        hvars = {k: v for k, v in (h.get("vars") or {}).items() if v != REDACTED}
        key_file = hvars.get("ansible_ssh_private_key_file") or hvars.get("key")
        executor, slurm = (
            executor_from_vars(name, hvars, SourceLocation(str(run.source)))
            if "orch_executor" in hvars
            else ("direct", None)
        )
        hosts[name] = Host(
            name=name,
            vars=hvars,
            groups=tuple(h.get("groups") or ()),
            connection="local" if h.get("connection") == "local" else "ssh",
            address=h.get("address"),
            port=h.get("port"),
            user=h.get("user"),
            key_file=str(key_file) if key_file else None,
            python=str(h.get("python") or "python3"),
            host_key_checking=bool(h.get("host_key_checking", True)),
            known_hosts=hvars.get("orch_known_hosts"),
            workdir=str(hvars.get("orch_workdir") or ".orch"),
            executor=executor,
            slurm=slurm,
            gpu_hour_usd=price_from_vars(name, hvars, SourceLocation(str(run.source))),
        )
    groups = {"all": Group("all", hosts=tuple(hosts))}
    return Inventory(hosts=hosts, groups=groups, source=f"{run.source} (inventory.json)")


def retarget(
    cells: Sequence[dict[str, Any]], inventory: Inventory, limit: str | None
) -> list[Cell]:
    """Cells ready to run on `inventory`: on their own host, or on the hosts `limit` picks.

    A cell keeps its id, so `orch diff` pairs the replay with the original directly.
    """
    out: list[Cell] = []
    targets = select_hosts_checked(inventory, limit, key_path="--limit") if limit else None
    for data in cells:
        cell = restore_secrets(data)
        hosts = targets or [cell.host]
        for host in hosts:
            if host not in inventory.hosts:
                raise InputError(
                    f"cell {cell.id} ran on {host!r}, which this inventory does not have",
                    hint="give -i with that host, or --limit to pick another host",
                )
            out.append(cell if host == cell.host else cell.model_copy(update={"host": host}))
    return out


_USERINFO = re.compile(r"(://)[^/@\s]+@")


def made_here(run: RunBundle) -> bool:
    """True when run.json records this machine as the one that made the bundle."""
    recorded = (run.run or {}).get("machine_id")
    return isinstance(recorded, str) and recorded == machine_id()


def what_runs(cells: Sequence[Cell], inventory: Inventory) -> list[str]:
    """The hosts a replay reaches and the commands it runs there, one line each."""
    lines: list[str] = []
    for cell in cells:
        host = inventory.hosts[cell.host]
        if host.connection == "local":
            where = "this machine"
        else:
            where = f"{host.user + '@' if host.user else ''}{host.address or host.name}"
            where += f":{host.port}" if host.port else ""
        lines.append(f"cell {cell.id} on {cell.host} ({where}):")
        if cell.repo is not None:
            url = _USERINFO.sub(r"\1***@", cell.repo.url)
            lines.append(f"  checkout: {url} at {cell.repo.version} into {cell.repo.dest}")
            if cell.repo.setup:
                lines.append(f"  setup: {cell.repo.setup}")
        if cell.server is not None:
            lines.append(f"  server: {shlex.join(cell.server.argv)}")
        lines.append(f"  bench: {shlex.join(cell.bench.argv)}")
    return lines


def run_recorded(
    run: RunBundle,
    cells: Sequence[Cell],
    inventory: Inventory,
    *,
    results_dir: Path,
    argv: Sequence[str],
    provenance: dict[str, Any],
) -> RunOutcome:
    """Run recorded cells into a new bundle that says where they came from."""
    playbook_dir = run.path / "playbook"
    files = [p for p in run.playbook_files if p.is_file()]
    secrets = secrets_of_run(cells, inventory, *extra_vars_in_argv(argv), files=files)
    return Run(
        playbook_name=str((run.run or {}).get("playbook") or "replay"),
        playbook_files=files,
        playbook_dir=playbook_dir,
        inventory=inventory,
        cells=cells,
        options=ApplyOptions(results_dir=results_dir, argv=argv, extra_run_fields=provenance),
        secrets=secrets,
    ).execute()

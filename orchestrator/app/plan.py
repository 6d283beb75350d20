"""A plan: a playbook, its inventory and extra vars loaded, the cells they give and the secret
values they hold. Every command that plans or runs cells starts from one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator.cell import Cell
from orchestrator.config.host import Host, Inventory
from orchestrator.config.inventory.load import load_inventory
from orchestrator.config.loaded import LoadedPlaybook
from orchestrator.config.patterns import LimitFile, check_limit
from orchestrator.config.playbook import load_playbook, note_secrets_in, parse_extra_vars
from orchestrator.errors import InputError
from orchestrator.execute.images import ImageKey, pin_images
from orchestrator.execute.refs import RefKey, Resolution, pin_refs
from orchestrator.plan.build import build_cells
from orchestrator.plan.lint import expect_name_error, plan_warnings
from orchestrator.plan.select import select_cells
from orchestrator.secrets.values import secrets_of_run


@dataclass(frozen=True)
class Plan:
    """The cells a playbook gives on an inventory, with what they were made from."""

    playbook: LoadedPlaybook
    inventory: Inventory
    extra_vars: tuple[str, ...]  # each -e as given: an overridden value is a secret too
    extra: Mapping[str, Any]  # the -e mappings merged (later wins)
    cells: tuple[Cell, ...]
    secrets: tuple[str, ...]  # every secret value the cells could print, longest first

    @property
    def variables(self) -> dict[str, Any]:
        """The playbook's vars with -e applied: where secret-named values are looked for."""
        return {**dict(self.playbook.data.get("vars") or {}), **self.extra}

    @property
    def hosts(self) -> list[Host]:
        """The inventory hosts the cells run on, in inventory order."""
        used = {name for c in self.cells for name in c.hosts}
        return [h for name, h in self.inventory.hosts.items() if name in used]

    def warnings(self) -> list[str]:
        """What the plan is warned about (plan/lint.py), one `warning: ...` line each."""
        return plan_warnings(self.playbook, self.cells, self.variables, *self.host_vars())

    def host_vars(self) -> list[Mapping[str, Any]]:
        """The used hosts' variables (where inventory secrets live)."""
        return [h.vars for h in self.hosts]

    def select(self, selector: str | None) -> Plan:
        """The plan narrowed to the cells `--cells` picks (exit 2 when none)."""
        if selector is None:
            return self
        cells = select_cells(
            list(self.cells),
            selector,
            cell_id=lambda c: c.id,
            axes=lambda c: c.axes,
            host=lambda c: c.host,
        )
        return self.with_cells(cells)

    def pinned(
        self,
        earlier: Mapping[RefKey, Resolution] | None = None,
        *,
        ask_hosts: bool = True,
        images: Mapping[ImageKey, tuple[str, str]] | None = None,
    ) -> tuple[Plan, list[Resolution]]:
        """The plan with each branch or tag pinned to one commit and each image tag to one
        digest (a resume's earlier pins and `images` win); without `ask_hosts` only the
        controller asks the origins (planning connects to none)."""
        location = self.playbook.locate(("repo", "version"))
        cells, resolutions = pin_refs(
            self.cells, self.inventory, earlier=earlier, ask_hosts=ask_hosts, location=location
        )
        cells, _ = pin_images(
            cells,
            self.inventory,
            earlier=images,
            ask_hosts=ask_hosts,
            locate=self.playbook.locate,
        )
        return self.with_cells(cells), resolutions

    def with_cells(self, cells: Sequence[Cell]) -> Plan:
        """The same plan over `cells`, its secrets found again for them."""
        narrowed = replace(self, cells=tuple(cells))
        return replace(narrowed, secrets=_secrets(narrowed))


def load_plan(
    playbook: Path,
    inventory: Sequence[Path] = (),
    extra_vars: Sequence[str] = (),
    limit: str | None = None,
) -> Plan:
    """Load, render and check a playbook on an inventory: InputError (exit 2) for bad input."""
    inv = load_inventory(inventory, playbook_dir=playbook.parent)
    for host in inv.hosts.values():
        note_secrets_in(host.vars)  # `{{ db_password }}` rendered into a checked field
    extra = parse_extra_vars(list(extra_vars))
    loaded = load_playbook(playbook, extra)
    check_limit(limit, inv)
    try:
        cells = build_cells(loaded, inv, limit=limit)
    except InputError as exc:
        if isinstance(limit, LimitFile) and exc.key_path == "--limit":
            # its message quotes the pattern: the file's lines
            raise InputError(
                "the hosts it names match no host of this play",
                key_path=f"--limit @{limit.path}",
                hint=exc.hint,
            ) from None
        raise
    unknown = expect_name_error(loaded, cells)
    if unknown is not None:
        raise unknown
    plan = Plan(loaded, inv, tuple(extra_vars), extra, tuple(cells), ())
    return replace(plan, secrets=_secrets(plan))


def _secrets(plan: Plan) -> tuple[str, ...]:
    """Secret values from every source: the cells, the vars, each -e on its own (an overridden
    value was still typed), the used hosts' variables and the playbook's own files."""
    each = [parse_extra_vars([item]) for item in plan.extra_vars]
    found = secrets_of_run(
        plan.cells, plan.inventory, plan.variables, *each, files=plan.playbook.files
    )
    return tuple(found)

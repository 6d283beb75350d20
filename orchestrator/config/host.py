"""The resolved inventory: hosts with merged variables and how to reach them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.errors import SourceLocation

ConnectionKind = Literal["local", "ssh"]
# how commands run once connected: as they are ("direct"), or each as a Slurm job via srun
ExecutorKind = Literal["direct", "slurm"]
DEFAULT_PENDING_TIMEOUT = 600.0  # seconds a Slurm job may wait for resources before it fails


@dataclass(frozen=True)
class SlurmOptions:
    """Where and how big each Slurm job is: srun's allocation options, from `slurm_*` vars."""

    partition: str | None = None  # slurm_partition
    account: str | None = None  # slurm_account
    qos: str | None = None  # slurm_qos
    gres: str | None = None  # slurm_gres, e.g. "gpu:8", per node
    time: str | None = None  # slurm_time, Slurm's format ("30", "1:00:00"); None: from timeout
    nodes: int = 1  # slurm_nodes
    extra: tuple[str, ...] = ()  # slurm_extra: more srun options, passed as written
    # slurm_pending_timeout: seconds a job may stay PENDING before it is given up (srun
    # --immediate); None waits as long as the command's own timeout allows
    pending_timeout: float | None = DEFAULT_PENDING_TIMEOUT


@dataclass(frozen=True)
class Host:
    """One inventory host after variable precedence (all < parent < child < host) is applied."""

    name: str  # inventory hostname, as patterns and cells name it
    vars: Mapping[str, Any]  # merged variables, connection variables included as written
    groups: tuple[str, ...]  # every group it belongs to, ancestors included, "all" excluded
    connection: ConnectionKind = "ssh"
    address: str | None = None  # ansible_host / host; None means use `name`
    port: int | None = None  # ansible_port / port; None means ssh config or 22
    user: str | None = None  # ansible_user / user
    key_file: str | None = None  # ansible_ssh_private_key_file / key
    python: str = "python3"  # ansible_python_interpreter / python: runs the runner and probe
    host_key_checking: bool = True  # only an explicit inventory opt-out turns it off
    known_hosts: str | None = None  # orch_known_hosts: an extra known_hosts file to trust
    workdir: str = ".orch"  # orch_workdir: runner, caches and cell dirs, relative to $HOME
    executor: ExecutorKind = "direct"  # orch_executor: slurm runs each command as a Slurm job
    slurm: SlurmOptions | None = None  # the slurm_* vars, set when executor is slurm
    location: SourceLocation | None = None  # where the host was declared
    gpu_hour_usd: float | None = None  # orch_gpu_hour_usd: what one GPU-hour costs, in USD

    @property
    def target(self) -> str:
        """The network name or address to connect to."""
        return self.address or self.name


@dataclass(frozen=True)
class Group:
    """An inventory group: its direct hosts, child groups and its own vars."""

    name: str
    hosts: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Inventory:
    """Hosts by name (in declaration order) and groups by name; `all` always exists."""

    hosts: Mapping[str, Host]
    groups: Mapping[str, Group]
    source: str | None = None  # the file it came from; None for the built-in localhost default

    def group_members(self, group: str) -> tuple[str, ...]:
        """Every host of a group and of its descendant groups, in Ansible's order: the group's
        own hosts, then its children's level by level (under `all`, `ungrouped` comes first)."""
        if group not in self.groups:
            return ()
        found: dict[str, None] = {}
        level, seen = [group], {group}
        while level:
            below: list[str] = []
            for name in level:
                found.update(dict.fromkeys(self.groups[name].hosts))
                for child in self._children(name):
                    if child not in seen and child in self.groups:
                        seen.add(child)
                        below.append(child)
            level = below
        if group == "all":  # a host of no group reached (a hand-built inventory): still there
            found.update(dict.fromkeys(self.hosts))
        return tuple(found)

    def _children(self, group: str) -> tuple[str, ...]:
        if group != "all":
            return self.groups[group].children
        # Ansible hangs `ungrouped` below `all` first, then each top-level group as created
        nested = {c for g, d in self.groups.items() if g != "all" for c in d.children}
        top = [g for g in self.groups if g not in ("all", "ungrouped") and g not in nested]
        return ("ungrouped", *self.groups["all"].children, *top)


def localhost_inventory() -> Inventory:
    """The default when no inventory is given: `localhost`, connected locally."""
    host = Host(name="localhost", vars={}, groups=("ungrouped",), connection="local")
    return Inventory(
        hosts={"localhost": host},
        groups={
            "all": Group("all", children=("ungrouped",)),
            "ungrouped": Group("ungrouped", hosts=("localhost",)),
        },
        source=None,
    )

"""What `orch plan` prints: the cell table, each host's executor, the pinned versions, the
server starts, and with -v each cell's commands and env; secret values hidden throughout."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

import click
from tabulate import tabulate

from orchestrator.config.host import Host, SlurmOptions

if TYPE_CHECKING:
    from orchestrator.app.plan import Plan
    from orchestrator.cell import BenchSpec, Cell
    from orchestrator.execute.refs import Resolution


def echo_plan(
    plan: Plan,
    resolutions: list[Resolution],
    *,
    as_json: bool,
    verbose: bool,
) -> None:
    """Print the plan's cells (pinned as `resolutions` say): a table, or JSON with --json."""
    from orchestrator.plan.lint import unchecked_ready_note
    from orchestrator.plan.sessions import session_labels
    from orchestrator.plan.slo import search_lines
    from orchestrator.secrets.redact import cell_json_by_name, redact_text
    from orchestrator.secrets.rule import REDACTED, is_secret_name

    secrets, cells = plan.secrets, list(plan.cells)

    def echo(text: str) -> None:
        # Plan output ends up in CI logs and chat: secrets are hidden as in a bundle.
        click.echo(redact_text(text, secrets))

    if as_json:
        echo(json.dumps([cell_json_by_name(c) for c in cells], indent=2))
        return
    axes: list[str] = []
    for c in cells:
        axes.extend(a for a in c.axes if a not in axes)
    servers = session_labels(cells)
    shown_axes = {c.id: cell_json_by_name(c)["axes"] for c in cells}  # secret axes by name
    rows = [
        [
            c.id,
            _hosts_label(c.hosts),  # a server over several hosts: its nodes, head first
            *(_short(shown_axes[c.id].get(a, "")) for a in axes),
            _version(c),
            servers[c.id],
        ]
        for c in cells
    ]
    echo(tabulate(rows, headers=["cell", "host", *axes, "repo version", "server"]))
    hosts = sorted({h for c in cells for h in c.hosts})
    echo(f"\n{len(cells)} cells on {len(hosts)} host(s): {', '.join(hosts)}")
    for name in hosts:  # how each runs its cells: direct, or as Slurm jobs (and how big)
        echo(f"  {name}: {describe_executor(plan.inventory.hosts[name])}")
    multi = [c for c in cells if c.nodes]
    if multi:
        echo(
            f"{len(multi)} cell(s) run one server over {len(multi[0].hosts)} nodes: the first "
            "host is the head (rank 0, serves HTTP, runs the bench); on a Slurm host, one job "
            "of that many nodes, its first node (SLURM_NODEID 0) the head"
        )
    for res in resolutions:
        echo(f"repo.version {res.describe()}")
    for line in image_lines(cells):
        echo(line)
    with_server = [c for c in cells if c.server is not None]
    if with_server:
        starts = len({servers[c.id] for c in with_server})
        echo(
            f"{starts} server start(s) for {len(with_server)} cells: cells with the same "
            "`server` label share one start (server.restart: per_cell starts one per cell)"
        )
        restarts = sum(c.bench.starts - 1 for c in with_server)
        if restarts:
            echo(
                f"{restarts} more server start(s) for bench.starts: those cells' repeats are "
                "spread over their starts (the server restarted, warmed up and made ready again "
                "between groups), so their spread between starts is measured"
            )
    for line in search_lines(cells, servers):  # each SLO search: levels, SLO, stop rule
        echo(line)
    note = unchecked_ready_note(plan.playbook, cells)
    if note is not None:
        echo(note)
    sends: dict[str, int] = {}
    for c in cells:
        text = inputs_text(c)
        sends[text] = sends.get(text, 0) + 1
    for text, count in sends.items():  # what each repeat sends, and why it is not cached
        echo(f"each repeat: {text}" + (f" ({count} cells)" if len(sends) > 1 else ""))
    if verbose:
        for c in cells:
            echo(f"\n== {c.id} on {c.host}")
            # Redacted before quoting: a quote inside a secret would split it for the sweep.
            for k, v in c.env.items():
                shown = REDACTED if is_secret_name(k, c.secrets) else redact_text(v, secrets)
                echo(f"  env {k}={shlex.quote(shown)}")
            if c.server is not None:
                for k, v in c.server.env_defaults.items():
                    if k not in c.env:  # a declared variable wins over the adapter's
                        echo(f"  env {k}={shlex.quote(v)} (server only, set by the adapter)")
                echo(f"  server: {shlex.join(redact_text(a, secrets) for a in c.server.argv)}")
                for command in container_commands(c):
                    echo(f"  container: {shlex.join(redact_text(a, secrets) for a in command)}")
            for n in c.nodes:
                if n.server is not None:
                    argv = shlex.join(redact_text(a, secrets) for a in n.server.argv)
                    echo(f"  node {n.rank} ({n.host}): {argv}")
            echo(f"  bench:  {shlex.join(redact_text(a, secrets) for a in c.bench.argv)}")
            for command in bench_container_commands(c):
                echo(f"  bench container: {shlex.join(redact_text(a, secrets) for a in command)}")
            echo(f"  repeats: {c.bench.warmup} warmup + {repeats_text(c.bench)}")
            echo(f"  each repeat: {inputs_text(c)}")


def image_lines(cells: list[Cell]) -> list[str]:
    """One line per distinct server image: the reference, its runtime and the digest it is
    pinned to (or who will pin it)."""
    out: dict[str, str] = {}
    for c in cells:
        for owner, pin in (
            ("server", c.server and c.server.container),
            ("bench", c.bench.container),
        ):
            if not pin:
                continue
            if pin.digest is None:
                state = "a tag: `orch apply` pins it to its registry digest on the host"
            else:
                state = f"{pin.digest} ({pin.resolved_by or 'pinned'})"
            out.setdefault(f"{owner}.container {pin.runtime} {pin.image}", state)
    return [f"{key}: {state}" for key, state in out.items()]


def container_commands(cell: Cell) -> list[list[str]]:
    """The commands that start the cell's server in its container, as the runner will run
    them (`<pid>`: the runner's pid, known on the host)."""
    from orchestrator.runner.container import command_lines, container_name, labels, spec_of

    server = cell.server
    if server is None or server.container is None:
        return []
    spec = spec_of(server.container.model_dump(mode="json"))
    names = sorted({*cell.env, *server.env_defaults, "ORCH_RUN_ID", "ORCH_CELL_ID"})
    label_map = {**labels("<run>", cell.id, 0), "orch.runner-pid": "<pid>"}
    name = container_name("RUN", cell.id)
    return command_lines(spec, server.argv, name=name, env_names=names, label_map=label_map)


def bench_container_commands(cell: Cell) -> list[list[str]]:
    """The command that runs one repeat of the cell's bench in its container, as the runner
    will run it (`<repeat dir>`: the repeat's folder on the host)."""
    from orchestrator.runner.container import (
        bench_command,
        bench_env_names,
        container_name,
        labels,
        spec_of,
    )

    pin = cell.bench.container
    if pin is None:
        return []
    spec = spec_of(pin.model_dump(mode="json"))
    label_map = {**labels("<run>", cell.id, 0), "orch.runner-pid": "<pid>"}
    name = container_name("RUN", cell.id) + "-bench-<repeat>"
    argv = bench_command(
        spec, cell.bench.argv, name=name, env_names=bench_env_names(list(cell.env)),
        label_map=label_map, repeat_dir="<repeat dir>",
    )  # fmt: skip
    return [argv]


def repeats_text(bench: BenchSpec) -> str:
    """`5`, or `3..12 until the median of output_throughput is within ±2% (90% ...)`."""
    rule = bench.settle
    if rule is None or rule.until is None:  # bisect's steps set their own stop
        return str(bench.repeats)
    return (
        f"{rule.min}..{bench.repeats} until the median of {', '.join(rule.metrics)} is within "
        f"±{rule.until * 100:.3g}% ({rule.confidence:.0%} interval; chosen by {rule.chosen})"
    )


def inputs_text(cell: Cell) -> str:
    """What each run of the cell's bench sends, and whether the engine's prefix cache can serve
    it from an earlier run: "24 random prompts, seed derived per run (--seed)"."""
    from orchestrator.adapters import bench_adapter

    adapter = bench_adapter(cell.bench.adapter)
    sends = adapter.sends(cell.bench)
    inputs = cell.run_inputs
    if cell.bench.cache == "warm":
        return f"{sends}, the same each run (cache: warm: repeats may be served from cache)"
    if adapter.seed_flag is None:
        return sends
    parts = [sends]
    if inputs is not None and inputs.seed_flag:
        parts.append(f"seed derived per run ({inputs.seed_flag})")
    else:
        parts.append(f"seed pinned by args.{adapter.seed_arg}: the same prompts each run")
    if inputs is not None and "--flush-cache" in inputs.flags:
        parts.append("cache flushed after the client's warm-up request (--flush-cache)")
    return ", ".join(parts)


def _version(cell: Cell) -> str:
    """The repo version column: the ref as written, and the commit it was pinned to."""
    if cell.repo is None:
        return ""
    if cell.repo.requested is None:
        return cell.repo.version
    return f"{cell.repo.requested} ({cell.repo.version[:12]})"


def _short(value: Any) -> str:
    """An axis value for the table: JSON unless a string, cut to 40 characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _hosts_label(hosts: tuple[str, ...]) -> str:
    """A cell's hosts for `orch plan`: `a+b`, or `login (2 nodes)` for one Slurm job's nodes."""
    if len(hosts) > 1 and len(set(hosts)) == 1:
        return f"{hosts[0]} ({len(hosts)} nodes)"
    return "+".join(hosts)


def describe_executor(host: Host) -> str:
    """How a host runs its cells, for `orch plan`: direct over SSH or locally, or as a Slurm
    job through a login host, with the job's allocation (partition, gres, nodes, time)."""
    address = f"{host.user + '@' if host.user else ''}{host.target}" + (
        f":{host.port}" if host.port else ""
    )
    if host.executor != "slurm":
        return "direct, on this machine" if host.connection == "local" else f"direct, ssh {address}"
    options = host.slurm or SlurmOptions()
    parts = [
        f"partition {options.partition or '(the default)'}",
        f"gres {options.gres or '(none)'} per node",
        f"{options.nodes} node{'s' if options.nodes > 1 else ''}",
        f"time {options.time}" if options.time else "time from the cells' timeouts",
    ]
    parts += [f"{name} {value}" for name, value in (("account", options.account),
              ("qos", options.qos)) if value]  # fmt: skip
    if options.extra:
        parts.append(shlex.join(options.extra))
    login = "this machine" if host.connection == "local" else f"login host ssh {address}"
    return f"Slurm, srun on {login}: {', '.join(parts)}"

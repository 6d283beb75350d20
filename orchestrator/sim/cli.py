"""The `orch sim` click group: thin wrappers over each subcommand's own `main(argv)`.

The subcommands mimic tools with argparse-style flags (SGLang's launcher and bench client,
nvidia-smi), so their arguments are passed through untouched and parsed by the module.
"""

from __future__ import annotations

import sys

import click

_PASS = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@click.group(name="sim")
def sim() -> None:
    """Simulated GPU serving host: server, bench client, demo repo, fake nvidia-smi."""


@sim.command(context_settings=_PASS, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args: tuple[str, ...]) -> None:
    """An SGLang-shaped server (takes `python -m sglang.launch_server` flags)."""
    from orchestrator.sim import server

    sys.exit(server.main(list(args)))


@sim.command(context_settings=_PASS, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """A benchmark client (takes `python -m sglang.bench_serving` flags)."""
    from orchestrator.sim import bench as bench_mod

    sys.exit(bench_mod.main(list(args)))


@sim.command(name="init-repo", context_settings=_PASS, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def init_repo(args: tuple[str, ...]) -> None:
    """Create a deterministic serving repo with one regression: DIR [--commits N] ..."""
    from orchestrator.sim import repo

    sys.exit(repo.main(list(args)))


@sim.command(name="nvidia-smi", context_settings=_PASS, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def nvidia_smi(args: tuple[str, ...]) -> None:
    """A fake nvidia-smi reading the simulated host state ($ORCH_SIM_STATE)."""
    from orchestrator.sim import smi

    sys.exit(smi.main(list(args)))


@sim.command(context_settings=_PASS, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def images(args: tuple[str, ...]) -> None:
    """Build (cached) and push the simulator's images v1 and v2: --registry HOST:PORT ..."""
    from orchestrator.sim import images as images_mod

    sys.exit(images_mod.main(list(args)))

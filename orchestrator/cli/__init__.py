"""The `orch` command line: arguments in, calls, output out.

This is the only place that turns an OrchError into a message and an exit code. The commands
live in `cli/running.py` (what runs things) and `cli/reading.py` (what reads bundles); what they
share is in `cli/common.py`.
"""

from __future__ import annotations

import sys

import click

from orchestrator.cli import history, investigating, reading, running  # noqa: F401  (importing registers the commands)
from orchestrator.cli.common import _interrupted, main
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED


def _attach_sim() -> None:
    from orchestrator.sim.cli import sim

    main.add_command(sim)


_attach_sim()


# click >= 8.2 raises this (a UsageError) for a group called without a command; 8.1 prints the
# help itself. Catching the empty tuple matches nothing.
_NO_ARGS_IS_HELP: tuple[type[click.ClickException], ...] = tuple(
    t for t in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if t is not None
)


# ansible-playbook's flags, answered with what orch does instead (an Ansible user types them)
_NEVER_ESCALATES = (
    "not needed: orch never escalates (it runs as the inventory's ansible_user, in its workdir)"
)

# flag -> what to use in orch; only flags no orch command defines reach this table
INSTEAD: dict[str, str] = {
    "--check": "orch's dry run is `orch plan PLAYBOOK` (every cell; -v shows the commands)",
    "-C": "orch's dry run is `orch plan PLAYBOOK` (every cell; -v shows the commands)",
    "--diff": "`orch plan PLAYBOOK -v` shows what would run; `orch diff A B` compares two runs",
    "-D": "`orch plan PLAYBOOK -v` shows what would run; `orch diff A B` compares two runs",
    "--syntax-check": "use `orch validate PLAYBOOK` (load, check and render; nothing runs)",
    "--list-hosts": "use `orch plan PLAYBOOK` (the cells and their hosts; --limit narrows)",
    "--list-tasks": "use `orch plan PLAYBOOK -v` (each cell's commands)",
    "--become": _NEVER_ESCALATES,
    "-b": _NEVER_ESCALATES,
    "--become-user": _NEVER_ESCALATES,
    "--become-method": _NEVER_ESCALATES,
    "--ask-become-pass": _NEVER_ESCALATES,
    "-K": _NEVER_ESCALATES,
    "--forks": "use --max-parallel N (hosts at once)",
    "-f": "use --max-parallel N (hosts at once)",
    "--user": "set ansible_user for the host in the inventory (orch reads it)",
    "-u": "set ansible_user for the host in the inventory (orch reads it)",
    "--private-key": "set ansible_ssh_private_key_file in the inventory (orch reads it)",
    "--key-file": "set ansible_ssh_private_key_file in the inventory (orch reads it)",
    "--ask-pass": "orch logs in with SSH keys or the agent, never a typed password",
    "-k": "orch logs in with SSH keys or the agent, never a typed password",
    "--tags": "pick cells with --cells 'axis=value,...' (globs and != too)",
    "-t": "pick cells with --cells 'axis=value,...' (globs and != too)",
    "--skip-tags": "leave cells out with --cells 'axis!=value'",
    "--start-at-task": "use --cells to pick cells, or --resume RUN to go on where a run stopped",
    "--step": "use `orch plan PLAYBOOK` first, then --cells to run a few",
}


def instead(flag: str | None) -> str | None:
    """`--check is ansible-playbook's; ...` for an Ansible flag orch lacks, else None."""
    if flag is None:
        return None
    name = flag.split("=", 1)[0]
    answer = INSTEAD.get(name)
    return None if answer is None else f"{name} is ansible-playbook's; {answer}"


def run() -> None:
    """Entry point: Ctrl-C anywhere exits 130 without a traceback (click's own says 1).

    A bug of orch's own is one line plus the file holding its traceback (ORCH_DEBUG=1 shows it
    raw): a person running experiments should not have to read a stack to know what happened.
    """
    import os

    # Text from a bundle may hold what UTF-8 cannot carry (a lone surrogate in someone's JSON):
    # it is printed escaped, never a crash halfway through the output.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        code = main.main(standalone_mode=False, prog_name="orch")
    except (KeyboardInterrupt, click.exceptions.Abort):
        _interrupted(None)
    except _NO_ARGS_IS_HELP as exc:  # `orch` alone: the help, as before
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        # One line, like every other orch error; click's own is 3-4 (usage, try, blank, error).
        where = exc.ctx.command_path if exc.ctx is not None else "orch"
        flag = exc.option_name if isinstance(exc, click.NoSuchOption) else None
        answer = instead(flag)  # an Ansible habit: say what orch does instead
        if answer is not None:
            click.echo(f"error: {answer}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        click.echo(f"error: {exc.format_message()} (see '{where} --help')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:
        if os.environ.get("ORCH_DEBUG"):
            raise
        _internal_error(exc)
    sys.exit(code if isinstance(code, int) else 0)


def _internal_error(exc: Exception) -> None:
    import tempfile
    import traceback

    with tempfile.NamedTemporaryFile(
        "w", prefix="orch-traceback-", suffix=".txt", delete=False
    ) as fh:
        traceback.print_exception(exc, file=fh)
    click.echo(
        f"error: internal error: {type(exc).__name__}: {exc} (a bug in orch; the traceback is in "
        f"{fh.name}; ORCH_DEBUG=1 shows it here)",
        err=True,
    )
    sys.exit(EXIT_FAILED)


__all__ = ["EXIT_BAD_INPUT", "main", "run"]

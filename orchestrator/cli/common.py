"""What every `orch` command shares: the group, the common options, error reporting."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from tabulate import tabulate

from orchestrator import __version__
from orchestrator.errors import EXIT_FAILED, InputError, OrchError, ResultsWriteError

if TYPE_CHECKING:  # imported where used: `orch --help` stays quick
    from orchestrator.results.bundle import BundleWriter

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int) -> None:
    # a message may quote a bundle's (anyone's) text: no terminal escapes reach the screen
    from orchestrator.results.terminal import printable

    click.echo(printable(f"error: {message}"), err=True)
    sys.exit(code)


def _echo_from_bundle(text: str, err: bool = False) -> None:
    """Print text read from a bundle, which anyone may have written: escapes stripped."""
    from orchestrator.results.terminal import printable

    click.echo(printable(text), err=err)


_DISK_TROUBLE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def reports_errors(fn: F) -> F:
    """Turn OrchError into `error: file:line:col: key: message` and its exit code.

    A full or read-only disk met where no layer expected it is said the same way (exit 1), not
    as an internal error: it is the machine's state, not a bug in orch."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OrchError as exc:
            _fail(exc.render(), exc.exit_code)
        except OSError as exc:
            if exc.errno not in _DISK_TROUBLE:
                raise
            from orchestrator.results.bundle import write_problem

            where = f"{exc.filename}: " if exc.filename else ""
            _fail(OrchError(f"{where}cannot write: {write_problem(exc)}").render(), EXIT_FAILED)

    return wrapper  # type: ignore[return-value]


def check_recorded(writer: BundleWriter, cell_ids: Sequence[str], resume: str) -> None:
    """After a run: a ResultsWriteError naming what a failed write of the bundle left out
    (cells not recorded, whose results stay on their hosts) and how to collect it."""
    failure = writer.failure
    if failure is None:
        return
    recorded = writer.complete_cells()
    missing = [cid for cid in cell_ids if cid not in recorded]
    if missing:
        shown = ", ".join(missing[:10]) + (
            f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        )
        what = (
            f"{len(missing)} cell(s) not recorded: {shown}; "
            "their results stay on their hosts until collected"
        )
    else:
        what = "every cell was recorded, but run.json or the manifest may be out of date"
    raise ResultsWriteError(
        f"{failure.message}; {what}",
        before_run=False,
        hint=f"free space or fix the folder, then continue with: {resume}",
    )


inventory_option = click.option(
    "-i",
    "--inventory",
    "inventory",
    type=click.Path(path_type=Path),
    multiple=True,
    help="Inventory file or directory (Ansible YAML, INI or `ansible-inventory --list` JSON), "
    "or a host list `host1,host2,`; repeat to combine several. Default: $ANSIBLE_INVENTORY, "
    "else localhost.",
)
extra_vars_option = click.option(
    "-e",
    "--extra-vars",
    "extra_vars",
    multiple=True,
    help="k=v pairs, @file.yml, or a JSON/YAML mapping; highest precedence.",
)


LIMIT_FILE_BYTES = 1024 * 1024  # a retry file names hosts: far less than this


def _limit_value(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """`--limit @file`, as Ansible's retry files: one host or pattern per line."""
    if not value or not value.startswith("@"):
        return value
    from orchestrator.config.patterns import LimitFile
    from orchestrator.config.yamlpos import read_text

    path = Path(value[1:]).expanduser()
    try:
        lines = read_text(path, what="limit file", limit=LIMIT_FILE_BYTES).splitlines()
    except InputError as exc:  # "limit file not found: PATH" -> "cannot read PATH: limit file ..."
        reason = exc.message.removesuffix(f": {path}").removeprefix("cannot read limit file: ")
        raise click.BadParameter(f"cannot read {path}: {reason}") from None
    names = [
        (number, line.strip())
        for number, line in enumerate(lines, 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not names:
        raise click.BadParameter(f"{path} names no host")
    return LimitFile.of(path, names)


limit_option = click.option(
    "-l",
    "--limit",
    default=None,
    callback=_limit_value,
    help="Further limit hosts (a pattern, or @FILE with one per line).",
)


def count_option(flag: str, default: int, text: str, minimum: int = 1) -> Callable[[F], F]:
    """An integer option with a floor: 0 hosts or 0 repeats is refused before anything runs."""
    return click.option(
        flag, type=click.IntRange(min=minimum), default=default, show_default=True, help=text
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orch")
def main() -> None:
    """orch: declared, repeatable, checked GPU serving benchmarks.

    Exit codes: 0 all good; 1 a cell failed or an expectation was missed; 2 bad input (nothing
    ran).
    """


def _print_summary(cells: dict[str, Any]) -> None:
    rows = []
    for cid, o in sorted(cells.items(), key=lambda item: item[1].host):  # stable: run order
        reason = (o.reason or "").splitlines()[0] if o.reason else ""
        if o.earlier:  # a resume lists the whole run, saying which cells it did not run
            reason = f"(earlier) {reason}".strip()
        seconds = o.seconds if o.seconds is not None else ""
        rows.append([o.host, cid, o.status, o.failed_step or "", seconds, reason])
    headers = ["host", "cell", "status", "failed at", "seconds", "reason"]
    click.echo(tabulate(rows, headers=headers))


results_option = click.option(
    "--results",
    "results_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("results"),
    envvar="ORCH_RESULTS",
    show_default=True,
    help="Where run bundles live (run ids are looked up here); default $ORCH_RESULTS, else "
    "results.",
)


def _interrupted(resume: str | None) -> None:
    """Ctrl-C: servers were stopped by their runners; say how to go on (`resume`, from
    `resume_command`), exit 130."""
    tail = f"; continue with: {resume}" if resume else ""
    click.echo(f"interrupted: servers stopped{tail}", err=True)
    sys.exit(130)


def write_whole(path: Path, text: str) -> None:
    """`text` into `path` only once it is whole (tmp + rename): an output file is never left
    truncated or half-written; what UTF-8 cannot carry is written escaped."""
    data = text.encode("utf-8", "backslashreplace")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)

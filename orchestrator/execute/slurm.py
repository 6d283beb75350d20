"""The Slurm transport: every command is its own Slurm job, launched by `srun` on a login host.

`srun` is the pipe. Run through a login connection (local when orch runs on the login node,
SSH otherwise), it allocates the job, starts the command inside it, forwards the stdin payload
and, later, stdin's EOF to the task, and streams the task's stdout back through the login
connection line by line; when it exits the job ends. So the runner needs nothing new: it reads
and writes exactly what it does over SSH, and EOF still means "controller gone".

Files move through the login host (`put`/`get` are the login connection's), which assumes the
compute nodes see the login host's $HOME, as on most clusters; commands run in $HOME there.

Timeouts: at the deadline the job is cancelled (`scancel --name`: Slurm sends TERM, then KILL
after its KillWait, to every process of the job), srun then exits, and the job ends CANCELLED.
Each command's job is named `<prefix>-<random>` (`job_names`), so a caller can find, record or
cancel it. Slurm refusing the job (no such partition, more GPUs than exist) raises
`ExecutionError` with Slurm's own words.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.host import Host
from orchestrator.errors import ExecutionError, OrchError
from orchestrator.execute.transport import CommandTimeout, Connection, RunResult

# srun's own first words when Slurm will not run the job at all (it never started)
_REFUSED = ("srun: error: Unable to allocate resources", "srun: error: Invalid ")
# after a timeout's scancel: how long srun may take to see its job end (Slurm's KillWait, 30 s
# by default, lies between the TERM and the KILL)
_CANCEL_GRACE_SECONDS = 60.0
_ALIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING"}
_POLL_SECONDS = 0.5  # squeue while a cancelled job completes


@dataclass(frozen=True)
class SlurmOptions:
    """Where and how big each job is: srun's allocation options, from the inventory."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gres: str | None = None  # e.g. "gpu:8", per node
    time: str | None = None  # Slurm's time format ("30", "1:00:00"); None: derived from timeout
    nodes: int = 1
    extra: tuple[str, ...] = ()  # more srun options, passed as written

    @classmethod
    def from_vars(cls, variables: Mapping[str, Any]) -> SlurmOptions:
        """Read `slurm_partition`, `slurm_account`, `slurm_qos`, `slurm_gres`, `slurm_time`,
        `slurm_nodes` and `slurm_extra` (a string split like a shell, or a list)."""

        def text(name: str) -> str | None:
            value = variables.get(f"slurm_{name}")
            return None if value is None else str(value)

        extra = variables.get("slurm_extra") or ()
        return cls(
            partition=text("partition"),
            account=text("account"),
            qos=text("qos"),
            gres=text("gres"),
            time=text("time"),
            nodes=int(variables.get("slurm_nodes", 1)),
            extra=tuple(shlex.split(extra) if isinstance(extra, str) else map(str, extra)),
        )

    def srun_options(self, job_name: str, timeout: float | None) -> list[str]:
        """srun's options for one command's job (its name, its allocation, one task a node)."""
        options = [f"--job-name={job_name}", f"--nodes={self.nodes}", "--ntasks-per-node=1"]
        for flag, value in (
            ("partition", self.partition),
            ("account", self.account),
            ("qos", self.qos),
            ("gres", self.gres),
        ):
            if value:
                options.append(f"--{flag}={value}")
        if self.time:
            options.append(f"--time={self.time}")
        elif timeout is not None:  # Slurm's limit backs ours up, should orch die mid-command
            options.append(f"--time={math.ceil(timeout / 60) + 1}")
        if self.nodes > 1:
            options.append("--kill-on-bad-exit=1")  # one node failing ends the others
        return [*options, *self.extra]


class SlurmConnection(Connection):
    """Runs each command as a Slurm job through `srun` on a login connection it owns."""

    def __init__(
        self,
        login: Connection,
        options: SlurmOptions,
        *,
        host: Host | None = None,
        job_prefix: str = "orch",
    ) -> None:
        self.login = login
        self.options = options
        self.host = host or login.host
        self.host_key_verified = login.host_key_verified
        self.job_prefix = job_prefix
        self.job_names: list[str] = []  # one per command, in start order
        self._lock = threading.Lock()

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        keep_stdin_open: bool = False,
        timeout: float | None = None,
        on_stdout_line: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """See `Connection.run`: the command runs as one Slurm job, started by `srun`.

        The time spent waiting for the allocation counts against `timeout`. Raises
        `ExecutionError` when Slurm refuses the job.
        """
        job_name = f"{self.job_prefix}-{secrets.token_hex(6)}"
        with self._lock:
            self.job_names.append(job_name)
        srun = ["srun", *self.options.srun_options(job_name, timeout), "--", *argv]
        cancelled = threading.Event()

        def cancel_at_deadline() -> None:
            cancelled.set()
            self.cancel(job_name)

        timer = None if timeout is None else threading.Timer(timeout, cancel_at_deadline)
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            result = self.login.run(
                srun,
                stdin=stdin,
                keep_stdin_open=keep_stdin_open,
                # srun ends when its job is cancelled; the login side's limit is the fallback
                timeout=None if timeout is None else timeout + _CANCEL_GRACE_SECONDS,
                on_stdout_line=on_stdout_line,
                stop=stop,
            )
        except CommandTimeout as exc:
            self.cancel(job_name)
            self._wait_ended(job_name)
            raise self._timed_out(argv, job_name, timeout, exc.result) from exc
        finally:
            if timer is not None:
                timer.cancel()
        if cancelled.is_set():
            self._wait_ended(job_name)
            raise self._timed_out(argv, job_name, timeout, result)
        refused = [line for line in result.stderr.splitlines() if line.startswith(_REFUSED)]
        if result.rc != 0 and refused:
            raise ExecutionError(
                f"Slurm refused to run {argv[0]} on {self.host.name}: {refused[0]}",
                hint="check the slurm_* settings of this host against `sinfo` and `scontrol show "
                "partition`",
            )
        return result

    def _timed_out(
        self, argv: Sequence[str], job_name: str, timeout: float | None, result: RunResult
    ) -> CommandTimeout:
        return CommandTimeout(
            f"{shlex.join(argv)} on {self.host.name} (Slurm job {job_name}) timed out after "
            f"{timeout:g} s (job cancelled)",
            result=result,
        )

    def cancel(self, job_name: str) -> None:
        """scancel the job of that name (best effort: it may have ended already)."""
        with contextlib.suppress(OrchError):
            self.login.run(["scancel", f"--name={job_name}"], timeout=30)

    def _wait_ended(self, job_name: str, timeout: float = _CANCEL_GRACE_SECONDS) -> None:
        """Wait until no process of the job is left: squeue lists it neither running nor
        completing (best effort: gives up after `timeout`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                shown = self.login.run(
                    ["squeue", "-h", "--states=all", f"--name={job_name}", "-o", "%T"], timeout=30
                )
            except OrchError:
                return
            if not _ALIVE.intersection(shown.stdout.split()):
                return
            time.sleep(_POLL_SECONDS)

    def put(self, local: Path, remote: str) -> None:
        """See `Connection.put`: onto the login host, whose $HOME the nodes share."""
        self.login.put(local, remote)

    def get(self, remote: str, local: Path) -> None:
        """See `Connection.get`: from the login host, whose $HOME the nodes share."""
        self.login.get(remote, local)

    def close(self) -> None:
        """Close the login connection: each running srun's task sees EOF on stdin."""
        self.login.close()

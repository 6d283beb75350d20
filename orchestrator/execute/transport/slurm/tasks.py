"""A multi-node cell on a Slurm host: one job of N nodes, one runner per node, one stdout.

For slurm/connection.py, facing runner/slurm_tasks.py; the protocol: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import queue
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from orchestrator.cell import Cell
from orchestrator.errors import ExecutionError
from orchestrator.execute.transport.base import STREAMED_TAIL_BYTES, Connection, RunResult
from orchestrator.runner.slurm_tasks import RECORD_END, TASKS_VARIABLE

__all__ = [
    "TaskLines",
    "queue_nodes",
    "run_in_job",
    "task_argv",
    "task_options",
]

_LABEL = re.compile(r"^\s*(\d+): ?(.*)$", re.DOTALL)  # srun --label: `<task>: <text>`
_END = object()  # a task thread's last item


def queue_nodes(cells: Iterable[Cell]) -> int:
    """How many nodes a host's queue needs at once: its largest multi-node cell's, else 1."""
    return max((1 + len(c.nodes) for c in cells if c.nodes), default=1)


def task_options(nodes: int) -> list[str]:
    """srun's options for a runner on each of `nodes` nodes (after the allocation's own)."""
    return [f"--nodes={nodes}", "--ntasks-per-node=1", "--input=all", "--label"]


# sh around each task's runner: its last line says how the runner ended, even when it was killed
# (srun runs on until every task has ended, so one task's end is heard only on its own lines).
# A trapped signal waits for the runner, which handles it; the runner's children get defaults.
TASK_END_SCRIPT = (
    "trap : INT TERM HUP; "
    '"$@"; rc=$?; '
    'printf \'{"event": "task_end", "rank": %d, "node": "%s", "rc": %d}\\036\\n\' '
    '"${SLURM_NODEID:-0}" "${SLURMD_NODENAME:-}" "$rc"; '
    'exit "$rc"'
)


def task_argv(argv: Sequence[str], nodes: int) -> list[str]:
    """`argv` told it is one of `nodes` tasks (env(1): srun passes the variable to each), in a
    shell whose last line is a `task_end` event {rank, node, rc}."""
    return ["sh", "-c", TASK_END_SCRIPT, "orch-task", "env", f"{TASKS_VARIABLE}={nodes}", *argv]


class TaskLines:
    """srun --label's merged stdout back into each task's whole lines, each task's lines handed
    to `on_line` in a thread of its own, in order (`close` waits for them all)."""

    def __init__(self, on_line: Callable[[str], None] | None) -> None:
        self.on_line = on_line
        self.lines: deque[str] = deque()  # whole lines, as the result's stdout (its tail)
        self._kept = 0
        self._pieces: dict[int, list[str]] = {}
        self._queues: dict[int, queue.Queue[object]] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.error: BaseException | None = None

    def feed(self, raw: str) -> None:
        """One line of srun's stdout: a labelled piece of some task's line."""
        found = _LABEL.match(raw)
        if found is None:  # srun's own words: not a task's
            self._deliver(-1, raw)
            return
        task, piece = int(found.group(1)), found.group(2)
        if not piece.endswith(RECORD_END):  # cut by srun: the line goes on in the next piece
            self._pieces.setdefault(task, []).append(piece)
            return
        self._deliver(task, "".join([*self._pieces.pop(task, []), piece[: -len(RECORD_END)]]))

    def _deliver(self, task: int, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            self._kept += len(line) + 1
            while self.on_line is not None and self._kept > STREAMED_TAIL_BYTES and self.lines:
                self._kept -= len(self.lines.popleft()) + 1
        if self.on_line is None:
            return
        lines = self._queues.get(task)
        if lines is None:
            lines = self._queues[task] = queue.Queue()
            thread = threading.Thread(
                target=self._hand_on, args=(lines,), daemon=True, name=f"slurm-task-{task}"
            )
            self._threads.append(thread)
            thread.start()
        lines.put(line)

    def _hand_on(self, lines: queue.Queue[object]) -> None:
        while True:
            line = lines.get()
            if line is _END:
                return
            try:
                if self.on_line is not None:
                    self.on_line(str(line))
            except Exception as exc:  # kept for the caller: the other tasks go on
                self.error = self.error or exc

    def close(self) -> None:
        """Hand on what is left (a last line cut short counts whole) and wait for every task's
        thread to finish its lines."""
        for task, pieces in sorted(self._pieces.items()):
            self._deliver(task, "".join(pieces))
        self._pieces.clear()
        for lines in self._queues.values():
            lines.put(_END)
        for thread in self._threads:
            thread.join()

    def stdout(self) -> str:
        """The whole lines kept (every one without a callback, else the last MiB), in arrival
        order, as one text."""
        with self._lock:
            return "".join(line + "\n" for line in self.lines)


def run_in_job(
    login: Connection,
    srun_command: Sequence[str],
    job_id: str,
    nodes: int,
    argv: Sequence[str],
    timeout: float,
) -> RunResult:
    """`argv` once on every node of the running job `job_id`, as a step beside the runners'
    (`--overlap`: it shares their CPUs, memory and GPUs instead of waiting for them);
    `srun_command` is how the login runs srun (SlurmConnection.srun_command)."""
    srun = [
        *srun_command,
        f"--jobid={job_id}",
        "--overlap",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        "--",
        *argv,
    ]
    result = login.run(srun, timeout=timeout)
    if result.rc != 0:
        raise ExecutionError(
            f"a step in Slurm job {job_id} ({argv[0]}) failed (rc {result.rc}): "
            f"{result.stderr.strip()[-300:]}"
        )
    return result

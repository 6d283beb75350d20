"""One job's tasks sharing srun's stdout (execute/transport/slurm/tasks.py,
runner/slurm_tasks.py): each task's lines put back together from srun's labelled pieces, each
node keeping its rank's cells, and the head's address read back where planning could only write a
placeholder."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from orchestrator.cell import Cell
from orchestrator.execute.apply.node_join import with_head_address
from orchestrator.execute.transport.slurm.tasks import TaskLines, queue_nodes, task_argv
from orchestrator.runner.slurm_tasks import HEAD_PLACEHOLDER, RECORD_END, node_payload

ROOT = Path(__file__).resolve().parents[2]


def _srun_label(task: int, text: str, cut: int = 1024) -> list[str]:
    """What `srun --label` prints for one task's output: pieces of at most `cut` characters,
    each on a line of its own behind the task's label."""
    out = []
    for line in text.split("\n")[:-1]:  # (not splitlines: it cuts at RECORD_END too)
        pieces = [line[i : i + cut] for i in range(0, len(line), cut)] or [""]
        out += [f"{task}: {piece}" for piece in pieces]
    return out


def test_each_tasks_lines_come_back_whole_in_order_from_interleaved_pieces() -> None:
    marked = {t: [f"{t}-{i}-" + "x" * n for i, n in enumerate((5, 1023, 1024, 3000))]
              for t in (0, 1)}  # fmt: skip
    srun = {t: _srun_label(t, "".join(ln + RECORD_END + "\n" for ln in lines))
            for t, lines in marked.items()}  # fmt: skip
    seen: dict[str, list[str]] = {}
    lock = threading.Lock()

    def on_line(line: str) -> None:
        with lock:
            seen.setdefault(threading.current_thread().name, []).append(line)

    lines = TaskLines(on_line)
    for a, b in zip(srun[0], srun[1], strict=False):  # the two tasks' pieces interleaved
        lines.feed(a)
        lines.feed(b)
    for rest in srun[0][len(srun[1]) :] + srun[1][len(srun[0]) :]:
        lines.feed(rest)
    lines.feed("srun: a word of srun's own")
    lines.close()
    assert seen["slurm-task-0"] == marked[0] and seen["slurm-task-1"] == marked[1]
    assert seen["slurm-task--1"] == ["srun: a word of srun's own"]
    assert sorted(lines.stdout().splitlines()) == sorted(
        [*marked[0], *marked[1], seen["slurm-task--1"][0]]
    )


def test_a_runner_task_marks_every_line_end() -> None:
    code = "import sys; print('{\"event\": \"x\"}'); sys.stdout.write('a\\nb\\n')"
    wrapped = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from orchestrator.runner.slurm_tasks import frame_stdout; frame_stdout();" + code
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapped, str(ROOT)], capture_output=True, timeout=30
    )
    assert done.stdout.decode() == f'{{"event": "x"}}{RECORD_END}\na{RECORD_END}\nb{RECORD_END}\n'


def _item(cid: str, rank: int | None) -> dict[str, Any]:
    cell: dict[str, Any] = {"id": cid, "env": {"HEAD": f"{HEAD_PLACEHOLDER}:1"}}
    if rank is not None:
        cell["node"] = {"of": "c", "rank": rank, "head": "login"}
    return {"cell": cell}


def test_each_node_keeps_its_ranks_cells_in_a_workdir_of_its_own() -> None:
    payload = {"workdir": ".orch", "facts": {}, "queue": [_item("c", None), _item("c.n1", 1)]}
    head, why = node_payload(payload, {"SLURM_NODEID": "0"})
    assert why is not None and "SLURM_JOB_NODELIST" in why  # the head's address: none to find
    assert [i["cell"]["id"] for i in head["queue"]] == ["c"]
    assert head["workdir"] == ".orch" and "facts" in head
    other, _ = node_payload(payload, {"SLURM_NODEID": "1"})
    assert [i["cell"]["id"] for i in other["queue"]] == ["c.n1"]
    assert other["workdir"] == ".orch/nodes/1" and "facts" not in other
    nothing, why = node_payload(payload, {"SLURM_NODEID": "2"})
    assert nothing["queue"] == [] and why is None
    _, why = node_payload(payload, {})
    assert why is not None and "SLURM_NODEID" in why


def test_the_heads_address_is_read_back_from_the_cell_it_ran(tmp_path: Path) -> None:
    cell = Cell.model_validate(
        {"id": "c-1", "playbook": "p", "host": "login", "axes": {},
         "env": {"DIST": f"--addr={HEAD_PLACEHOLDER}:5 --again={HEAD_PLACEHOLDER}"},
         "bench": {"argv": ["true"]}}
    )  # fmt: skip
    assert with_head_address(cell, tmp_path) is cell  # no cell.json: as declared
    ran = cell.model_dump(mode="json")
    ran["env"]["DIST"] = "--addr=10.1.2.3:5 --again=10.1.2.3"
    (tmp_path / "cell.json").write_text(json.dumps({"cell": ran}))
    resolved = with_head_address(cell, tmp_path)
    assert resolved.env["DIST"] == "--addr=10.1.2.3:5 --again=10.1.2.3" and resolved.id == "c-1"
    ran["env"]["DIST"] = "--addr=$(reboot):5 --again=$(reboot)"  # never a shell word
    (tmp_path / "cell.json").write_text(json.dumps({"cell": ran}))
    assert with_head_address(cell, tmp_path).env["DIST"] == cell.env["DIST"]
    assert queue_nodes([cell]) == 1


def _task(script: str, *, rank: str) -> tuple[int, list[str]]:
    """A task as srun starts it (`task_argv`): its exit status and its lines, framed."""
    argv = task_argv([sys.executable, "-c", script], 2)
    env = {"PATH": "/usr/bin:/bin", "SLURM_NODEID": rank, "SLURMD_NODENAME": f"node{rank}"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout.split("\n")[:-1]


def test_a_tasks_last_line_says_how_its_runner_ended() -> None:
    rc, lines = _task(
        "import os, sys; print(os.environ['ORCH_SLURM_TASKS']); sys.exit(3)", rank="1"
    )
    assert rc == 3  # srun still sees the runner's own status
    assert lines[0] == "2"  # the runner is told how many tasks share stdout
    assert lines[-1].endswith(RECORD_END)  # a whole line to TaskLines
    assert json.loads(lines[-1][: -len(RECORD_END)]) == {
        "event": "task_end", "rank": 1, "node": "node1", "rc": 3
    }  # fmt: skip


def test_a_killed_runner_still_gets_its_last_line() -> None:
    rc, lines = _task("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", rank="0")
    assert rc == 128 + 9
    (last,) = lines
    assert json.loads(last[: -len(RECORD_END)])["rc"] == 137

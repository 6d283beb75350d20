"""`run`: a host's queue of cells in one runner process, each archive streamed back as it is done.

The first stdin line is the payload: `{schema_version, run_id, workdir, secret_values, queue:
[{cell, session, reset}], stream, facts}` (or the one-cell form `{..., cell}`). Cells run in
order; consecutive cells with the same `session` key share one server (session.py). With
`stream`, each finished cell's archive follows its `done` event on stdout as `archive` (size),
`archive_data` (base64 chunks) and `archive_end` (sha256) lines, so the controller needs no
file transfer (no SFTP) and writes each cell as it arrives. With `facts`, a host snapshot is
taken first, in a thread beside the first cell, and sent as one `facts` event. Inside a Slurm
job, a `slurm_job` event (id, name, nodes from the job's env) comes before anything else.

A stop request (stdin EOF, a signal, the controller's parent gone) interrupts the cell in flight;
its archive is still sent, and no further cell starts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
import traceback
from typing import IO, Any, Dict, List, Optional, Tuple

from orchestrator.runner.cell import CellRunner
from orchestrator.runner.control import Control
from orchestrator.runner.protocol import display_path, now
from orchestrator.runner.redaction import Redactor, env_secret_values

# Raw bytes per archive_data line (base64 makes it 64 KiB of text).
CHUNK = 48 * 1024


def send_archive(control: Control, cell_id: str, path: str) -> None:
    """Stream the archive at `path` as archive / archive_data / archive_end lines, read in
    chunks (a cell with a huge server log never sits in memory whole); the sha256 comes last."""
    try:
        fh = open(path, "rb")  # noqa: SIM115
        size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        with control.lock:
            control.write_line(json.dumps({"event": "archive", "cell": cell_id, "error": str(exc)}))
        return
    digest = hashlib.sha256()
    head = {"event": "archive", "cell": cell_id, "path": display_path(path), "bytes": size}
    # One lock hold per line: a heartbeat or a warning may come in between, never inside.
    with fh:
        with control.lock:
            control.write_line(json.dumps(head))
        while True:
            chunk = fh.read(CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            line = json.dumps(
                {"event": "archive_data", "cell": cell_id, "data": base64.b64encode(chunk).decode()}
            )
            with control.lock:
                control.write_line(line)
    end = {"event": "archive_end", "cell": cell_id, "sha256": digest.hexdigest()}
    with control.lock:
        control.write_line(json.dumps(end))


def queue_items(payload: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The payload's cells as queue items ({cell, session, reset}), one-cell form included."""
    items = payload.get("queue")
    if items is None:
        return [{"cell": payload["cell"]}]
    return [dict(item) for item in items]


def _facts(control: Control, payload: Dict[str, Any]) -> threading.Thread:
    """Take the host snapshot in a thread; its event goes out when it is ready."""
    from orchestrator.runner.snapshot import take_snapshot

    options = payload.get("facts") or {}
    extra = [str(v) for v in payload.get("secret_values") or () if isinstance(v, (str, int))]
    redactor = Redactor(extra + env_secret_values({}, set()))

    def probe() -> None:
        try:
            # As much as the host's cells record (a playbook's `snapshot:`), everything by default.
            wanted = {k: bool(options.get(k, True)) for k in ("pip_freeze", "topo")}
            data: Any = take_snapshot(None, options.get("python"), None, options=wanted)
        except Exception as exc:
            data = {"absent": "probe failed: %s: %s" % (type(exc).__name__, exc)}
        with control.lock:
            control.write_line(
                json.dumps({"event": "facts", "data": redactor.data(data), "t": now()}, default=str)
            )

    thread = threading.Thread(target=probe, name="facts", daemon=True)
    thread.start()
    return thread


def announce_slurm_job(control: Control) -> None:
    """Inside a Slurm job, say which one first: the controller records its id before any cell
    starts, so a controller killed mid-cell leaves it for `--resume` to find (squeue alone may
    not show a job that started at once in time)."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return
    event = {
        "event": "slurm_job",
        "job_id": job_id,
        "name": os.environ.get("SLURM_JOB_NAME"),
        "nodes": os.environ.get("SLURM_JOB_NODELIST"),
        "t": now(),
    }
    with control.lock:
        control.write_line(json.dumps(event))


def run_queue(payload: Dict[str, Any], out: IO[bytes]) -> int:
    """Run every cell of the payload in order; the exit status of the worst cell."""
    control = Control(out)
    announce_slurm_job(control)
    control.start_watchers()
    heartbeat = payload.get("heartbeat")
    if isinstance(heartbeat, (int, float)) and heartbeat > 0:
        control.start_heartbeat(float(heartbeat))
    items = queue_items(payload)
    stream = bool(payload.get("stream"))
    facts = _facts(control, payload) if payload.get("facts") is not None else None
    worst = 0
    holder: Optional[CellRunner] = None  # the cell whose server the next one may take over
    try:
        for i, item in enumerate(items):
            if i > 0 and control.stop_event.is_set():
                break  # the controller records the cells never started (the first says why)
            session = session_of(item)
            if holder is not None and holder.session_key != session:
                stop_holder(holder)
                holder = None
            cell_payload = dict(payload)
            cell_payload.pop("queue", None)
            cell_payload.update(
                cell=item["cell"],
                session=session,
                reset=item.get("reset"),
                next_session=session_of(items[i + 1]) if i + 1 < len(items) else None,
            )
            rc, runner = run_one(control, cell_payload, holder, stream)
            worst = max(worst, rc)
            if runner is not None and (runner.adopted or holder is None):
                holder = runner if runner.keep_server else None
            # else: the cell never ran (reused, bad input): the kept server waits for the next
    finally:
        if holder is not None:
            stop_holder(holder)
        if facts is not None:
            facts.join(600)
        control.finished.set()
    return worst


def fail_queue(payload: Dict[str, Any], out: IO[bytes], reason: str) -> int:
    """Every cell of the payload failed before it started, for one reason; exit status 2."""
    control = Control(out)
    with control.lock:
        for item in queue_items(payload):
            bad_input_line(control, str((item.get("cell") or {}).get("id", "")), reason)
    return 2


def session_of(item: Dict[str, Any]) -> str:
    """A queue item's session key (a cell of its own when the controller gave none)."""
    return str(item.get("session") or item["cell"].get("id"))


def run_one(
    control: Control, payload: Dict[str, Any], holder: Optional[CellRunner], stream: bool
) -> Tuple[int, Optional[CellRunner]]:
    """One cell of the queue: run it (taking `holder`'s server over), then send its archive."""
    try:
        runner = CellRunner(payload, control.out, control)
    except (KeyError, TypeError, ValueError) as exc:
        cell_id = str((payload.get("cell") or {}).get("id", ""))
        with control.lock:
            reason = "bad input: %s: %s" % (type(exc).__name__, exc)
            return bad_input_line(control, cell_id, reason), None
    runner.previous = holder
    try:
        rc = runner.execute()
    except Exception as exc:
        reason = "runner crashed: %s: %s\n%s" % (type(exc).__name__, exc, traceback.format_exc())
        with control.lock:
            rc = bad_input_line(control, runner.cell_id, runner.redactor.text(reason))
    finally:
        runner.release_cell_lock()
    if stream and runner.sent_archive:
        send_archive(control, runner.cell_id, runner.sent_archive)
    return rc, runner


def bad_input_line(control: Control, cell_id: str, reason: str) -> int:
    """A `done` without a cell directory for `cell_id` (the caller holds control.lock)."""
    event = {
        "event": "done",
        "cell": cell_id,
        "status": "failed",
        "step": None,
        "reason": reason,
        "archive": None,
    }
    control.write_line(json.dumps(event))
    return 2


def stop_holder(holder: CellRunner) -> None:
    """Stop a kept server no later cell took over (the queue ended or was stopped)."""
    holder.cleaning = True
    try:
        detail = holder.do_stop()
    except Exception as exc:
        detail = {"error": "%s: %s" % (type(exc).__name__, exc)}
    holder.keep_server = False
    holder.end_session_log()
    holder.emit({"event": "session_end", "detail": detail}, to_file=False)

"""The runner's command line: `python3 runner.pyz run | collect | probe | stop-all |
check-origin | resolve | resolve-image` (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tarfile
from typing import Any, Dict, List, Optional

from orchestrator.runner.cell import archived_cell_json, make_archive
from orchestrator.runner.cell_queue import fail_queue, run_queue, send_archive
from orchestrator.runner.control import Control
from orchestrator.runner.layout import CELL_JSON
from orchestrator.runner.procs import (
    kill_pid,
    live_server_records,
    reap_server,
    record_runner_state,
    signal_server,
)
from orchestrator.runner.protocol import (
    StepFailed,
    bad_input,
    display_path,
    home_dir,
    parse_payload,
    read_first_line,
    read_json,
    resolve_path,
)
from orchestrator.runner.registry import registry_digest
from orchestrator.runner.remote_refs import list_remote_refs, pick_ref
from orchestrator.runner.repo import RepoChecks
from orchestrator.runner.slurm_tasks import frame_stdout, node_payload, task_count
from orchestrator.runner.snapshot import take_snapshot


def cmd_run() -> int:
    """`run`: the cells of the first stdin line, in order (queue.py)."""
    out = sys.stdout.buffer
    payload, why = parse_payload(read_first_line())
    if payload is None:
        return bad_input(out, why)
    if task_count(os.environ) > 1:  # one node of a multi-node Slurm job: its rank's cells
        payload, failure = node_payload(payload, os.environ)
        if failure is not None:
            return fail_queue(payload, out, failure)
    return run_queue(payload, out)


def cmd_collect(run_id: str, workdir: str, stream: bool = False) -> int:
    """`collect RUN`: one JSON line per finished cell of the run; with `stream`, each one's
    archive follows its line (queue.send_archive)."""
    run_dir = os.path.join(resolve_path(workdir), "runs", run_id)
    try:
        names = sorted(os.listdir(run_dir))
    except OSError:
        return 0
    cells = set()
    for name in names:
        if name.startswith("."):
            continue
        if name.endswith(".tar.gz"):
            cells.add(name[: -len(".tar.gz")])
        elif os.path.isdir(os.path.join(run_dir, name)):
            cells.add(name)
    control = Control(sys.stdout.buffer)
    for cell_id in sorted(cells):
        cell_dir = os.path.join(run_dir, cell_id)
        archive = cell_dir + ".tar.gz"
        info: Any = None
        try:
            if os.path.isdir(cell_dir):
                info = read_json(os.path.join(cell_dir, CELL_JSON))
                if not os.path.exists(archive):
                    make_archive(cell_dir, archive)  # renamed but not archived: finish the job
            else:
                info = archived_cell_json(archive, cell_id)
        except (OSError, ValueError, KeyError, tarfile.TarError):
            info = None
        if not isinstance(info, dict):
            continue
        item = {
            "cell_id": cell_id,
            "status": info.get("status"),
            "reason": info.get("reason"),
            "failed_step": info.get("failed_step"),
            "archive": display_path(archive),
        }
        sys.stdout.write(json.dumps(item) + "\n")
        sys.stdout.flush()
        if stream:
            send_archive(control, cell_id, archive)
    return 0


def cmd_probe(
    repo: Optional[str],
    python: Optional[str],
    server_log: Optional[str],
    pip_freeze: bool = True,
    topo: bool = True,
) -> int:
    """`probe`: print one snapshot JSON."""
    data = take_snapshot(
        resolve_path(repo) if repo else None,
        python,
        resolve_path(server_log) if server_log else None,
        options={"pip_freeze": pip_freeze, "topo": topo},
    )
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()
    return 0


def cmd_stop_all(run_id: str, workdir: str) -> int:
    """`stop-all RUN`: stop every live server recorded for the run (or `all`)."""
    servers_dir = os.path.join(resolve_path(workdir), "servers")
    targets = [
        (rec, pids)
        for rec, pids in live_server_records(servers_dir)
        if run_id == "all" or str(rec.get("run_id")) == run_id
    ]
    for rec, _pids in targets:
        # Its runner (if alive) then finishes and archives its cell as interrupted.
        if record_runner_state(rec) == "alive":
            kill_pid(int(rec["runner_pid"]), signal.SIGTERM)
        signal_server(rec, _pids, signal.SIGTERM)
    for rec, pids in targets:
        killed, leftover = reap_server(servers_dir, rec, pids)
        item = {
            "run_id": rec.get("run_id"),
            "cell_id": rec.get("cell_id"),
            "pid": rec.get("pid"),
            "stopped": not leftover,
            "killed": bool(killed),
            "leftover": leftover,
        }
        sys.stdout.write(json.dumps(item) + "\n")
    sys.stdout.flush()
    return 0


def cmd_check_origin(dest: str, url: str) -> int:
    """`check-origin DEST URL`: {"ok", "origin" | "reason"}; exit 0 only when the
    clone at DEST (as the repo step resolves it) is a clone of URL, or DEST holds no clone."""
    path = resolve_path(dest)
    checks = RepoChecks()
    result: Dict[str, Any] = {"ok": True, "origin": None}
    if os.path.isdir(path) and os.listdir(path):
        try:
            checks.check_existing_clone(path)
            result["origin"] = checks.check_origin(path, url)
        except StepFailed as exc:
            result = {"ok": False, "reason": exc.reason}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["ok"] else 1


def cmd_resolve(url: str, refs: List[str]) -> int:
    """`resolve URL REF...`: what each REF names at URL now, asked from this host.

    Prints {"ok": true, "refs": {REF: {"sha", "ref"} or null}} (null: no such branch or tag)
    or {"ok": false, "reason"} when the origin cannot be reached; exit 0 only when it answered.
    A relative URL is relative to $HOME, as the repo step clones it.
    """
    listed, why = list_remote_refs(url, refs, home_dir())
    result: Dict[str, Any]
    if listed is None:
        result = {"ok": False, "reason": why}
    else:
        found: Dict[str, Any] = {}
        for ref in refs:
            hit = pick_ref(listed, ref)
            found[ref] = {"sha": hit[0], "ref": hit[1]} if hit else None
        result = {"ok": True, "refs": found}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["ok"] else 1


def cmd_resolve_image(image: str, tls_verify: bool, conf: Optional[str]) -> int:
    """`resolve-image IMAGE`: the digest IMAGE's registry names now, asked from this host.

    Prints {"ok": true, "digest"} or {"ok": false, "reason", "unknown"} (`unknown`: the
    registry has no such tag); exit 0 only with a digest.
    """
    digest, why, found = registry_digest(image, tls_verify, conf)
    if digest is not None:
        result: Dict[str, Any] = {"ok": True, "digest": digest}
    else:
        result = {"ok": False, "reason": why, "unknown": not found}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if digest is not None else 1


def main(argv: Optional[List[str]] = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="runner.pyz", description="orch cell runner")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run one cell (JSON on stdin, events on stdout)")
    p_collect = sub.add_parser("collect", help="list finished cell archives of a run")
    p_collect.add_argument("run_id")
    p_collect.add_argument("--workdir", default=".orch")
    p_collect.add_argument("--stream", action="store_true", help="send each archive inline")
    p_probe = sub.add_parser("probe", help="print one host snapshot")
    p_probe.add_argument("--repo", help="git repository whose state to record")
    p_probe.add_argument("--python", help="interpreter that runs the server (torch, pip freeze)")
    p_probe.add_argument("--server-log", help="server log to read the 'NCCL version' line from")
    p_probe.add_argument("--no-pip-freeze", action="store_true", help="skip pip freeze")
    p_probe.add_argument("--no-topo", action="store_true", help="skip nvidia-smi topo -m")
    p_origin = sub.add_parser("check-origin", help="is the clone at DEST a clone of URL?")
    p_origin.add_argument("dest")
    p_origin.add_argument("url")
    p_resolve = sub.add_parser("resolve", help="what each REF names at URL now (git ls-remote)")
    p_resolve.add_argument("url")
    p_resolve.add_argument("refs", nargs="+", metavar="REF")
    p_image = sub.add_parser("resolve-image", help="the registry digest of IMAGE now")
    p_image.add_argument("image")
    p_image.add_argument("--no-tls-verify", action="store_true", help="an http registry")
    p_image.add_argument("--conf", help="a containers.conf (CONTAINERS_CONF)")
    p_stop = sub.add_parser("stop-all", help="stop every live server of a run")
    p_stop.add_argument("run_id")
    p_stop.add_argument("--workdir", default=".orch")
    args = parser.parse_args(argv)
    if task_count(os.environ) > 1:  # srun cuts and labels long lines: mark where each ends
        frame_stdout()
    if args.command == "run":
        return cmd_run()
    if args.command == "collect":
        return cmd_collect(args.run_id, args.workdir, args.stream)
    if args.command == "probe":
        return cmd_probe(
            args.repo, args.python, args.server_log, not args.no_pip_freeze, not args.no_topo
        )
    if args.command == "check-origin":
        return cmd_check_origin(args.dest, args.url)
    if args.command == "resolve":
        return cmd_resolve(args.url, list(args.refs))
    if args.command == "resolve-image":
        return cmd_resolve_image(args.image, not args.no_tls_verify, args.conf)
    if args.command == "stop-all":
        return cmd_stop_all(args.run_id, args.workdir)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

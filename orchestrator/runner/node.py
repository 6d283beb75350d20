"""A node's part of a server over several hosts, and the end requests that tie the nodes.

The runner on a node other than the head gets a cell with `node` set ({of, rank, head,
head_url, head_status}): it pins the repo, starts its part of the server like any server, and
then:

- `ready` waits until the controller writes `runs/<run>/.<cell>.head_ready` ({"invocation"}):
  the head's runner said `ready ok` (the head serves only when every node joined), while its own
  part stays alive. No network path to the head's HTTP port is needed: SGLang binds 127.0.0.1
  by default. With `ready.from_nodes` (cell `node.head_url` set) it then asks the head's
  readiness URL from here too, for URL_CHECK_SECONDS at most, and names the loopback if unreached;
- `verify_env` checks its own processes, as on the head;
- `bench` is the hold, whose start tells the controller the part is up and checked: the part
  keeps running until the controller releases it (the head's cell ended) or it exits by itself
  (which fails it: the node's part died).

The head, after its own checks, waits in its `nodes` step until the controller writes
`runs/<run>/.<cell>.joined` ({"ranks", "invocation"}) naming every node's part as up: no measured
request reaches a server whose nodes were never checked.

The controller ends a cell on any host by writing `runs/<run>/.<cell>.end` ({"kind": "release" |
"abort", "reason", "invocation"}): `abort` fails the cell now, with that reason (a node's part
died, so the head's bench must stop); `release` ends a node's hold. A request from another
invocation of the runner (an earlier attempt) is ignored.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from orchestrator.runner.context import HEAD_READY_SUFFIX, JOINED_SUFFIX, CellContext
from orchestrator.runner.protocol import StepFailed, now
from orchestrator.runner.server import FIRST_POLL, http_get, next_poll

# How a part that failed only because its head's cell ended first starts its reason (the
# controller names the head's own reason first then: execute/nodes.joined_verdict).
HEAD_ENDED = "the head's cell ended"
PART_EXIT_GRACE = 5.0  # seconds a part that exited waits for its release (the head stopping)
# Seconds a node asks the head's readiness URL (ready.from_nodes) once the head said it is ready.
URL_CHECK_SECONDS = 5.0


def _why(request: Dict[str, Any]) -> str:
    """': <reason>' of an end request, unless it only says the head's cell ended."""
    reason = str(request.get("reason") or "")
    return ": %s" % reason if reason and reason != HEAD_ENDED else ""


class NodeSteps(CellContext):
    """The part-of-a-server steps (mixed into CellRunner)."""

    proc: Any

    if TYPE_CHECKING:  # ServerSteps' (runner/server.py), beside this in CellRunner

        def do_server_start(self) -> Dict[str, Any]: ...

    @property
    def node_role(self) -> Optional[Dict[str, Any]]:
        """{of, rank, head, head_url} when this cell is a node's part, else None."""
        role = self.cell.get("node")
        return role if isinstance(role, dict) else None

    def do_server_start_part(self) -> Dict[str, Any]:
        """Start this node's part, unless the head's cell has already ended: the controller
        released it before this node reached the cell (the head failed early, or its runner
        died), and a part started now would only wait for a head that never comes."""
        self.raise_if_head_ended("this node's part started")
        return self.do_server_start()

    def raise_if_head_ended(self, before: str) -> None:
        """Fail the step when the controller has released this part already: the head's cell
        ended `before` this point (the reason starts with HEAD_ENDED)."""
        request = self.end_request()
        if request is not None:
            raise StepFailed("%s before %s%s" % (HEAD_ENDED, before, _why(request)))

    def do_ready_part(self) -> Dict[str, Any]:
        """Wait for the controller's word that the head is ready while this part stays alive;
        with `ready.from_nodes`, then ask the head's readiness URL from here too."""
        role = self.node_role or {}
        url = role.get("head_url")  # set only when the playbook asks (ready.from_nodes)
        ready = (self.server or {}).get("ready") or {}
        timeout = float(ready.get("timeout", 600.0))
        start = now()
        deadline = min(start + timeout, self.deadline)
        # A runner started without the controller's invocation has nobody to tell it.
        told = bool(self.invocation)
        while told:
            self.check()
            self.raise_if_part_exited("before the head was ready")
            self.raise_if_head_ended("it was ready")
            if self.head_ready_word() is not None:
                break
            if now() >= deadline:
                raise StepFailed(
                    "the head %s did not report ready within %gs"
                    % (role.get("head"), round(now() - start, 1))
                )
            self.stop_event.wait(0.1)
        if url:
            # Told: the head answers where it runs, so only the network path is left to see.
            until = min(deadline, now() + URL_CHECK_SECONDS) if told else deadline
            self.wait_for_head_url(str(url), int(role.get("head_status", 200)), until)
        self.startup_end = os.path.getsize(self.server_log_path) if self.proc else 0
        seconds = round(now() - start, 3)
        self.ready_info = {"seconds": seconds, "url": url, "head": role.get("head")}
        return {"seconds": seconds, "head": role.get("head"), "url": url, "told": told}

    def raise_if_part_exited(self, when: str) -> None:
        """Fail the step with the server's own reason when this node's part has exited."""
        rc = self.proc.poll()
        if rc is not None:
            raise StepFailed(self.server_exit_reason(rc, when))

    def head_ready_word(self) -> Optional[Dict[str, Any]]:
        """The controller's word that the head's part is ready, for this invocation, else None."""
        path = os.path.join(self.run_dir, "." + self.cell_id + HEAD_READY_SUFFIX)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("invocation") != self.invocation:
            return None
        return data

    def wait_for_head_url(self, url: str, want: int, until: float) -> None:
        """Ask the head's readiness URL from this node until it answers `want` or `until`
        passes; the failure names this node and what it got."""
        declared = max(0.05, float(((self.server or {}).get("ready") or {}).get("interval", 0.5)))
        interval = min(FIRST_POLL, declared)
        start = now()
        node = self.cell.get("host")
        while True:
            self.check()
            self.raise_if_part_exited("before the head was ready")
            self.raise_if_head_ended("it was ready")
            status, _body, err = http_get(url, max(0.5, min(5.0, until - now())))
            if status == want:
                return
            if now() >= until:
                waited = round(now() - start, 1)
                if status is None:
                    raise StepFailed(
                        "the head's readiness URL is not reachable from %s (bound to loopback?):"
                        " %s from %s for %gs" % (node, err, url, waited)
                    )
                raise StepFailed(
                    "the head's readiness URL answered HTTP %s, not %s, from %s (%s, for %gs)"
                    % (status, want, node, url, waited)
                )
            self.stop_event.wait(interval)
            interval = next_poll(interval, declared, now() - start)

    def joined_ranks(self) -> List[int]:
        """The ranks the controller said are up and checked, for this invocation of the cell."""
        path = os.path.join(self.run_dir, "." + self.cell_id + JOINED_SUFFIX)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return []
        if not isinstance(data, dict) or data.get("invocation") != self.invocation:
            return []
        ranks = data.get("ranks")
        return [r for r in ranks if isinstance(r, int)] if isinstance(ranks, list) else []

    def do_nodes_joined(self) -> Dict[str, Any]:
        """The head: wait until every node's part has started and passed its checks (the
        controller says so) before the first measured request; a node that fails aborts it."""
        nodes = {int(n.get("rank", 0)): str(n.get("host")) for n in self.cell.get("nodes") or []}
        ready = (self.server or {}).get("ready") or {}
        timeout = float(ready.get("timeout", 600.0))
        start = now()
        deadline = min(start + timeout, self.deadline)
        while True:
            self.check()  # a node's failure aborts the cell; Ctrl-C; the cell timeout
            rc = self.proc.poll() if self.proc is not None else None
            if rc is not None:
                raise StepFailed(self.server_exit_reason(rc, "while its nodes joined"))
            missing = sorted(set(nodes) - set(self.joined_ranks()))
            if not missing:
                return {"seconds": round(now() - start, 3), "ranks": sorted(nodes)}
            if now() >= deadline:
                raise StepFailed(
                    "%s did not start and pass its checks within %gs; no request was measured"
                    % (
                        ", ".join("node %s (rank %d)" % (nodes[r], r) for r in missing),
                        round(now() - start, 1),
                    )
                )
            self.stop_event.wait(0.1)

    def do_hold(self) -> Dict[str, Any]:
        """Keep this part running until the controller releases it; its own exit fails it."""
        start = now()
        while True:
            self.check()
            rc = self.proc.poll()  # before the release: a part killed under it stays a failure
            if rc is not None and rc < 0:  # killed: this node's part died
                raise StepFailed(self.server_exit_reason(rc, "while the head served"))
            request = self.end_request()
            if request is not None:
                held = {
                    "role": "node",
                    "held_seconds": round(now() - start, 3),
                    "released": str(request.get("reason") or ""),
                }
                if rc is not None:
                    held["part_exited"] = rc
                return held
            if rc is not None:
                # The head stopping ends a part by itself too: wait a moment for the release.
                until = now() + PART_EXIT_GRACE
                while now() < until:
                    request = self.end_request()
                    if request is not None and request.get("kind") == "release":
                        return {
                            "role": "node",
                            "held_seconds": round(now() - start, 3),
                            "released": str(request.get("reason") or ""),
                            "part_exited": rc,
                        }
                    self.stop_event.wait(0.1)
                raise StepFailed(self.server_exit_reason(rc, "while the head served"))
            self.stop_event.wait(0.2)

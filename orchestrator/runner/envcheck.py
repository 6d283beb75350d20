"""Step 8, verify_env: every process of the server carries the env the cell declared."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from orchestrator.runner.container_steps import ContainerSteps
from orchestrator.runner.layout import ENV_CHECK_JSON
from orchestrator.runner.procs import (
    REWRITTEN,
    EnvironRewritten,
    proc_alive,
    proc_cmdline,
    proc_environ,
    proc_table,
    tree_members,
)
from orchestrator.runner.protocol import StepFailed, write_json
from orchestrator.runner.redaction import REDACTED


class EnvCheckStep(ContainerSteps):
    """Compares each server process's /proc/<pid>/environ with cell.env."""

    def do_verify_env(self) -> Dict[str, Any]:
        server = self.server
        assert server is not None and self.proc is not None
        mode = str(server.get("verify_env", "strict"))
        rc = self.proc.poll()
        if rc is not None:
            raise StepFailed(self.server_exit_reason(rc, "after it became ready"))
        expected_env = self.expected_env()
        declared = sorted(expected_env)
        table = proc_table()
        members = tree_members(table, self.proc.pid, self.server_pgid, self.server_pgid)
        for root in self.container_roots():  # the server's processes inside its container
            members = sorted({*members, *tree_members(table, root, -1, -1)})
        processes: List[Dict[str, Any]] = []
        mismatches: List[Dict[str, Any]] = []
        rows: List[Tuple[int, str, List[str], List[str]]] = []
        unverified: List[Dict[str, Any]] = []
        for pid in members:
            try:
                environ = proc_environ(pid)
            except OSError as exc:
                if not proc_alive(pid):
                    continue
                why = REWRITTEN if isinstance(exc, EnvironRewritten) else "cannot read environ"
                entry = {
                    "pid": pid,
                    "ppid": table[pid].ppid,
                    "cmdline": proc_cmdline(pid),
                    "error": "%s: %s" % (why, exc) if why != REWRITTEN else str(exc),
                    "unverified": why,
                    "vars": {},
                }
                processes.append(entry)
                unverified.append(entry)
                continue
            cmdline = proc_cmdline(pid)
            variables: Dict[str, Any] = {}
            missing: List[str] = []
            wrong: List[str] = []
            for name in declared:
                expected = expected_env[name]
                observed = environ.get(name)
                ok = observed == expected
                secret = self.is_secret(name)
                shown_exp = REDACTED if secret else expected
                shown_obs = REDACTED if (secret and observed is not None) else printable(observed)
                variables[name] = {"expected": shown_exp, "observed": shown_obs, "ok": ok}
                if not ok:
                    mismatches.append(
                        {"pid": pid, "name": name, "expected": shown_exp, "observed": shown_obs}
                    )
                    if observed is None:
                        missing.append(name)
                    elif secret:
                        wrong.append("%s (secret value differs)" % name)
                    else:
                        wrong.append("%s='%s' (expected %r)" % (name, shown_obs, expected))
            processes.append(
                {"pid": pid, "ppid": table[pid].ppid, "cmdline": cmdline, "vars": variables}
            )
            if missing or wrong:
                rows.append((pid, cmdline, missing, wrong))
        ok = not mismatches
        write_json(
            self.path(ENV_CHECK_JSON),
            {
                "mode": mode,
                "ok": ok,
                "declared": declared,
                "processes": processes,
                "mismatches": mismatches,
                "unverified": [{"pid": u["pid"], "why": u["unverified"]} for u in unverified],
                "adapter_env": self.adapter_env_note(),
            },
        )
        detail: Dict[str, Any] = {
            "ok": ok,
            "processes": len(processes),
            "mismatches": len(mismatches),
        }
        if not ok and mode == "strict":
            raise StepFailed(
                "environment mismatch in %d of %d server processes (env_check.json):\n%s"
                % (len(rows), len(processes), env_table(rows))
            )
        warning = env_warning(rows, processes, unverified)
        if warning:
            detail["unverified"] = len(unverified)
            detail["warning"] = warning
        return detail

    # step 9: bench


def env_warning(
    rows: List[Tuple[int, str, List[str], List[str]]],
    processes: List[Dict[str, Any]],
    unverified: List[Dict[str, Any]],
) -> str:
    """What a passing check must still say: mismatches it only warned about (verify_env: warn),
    processes whose environment could not be read."""
    parts = []
    if rows:
        parts.append(
            "environment mismatch in %d of %d server processes (verify_env: warn; "
            "env_check.json)" % (len(rows), len(processes))
        )
    if unverified:
        whys = sorted({str(u["unverified"]) for u in unverified})
        parts.append(
            "%d of %d server processes not verified, environ %s: %s"
            % (
                len(unverified),
                len(processes),
                "; ".join(whys),
                ", ".join(
                    "%d (%s)" % (u["pid"], _short_cmdline(str(u["cmdline"]), 40))
                    for u in unverified
                ),
            )
        )
    return "; ".join(parts)


def _short_cmdline(cmd: str, width: int = 60) -> str:
    """A command line that fits a table cell, keeping its end (where ranks and roles are).

    The interpreter's directory is dropped first: `/long/venv/bin/python -m x worker --rank 1`
    must still say `--rank 1`.
    """
    words = cmd.split(" ")
    if words and "/" in words[0]:
        words[0] = os.path.basename(words[0])
    short = " ".join(words)
    return short if len(short) <= width else "..." + short[-(width - 3) :]


def env_table(rows: List[Tuple[int, str, List[str], List[str]]]) -> str:
    """A plain-text table: pid | cmdline | missing | mismatched."""
    header = ("pid", "cmdline", "missing", "mismatched")
    body = [
        (
            str(pid),
            _short_cmdline(cmd),
            ", ".join(miss) or "-",
            ", ".join(bad) or "-",
        )
        for pid, cmd, miss, bad in rows
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(4)]
    lines = []
    for row in [header, *body]:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())  # noqa: B905
    return "\n".join(lines)


def printable(value: Optional[str]) -> Optional[str]:
    """An environ value as JSON and messages can hold it: bytes that are not UTF-8 (read with
    surrogateescape, so they compare exactly) shown as \\xNN, as Python prints bytes."""
    if value is None:
        return None
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")

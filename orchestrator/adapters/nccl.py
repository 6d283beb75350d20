"""NCCL's own account of its settings, read from a server log, checked against the declared env.

With `NCCL_DEBUG=INFO` (and ENV in `NCCL_DEBUG_SUBSYS`, part of the default set) NCCL logs every
parameter it took from the environment: `NCCL_MIN_NCHANNELS set by environment to 32.`,
`NCCL_ALGO set by environment to Ring`, `NCCL_IB_HCA set to mlx5_0`, each line prefixed with
`<host>:<pid>:<tid> [<dev>] NCCL INFO `. A declared variable NCCL never reported did not reach it
(or was never read), so the setting may have had no effect: that is a failed check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.runner.redaction import REDACTED

# Not tuning parameters: they steer the logging itself and NCCL does not echo them.
EXEMPT = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})

_PREFIX = re.compile(r"(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>[^\]]*)\] NCCL INFO ")
_SET_BY_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*?)\s*$")
_SET_TO = re.compile(r"\b(NCCL_[A-Z0-9_]+) set to (.*?)\s*$")
_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+\S*)")
_INT_WITH_PERIOD = re.compile(r"^-?\d+\.$")


@dataclass
class NcclLog:
    """What NCCL said in a log: versions, variables per process (pid, or "" when unprefixed)."""

    versions: list[str] = field(default_factory=list)
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # NAME -> {pid: value}
    processes: set[str] = field(default_factory=set)  # pids with any NCCL INFO line
    env_processes: set[str] = field(default_factory=set)  # pids that reported any variable
    info_lines: int = 0

    def facts(self) -> dict[str, Any]:
        """A JSON-able summary: one value per variable when all processes agree, else a list."""
        env: dict[str, Any] = {}
        for name, by_pid in sorted(self.env.items()):
            values = sorted(set(by_pid.values()))
            env[name] = values[0] if len(values) == 1 else values
        by_process: dict[str, dict[str, str]] = {}
        for name, by_pid in sorted(self.env.items()):
            for pid, value in by_pid.items():
                by_process.setdefault(pid or "?", {})[name] = value
        return {
            "version": self.versions[0] if len(self.versions) == 1 else (self.versions or None),
            "env": env,
            "env_by_process": dict(sorted(by_process.items())),
            "processes": len(self.processes - {""}),
            "info_lines": self.info_lines,
        }


def _clean_value(value: str) -> str:
    # Integer parameters are logged as "... to 32." with a sentence-ending period.
    value = value.strip()
    return value[:-1] if _INT_WITH_PERIOD.match(value) else value


def parse_nccl(text: str) -> NcclLog:
    """Read NCCL version and environment lines (prefixed or bare) from a log."""
    log = NcclLog()
    for line in text.splitlines():
        if "NCCL" not in line:
            continue
        prefix = _PREFIX.search(line)
        pid = prefix.group("pid") if prefix else ""
        if prefix:
            log.info_lines += 1
            log.processes.add(pid)
        version = _VERSION.search(line)
        if version:
            if version.group(1) not in log.versions:
                log.versions.append(version.group(1))
            continue
        match = _SET_BY_ENV.search(line) or _SET_TO.search(line)
        if match and (prefix or line.lstrip().startswith("NCCL_")):
            log.env.setdefault(match.group(1), {})[pid] = _clean_value(match.group(2))
            log.env_processes.add(pid)
            if not prefix:
                log.info_lines += 1
    return log


def split_version(version: str) -> dict[str, str]:
    """`2.27.5+cuda12.9` -> {"nccl": "2.27.5", "cuda": "12.9"}."""
    nccl, _, build = version.partition("+")
    out = {"nccl": nccl}
    if build.startswith("cuda"):
        out["cuda"] = build[4:]
    return out


def env_check_skip_reason(env: Mapping[str, str]) -> str | None:
    """Why NCCL cannot be expected to report its settings in server.log, or None if it should."""
    level = env.get("NCCL_DEBUG", "").strip().upper()
    if level not in ("INFO", "TRACE"):
        shown = env.get("NCCL_DEBUG") or "unset"
        return f"NCCL_DEBUG is {shown}: NCCL logs its settings only with NCCL_DEBUG=INFO"
    if env.get("NCCL_DEBUG_FILE"):
        return "NCCL_DEBUG_FILE is set: NCCL writes its log there, not to server.log"
    subsys = env.get("NCCL_DEBUG_SUBSYS", "").strip().upper()
    if subsys:
        inverted = subsys.startswith("^")
        names = {s.strip() for s in subsys.lstrip("^").split(",")}
        has_env = (
            ("ENV" not in names and "ALL" not in names)
            if inverted
            else bool(names & {"ENV", "ALL"})
        )
        if not has_env:
            return f"NCCL_DEBUG_SUBSYS={env['NCCL_DEBUG_SUBSYS']} leaves out ENV lines"
    return None


def _same_value(reported: str, declared: str) -> bool:
    if reported.strip() == declared.strip():
        return True
    try:
        return int(reported.strip()) == int(declared.strip())
    except ValueError:
        return False


def _pids(pids: set[str]) -> str:
    return ", ".join(sorted(pids, key=lambda p: (len(p), p)))


def check_declared_env(env: Mapping[str, str], log: NcclLog) -> list[dict[str, Any]]:
    """One check per declared NCCL_* variable: reported by NCCL, in every process, same value.

    Returns no checks when NCCL was not asked to log its settings (see env_check_skip_reason).
    """
    if env_check_skip_reason(env) is not None:
        return []
    checks: list[dict[str, Any]] = []
    declared = {k: v for k, v in env.items() if k.startswith("NCCL_") and k not in EXEMPT}
    known_pids = log.env_processes - {""}
    for name, value in sorted(declared.items()):
        check_name = f"nccl_env:{name}"
        shown = "<redacted>" if value == REDACTED else value
        reports = log.env.get(name, {})
        if not reports:
            detail = f"NCCL never reported {name} (declared {shown})"
            if log.info_lines == 0:
                detail += "; server.log has no NCCL INFO lines at all"
            checks.append({"name": check_name, "ok": False, "detail": detail})
            continue
        problems: list[str] = []
        if value != REDACTED:
            wrong = {pid: v for pid, v in reports.items() if not _same_value(v, value)}
            for got in sorted(set(wrong.values())):
                where = {pid for pid, v in wrong.items() if v == got and pid}
                problems.append(
                    f"NCCL reported {name}={got} (declared {shown})"
                    + (f" in pid {_pids(where)}" if where else "")
                )
        missing = known_pids - set(reports)
        if missing:
            problems.append(
                f"{name} reported by {len(known_pids) - len(missing)} of {len(known_pids)} NCCL "
                f"processes; never by pid {_pids(missing)}"
            )
        if problems:
            checks.append({"name": check_name, "ok": False, "detail": "; ".join(problems)})
        else:
            count = len(set(reports) - {""}) or 1
            checks.append(
                {
                    "name": check_name,
                    "ok": True,
                    "detail": f"NCCL reported {name}={shown} in {count} process(es)",
                }
            )
    return checks


def analyze_nccl(text: str, env: Mapping[str, str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """NCCL facts (version, reported variables, whether the env check ran) and its checks."""
    log = parse_nccl(text)
    facts = log.facts()
    if len(log.versions) == 1:
        facts.update({f"{k}_version": v for k, v in split_version(log.versions[0]).items()})
    skip = env_check_skip_reason(env)
    facts["env_check"] = f"skipped: {skip}" if skip else "done"
    return facts, check_declared_env(env, log)

#!/usr/bin/env python3
"""orch cell runner: runs one cell on this host and leaves a complete cell directory behind.

Shipped to each host as one file (plus its sibling `probe.py`) and run under the host's own
Python (3.8 or newer, standard library only, Linux). See docs/ARCHITECTURE.md, "The runner
protocol" and "The cell directory".

Commands (cwd is $HOME; a relative --workdir is relative to $HOME, default `.orch`):

    runner.py run                                 one JSON line on stdin, JSON events on stdout
    runner.py collect RUN_ID [--workdir W]        one JSON line per finished cell archive
    runner.py probe [--repo DIR] [--python PY] [--server-log FILE]   one snapshot JSON
    runner.py stop-all RUN_ID [--workdir W]       stop every live server recorded for RUN_ID
                                                  (RUN_ID `all`: every recorded server)

`run` exit status: 0 passed, 1 failed, 3 interrupted, 2 bad input (no cell directory). Paths
in events and `collect` output are relative to $HOME when they lie under it, else absolute. An
archive holds one top-level directory named after the cell id.

Stdin EOF, the parent process going away, SIGTERM, SIGINT and SIGHUP all mean "controller
gone": the server is stopped, the cell directory is finished and archived, and the final `done`
event says `interrupted`.

A resumed controller may start a runner while the old one is still stopping its server: `run`
holds `runs/<run>/.<cell>.lock` (flock) for its whole life, waits for an earlier holder, and
reports an already passed or failed archive of the cell (`done` with `"reused": true`) instead of
running it twice. A live server of the same run is waited for while its runner lives and stopped
when its runner is dead; one of another run fails preflight.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import importlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from typing import IO, Any, Callable, Dict, List, Optional, Tuple

SCHEMA_VERSION = 1
REDACTED = "***REDACTED***"
STEPS = (
    "repo",
    "setup",
    "preflight",
    "snapshot_pre",
    "server_start",
    "ready",
    "capture_ready",
    "verify_env",
    "bench",
    "stop",
    "snapshot_post",
)
# Shorter secret values are not replaced inside files: "abc" would shred every log.
MIN_GLOBAL_SECRET_LEN = 4
LOG_TAIL_LINES = 30
PROBE_TIMEOUT = 180.0
POLL = 0.1
_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
# How long a runner waits, beyond the server's stop_grace, for another runner of the same run
# that is still stopping its server, taking the last snapshot and archiving (the cell lock, a
# live server record). ORCH_RUNNER_WAIT_MARGIN overrides it (tests shorten it).
WAIT_MARGIN = 120.0
RUNNER_PATH = os.path.abspath(__file__)
# Never send loopback readiness checks through a host's HTTP proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StepFailed(Exception):
    """A step failed: the cell is failed with `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Interrupted(Exception):
    """The controller is gone (stdin EOF, parent exit or a signal): stop and finish cleanly."""


# ---------------------------------------------------------------------------------------------
# small helpers


def _now() -> float:
    return time.time()


def home_dir() -> str:
    """$HOME as this process sees it (all relative paths of the protocol start there)."""
    return os.path.expanduser("~")


def resolve_path(path: str, base: Optional[str] = None) -> str:
    """`path` with ~ expanded, made absolute against `base` (default $HOME)."""
    path = os.path.expanduser(path)
    if os.path.isabs(path):
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(base if base is not None else home_dir(), path))


def display_path(path: str) -> str:
    """`path` relative to $HOME when it lies under it, else absolute."""
    home = os.path.realpath(home_dir())
    real = os.path.realpath(path)
    if real == home or real.startswith(home.rstrip("/") + "/"):
        return os.path.relpath(real, home)
    return os.path.abspath(path)


# `scheme://rest`, as git's is_url() sees it (a scheme is letters, digits, `+`, `-`, `.`).
_URL_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)(.*)$", re.DOTALL)
# Schemes whose user name is an account on the host (part of which repository), not a credential.
_SSH_SCHEMES = ("ssh", "git+ssh", "ssh+git")


def is_local_repo_url(url: str) -> bool:
    """True when git reads `url` as a local path (git's rule: no `:` before the first `/`)."""
    if url.startswith("file://"):
        return True
    if _URL_SCHEME_RE.match(url):
        return False
    colon, slash = url.find(":"), url.find("/")
    return colon < 0 or 0 <= slash < colon


def local_repo_path(path: str, base: str) -> str:
    """The real path of the repository a local `path` names, as git finds it.

    `~` is expanded and a relative path is taken against `base`. git tries `<path>/.git`,
    `<path>`, `<path>.git/.git` and `<path>.git` in this order; a work tree and its `.git`
    directory name the same repository, so the answer is the work tree.
    """
    path = resolve_path(path, base)
    for suffix in ("/.git", "", ".git/.git", ".git"):
        if os.path.isdir(path + suffix):
            path = path + suffix
            break
    real = os.path.realpath(path)
    if os.path.basename(real) == ".git":
        real = os.path.dirname(real)
    return real


def repo_url_key(url: str, base: str) -> str:
    """A comparison key for a repository URL: equal keys name the same repository.

    Local paths (also `file://` ones) become the real path of the repository (`base` for a
    relative one). Other URLs lose trailing `/` and `.git`, their scheme and host are lowercased,
    and credentials are dropped (an http(s) user or token says who fetches, not what; an ssh
    user is kept).
    """
    if url.startswith("file://"):
        # git percent-decodes file URLs (file:///a%20b is the directory "a b").
        return "path:" + local_repo_path(urllib.parse.unquote(url[len("file://") :]), base)
    if is_local_repo_url(url):
        return "path:" + local_repo_path(url, base)
    match = _URL_SCHEME_RE.match(url)
    if match:
        scheme, authority, rest = match.group(1).lower(), match.group(2), match.group(3)
        user, _at, hostport = authority.rpartition("@")
        user = user.partition(":")[0] if scheme in _SSH_SCHEMES else ""
        url = "%s://%s%s%s" % (scheme, user + "@" if user else "", hostport.lower(), rest)
    elif not url.startswith("["):
        # scp-like [user@]host:path (a bracketed IPv6 host is compared as written)
        userhost, _colon, path = url.partition(":")
        user, at, host = userhost.rpartition("@")
        url = "%s%s%s:%s" % (user, at, host.lower(), path)
    url = url.rstrip("/")
    if url.endswith(".git"):
        url = url[: -len(".git")].rstrip("/")
    return "url:" + url


def masked_url(url: str) -> str:
    """`url` with credentials hidden (an http(s) user or token, an ssh password) for display.

    The clone's origin may hold a token the controller never saw, so no redactor knows it.
    """
    match = _URL_SCHEME_RE.match(url)
    if not match or "@" not in match.group(2):
        return url
    user, _at, hostport = match.group(2).rpartition("@")
    if match.group(1).lower() in _SSH_SCHEMES:
        name, colon, _password = user.partition(":")
        user = name + (":" + REDACTED if colon else "")
    else:
        user = REDACTED
    return "%s://%s@%s%s" % (match.group(1), user, hostport, match.group(3))


def rewrite_url(url: str, rules: List[Tuple[str, str]]) -> str:
    """`url` after git's `url.<base>.insteadOf <prefix>` rules (the longest prefix wins)."""
    best: Optional[Tuple[str, str]] = None
    for base, prefix in rules:
        if url.startswith(prefix) and (best is None or len(prefix) > len(best[1])):
            best = (base, prefix)
    return best[0] + url[len(best[1]) :] if best else url


def write_json(path: str, data: Any) -> None:
    """Write `data` as indented UTF-8 JSON via a temporary file and a rename."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, ensure_ascii=False, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    """Parse a JSON file."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def tail_lines(path: str, n: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> str:
    """The last `n` lines of a text file (reads at most `max_bytes` from its end)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-n:])


def _with_tail(reason: str, tail: str, what: str) -> str:
    if not tail.strip():
        return reason + " (%s is empty)" % what
    return "%s\n--- last lines of %s ---\n%s" % (reason, what, tail)


def runner_version() -> str:
    """sha256 of this file, so a bundle says exactly which runner produced it."""
    try:
        with open(RUNNER_PATH, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()[:16]
    except OSError:
        return "unknown"


def wait_margin() -> float:
    """WAIT_MARGIN, or ORCH_RUNNER_WAIT_MARGIN when that is set to a number."""
    try:
        return max(0.0, float(os.environ.get("ORCH_RUNNER_WAIT_MARGIN", WAIT_MARGIN)))
    except ValueError:
        return WAIT_MARGIN


def stop_all_command(run_id: str, workdir: str) -> str:
    """The command line, runnable as printed, that stops `run_id`'s leftover servers here."""
    argv = (sys.executable or "python3", RUNNER_PATH, "stop-all", run_id, "--workdir", workdir)
    return " ".join(shlex.quote(a) for a in argv)


# ---------------------------------------------------------------------------------------------
# secrets


JSON_REDACT_MAX_BYTES = 64 << 20  # larger JSON is redacted as bytes, streamed


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("duplicate key")
    return dict(pairs)


class Redactor:
    """Replaces secret values in strings, nested data and files."""

    def __init__(self, values: List[str]) -> None:
        self.values = sorted(
            {v for v in values if len(v) >= MIN_GLOBAL_SECRET_LEN}, key=len, reverse=True
        )
        forms = set()
        for value in self.values:
            forms.add(value.encode("utf-8"))
            # Also catch the value as JSON writes it (quotes, backslashes, non-ASCII escaped).
            forms.add(json.dumps(value)[1:-1].encode("utf-8"))
            forms.add(json.dumps(value, ensure_ascii=False)[1:-1].encode("utf-8"))
        ordered = sorted(forms, key=len, reverse=True)
        self.max_len = max((len(f) for f in ordered), default=0)
        self.bytes_re = re.compile(b"|".join(re.escape(f) for f in ordered)) if ordered else None

    def text(self, value: str) -> str:
        """`value` with every secret replaced."""
        for secret in self.values:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def data(self, obj: Any) -> Any:
        """A copy of `obj` with every string redacted, and a number that is a secret too."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(str(k)): self.data(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.data(v) for v in obj]
        if isinstance(obj, (int, float)) and not isinstance(obj, bool) and str(obj) in self.values:
            return REDACTED
        return obj

    def _json_file(self, path: str) -> Optional[bool]:
        """A JSON file redacted value by value, so it stays JSON (a numeric secret replaced by
        bytes would leave `"key": ***REDACTED***`); None when it is not JSON or too big."""
        try:
            if os.path.getsize(path) > JSON_REDACT_MAX_BYTES:
                return None
            with open(path, encoding="utf-8") as fh:
                original = json.load(fh, object_pairs_hook=_unique_keys)
        except (OSError, ValueError):  # a duplicate key too: parsing would drop a value unseen
            return None
        redacted = self.data(original)
        if redacted == original:
            return False
        write_json(path, redacted)
        return True

    def file(self, path: str, chunk: int = 1 << 20) -> bool:
        """Redact a file in place (streamed); True when something was replaced."""
        pattern = self.bytes_re
        if pattern is None:
            return False
        if path.endswith(".json"):
            structured = self._json_file(path)
            if structured is not None:
                return structured
        keep = self.max_len - 1
        changed = False
        tmp = path + ".redact.tmp"
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            carry = b""
            while True:
                block = src.read(chunk)
                eof = not block
                buf = carry + block
                # Matches starting before `cut` lie wholly in buf; later ones wait for more data.
                cut = len(buf) if eof else max(0, len(buf) - keep)
                pos = 0
                for match in pattern.finditer(buf):
                    if match.start() >= cut:
                        break
                    dst.write(buf[pos : match.start()])
                    dst.write(REDACTED.encode())
                    pos = match.end()
                    changed = True
                consumed = max(pos, cut)
                dst.write(buf[pos:consumed])
                carry = buf[consumed:]
                if eof:
                    dst.write(carry)
                    break
        if changed:
            shutil.copymode(path, tmp)
            os.replace(tmp, path)
        else:
            os.unlink(tmp)
        return changed

    def tree(self, root: str) -> List[str]:
        """Redact every regular file under `root`; returns the files that changed."""
        changed = []
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(dirpath, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                try:
                    if self.file(path):
                        changed.append(os.path.relpath(path, root))
                except OSError:
                    continue
        return changed


# ---------------------------------------------------------------------------------------------
# processes (/proc)


class ProcInfo:
    """One line of /proc/<pid>/stat that matters here."""

    __slots__ = ("pgid", "pid", "ppid", "sid", "start", "state")

    def __init__(self, pid: int, state: str, ppid: int, pgid: int, sid: int, start: int) -> None:
        self.pid = pid
        self.state = state
        self.ppid = ppid
        self.pgid = pgid
        self.sid = sid
        self.start = start


def proc_info(pid: int) -> Optional[ProcInfo]:
    """Parse /proc/<pid>/stat; None when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return ProcInfo(pid, rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]))
    except (IndexError, ValueError):
        return None


def proc_table() -> Dict[int, ProcInfo]:
    """Every process on the host."""
    table: Dict[int, ProcInfo] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = proc_info(int(name))
            if info is not None:
                table[info.pid] = info
    return table


def proc_alive(pid: int, start: Optional[int] = None) -> bool:
    """The process exists, is not a zombie and (when given) started at `start`."""
    info = proc_info(pid)
    if info is None or info.state in ("Z", "X"):
        return False
    return start is None or info.start == start


def proc_cmdline(pid: int) -> str:
    """The command line of `pid`, arguments joined by spaces ("" when unreadable)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    return " ".join(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)


def proc_environ(pid: int) -> Dict[str, str]:
    """The environment `pid` was started with (raises OSError when unreadable)."""
    with open("/proc/%d/environ" % pid, "rb") as fh:
        raw = fh.read()
    env: Dict[str, str] = {}
    for item in raw.split(b"\0"):
        if not item:
            continue
        key, _sep, value = item.decode("utf-8", "surrogateescape").partition("=")
        env.setdefault(key, value)
    return env


def has_marker(pid: int, run_id: str, cell_id: str) -> bool:
    """`pid` carries the ORCH_RUN_ID/ORCH_CELL_ID markers a runner gives its server."""
    try:
        env = proc_environ(pid)
    except OSError:
        return False
    return env.get("ORCH_RUN_ID") == run_id and env.get("ORCH_CELL_ID") == cell_id


def tree_members(table: Dict[int, ProcInfo], root: int, pgid: int, sid: int) -> List[int]:
    """`root`, its descendants, and every process in its process group or session."""
    children: Dict[int, List[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found = set()
    stack = [root] if root in table else []
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, []))
    for info in table.values():
        if info.pgid == pgid or info.sid == sid:
            found.add(info.pid)
    found.discard(os.getpid())
    return sorted(p for p in found if table[p].state not in ("Z", "X"))


def kill_group(pgid: int, sig: int) -> None:
    """Signal a process group, ignoring one that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_pid(pid: int, sig: int) -> None:
    """Signal one process, ignoring one that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


# ---------------------------------------------------------------------------------------------
# ports


def port_in_use(port: int) -> Optional[str]:
    """Why `port` cannot be bound on 127.0.0.1 / 0.0.0.0, or None when it is free."""
    for addr in ("127.0.0.1", "0.0.0.0"):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            # SO_REUSEADDR ignores TIME_WAIT leftovers but still fails on a listening socket.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((addr, port))
        except OSError as exc:
            return "cannot bind %s:%d (%s)" % (addr, port, exc.strerror or exc)
        finally:
            sock.close()
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return "something accepts connections on 127.0.0.1:%d" % port
    except OSError:
        pass
    finally:
        probe.close()
    return None


def port_owner(port: int) -> str:
    """Best effort: 'pid N (cmdline)' of whoever listens on `port`, or ''."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)
                for line in fh:
                    parts = line.split()
                    listening = len(parts) > 9 and parts[3] == "0A"
                    if listening and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add("socket:[%s]" % parts[9])
        except (OSError, ValueError):
            continue
    if not inodes:
        return ""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fd_dir = "/proc/%s/fd" % name
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                    return "pid %s (%s)" % (name, proc_cmdline(int(name))[:200])
            except OSError:
                continue
    return ""


# ---------------------------------------------------------------------------------------------
# HTTP


def http_get(url: str, timeout: float) -> Tuple[Optional[int], bytes, str]:
    """GET `url`: (status or None, body, error text)."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return int(resp.status), resp.read(), ""
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read()
        except Exception:
            body = b""
        return int(exc.code), body, ""
    except Exception as exc:
        reason = getattr(exc, "reason", None)
        return None, b"", "%s: %s" % (type(exc).__name__, reason if reason is not None else exc)


class LogScanner:
    """Searches a growing log file for a regex, reading only what was appended."""

    def __init__(self, path: str, pattern: str) -> None:
        self.path = path
        self.regex = re.compile(pattern, re.MULTILINE)
        self.pos = 0
        self.keep = ""

    def found(self) -> bool:
        """True once the pattern has appeared in the file."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.pos)
                data = fh.read()
        except OSError:
            return False
        self.pos += len(data)
        text = self.keep + data.decode("utf-8", "replace")
        if self.regex.search(text):
            return True
        self.keep = text[-16384:]
        return False


# ---------------------------------------------------------------------------------------------
# the probe (sibling module, optional)


def load_probe() -> Tuple[Any, str]:
    """The sibling probe module, or (None, why it is missing)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path[:1] != [here]:
        sys.path.insert(0, here)
    try:
        return importlib.import_module("probe"), ""
    except ImportError:
        return None, "probe not shipped"
    except Exception as exc:
        return None, "probe failed to import: %s: %s" % (type(exc).__name__, exc)


def take_snapshot(
    repo_dir: Optional[str],
    python: Optional[str],
    server_log: Optional[str],
    timeout: float = PROBE_TIMEOUT,
    cancelled: Optional[Callable[[], bool]] = None,
    options: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """probe.snapshot(...) in a thread with a timeout; never raises.

    `options` are the cell's snapshot options (pip_freeze, topo): the slow parts can be off.
    """
    probe, why = load_probe()
    if probe is None:
        return {"absent": why}
    box: Dict[str, Any] = {}

    def work() -> None:
        try:
            opts = options or {}
            box["result"] = probe.snapshot(
                repo_dir,
                python,
                server_log,
                pip_freeze=bool(opts.get("pip_freeze", True)),
                topo=bool(opts.get("topo", True)),
            )
        except BaseException as exc:
            box["error"] = "%s: %s\n%s" % (type(exc).__name__, exc, traceback.format_exc())

    thread = threading.Thread(target=work, name="probe", daemon=True)
    thread.start()
    deadline = _now() + timeout
    while thread.is_alive() and _now() < deadline:
        thread.join(POLL)
        if cancelled is not None and cancelled():
            return {"error": "snapshot abandoned: runner interrupted"}
    if thread.is_alive():
        return {"error": "probe timed out after %gs" % timeout}
    if "error" in box:
        return {"error": box["error"]}
    result = box.get("result")
    return result if isinstance(result, dict) else {"result": result}


# ---------------------------------------------------------------------------------------------
# the cell runner


def _python_of(argv: List[str]) -> Optional[str]:
    """The interpreter a server runs under, when its argv starts with one."""
    if argv and re.match(r"^python[0-9.]*$", os.path.basename(argv[0])):
        return argv[0]
    return None


class RepoChecks:
    """Is the clone at a repo dest the declared repository's? Used by the repo step, and by
    `runner.py check-origin` for the controller (bisect reads the commit list from the clone)."""

    def git_ok(self, args: List[str], cwd: str) -> Tuple[bool, str]:
        """Run git; (succeeded, stdout)."""
        env = dict(os.environ)
        env["GIT_TERMINAL_PROMPT"] = "0"
        proc = subprocess.run(
            ["git", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        return proc.returncode == 0, proc.stdout.decode("utf-8", "replace")

    def check_existing_clone(self, dest: str) -> None:
        """StepFailed unless the non-empty `dest` is a git clone of its own."""
        if not self.git_ok(["rev-parse", "--git-dir"], dest)[0]:
            raise StepFailed("repo dest %s exists and is not a git repository" % dest)
        self.check_own_work_tree(dest)

    def check_own_work_tree(self, dest: str) -> None:
        """StepFailed unless `dest` is the top of a git work tree (its own clone).

        `rev-parse --git-dir` also succeeds in a plain directory inside another repository (a
        dotfiles repo in $HOME): checking out there would move that repository's HEAD.
        """
        ok, out = self.git_ok(["rev-parse", "--show-toplevel"], dest)
        if not ok or not out.strip():
            raise StepFailed(
                "repo dest %s exists and is not a git work tree (a bare repository or a .git "
                "directory?); give the repo another repo.dest" % dest
            )
        top = os.path.realpath(out.strip())
        if top != os.path.realpath(dest):
            raise StepFailed(
                "repo dest %s is not a clone of its own: it lies inside the git work tree %s; "
                "give the repo a repo.dest outside it" % (dest, top)
            )

    def insteadof_rules(self, dest: str) -> List[Tuple[str, str]]:
        """git's `url.<base>.insteadOf <prefix>` rules as (base, prefix), as seen in `dest`."""
        # -z: a base may hold spaces; each record is `key\nvalue\0`.
        ok, out = self.git_ok(["config", "-z", "--get-regexp", r"^url\..*\.insteadof$"], dest)
        rules: List[Tuple[str, str]] = []
        for record in out.split("\0") if ok else ():
            key, _nl, prefix = record.partition("\n")
            if key.lower().startswith("url.") and key.lower().endswith(".insteadof"):
                rules.append((key[len("url.") : -len(".insteadof")], prefix))
        return rules

    def check_origin(self, dest: str, url: str, checked: bool = True) -> str:
        """The URL the clone at `dest` fetches from (its origin, after insteadOf rules).

        When `checked`, StepFailed unless that origin is the repository `url` names: a clone of
        another repository (a fork, another project) at the same dest is never reused, because
        its tags and branches would silently stand for the declared repository's.
        """
        ok, out = self.git_ok(["config", "--get-all", "remote.origin.url"], dest)
        configured = out.splitlines()[0] if ok and out.strip() else ""
        if not configured:
            raise StepFailed(
                "repo dest %s is a git clone without an origin remote, so it cannot be shown to "
                "hold repo.url %s; give this repo its own repo.dest or remove that clone"
                % (dest, masked_url(url))
            )
        rules = self.insteadof_rules(dest)
        origin = rewrite_url(configured, rules)  # what `git fetch` (first url) contacts
        if not checked:
            return origin
        home = home_dir()
        # A relative origin is relative to the clone; a relative repo.url to $HOME (clone's cwd).
        if repo_url_key(configured, dest) == repo_url_key(url, home):
            return origin
        if repo_url_key(origin, dest) == repo_url_key(rewrite_url(url, rules), home):
            return origin
        raise StepFailed(
            "repo dest %s is a clone of %s, not of repo.url %s; give this repo its own "
            "repo.dest, or remove the old clone, or, if both name the same repository, point "
            "the clone there: git -C %s remote set-url origin %s"
            % (
                dest,
                masked_url(origin),
                masked_url(url),
                shlex.quote(dest),
                shlex.quote(masked_url(url)),
            )
        )


class CellRunner(RepoChecks):
    """Runs one cell: the steps of ARCHITECTURE.md, then the cell directory and its archive."""

    def __init__(self, payload: Dict[str, Any], out: IO[bytes]) -> None:
        self.out = out
        self.out_broken = False
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.stop_reason = ""
        self.finished = threading.Event()
        self.t0 = _now()

        self.run_id = str(payload["run_id"])
        self.cell: Dict[str, Any] = payload["cell"]
        self.cell_id = str(self.cell["id"])
        self.env: Dict[str, str] = {str(k): str(v) for k, v in self.cell.get("env", {}).items()}
        self.secret_names = set(str(s) for s in self.cell.get("secrets", ()))
        secret_values = [v for k, v in self.env.items() if k in self.secret_names]
        # Secret values that are not env values (vars, -e values): absent from older controllers.
        extra = payload.get("secret_values")
        if isinstance(extra, list):
            secret_values += [
                str(v)
                for v in extra
                if isinstance(v, (str, int, float)) and not isinstance(v, bool)
            ]
        self.redactor = Redactor(secret_values)
        self.repo: Optional[Dict[str, Any]] = self.cell.get("repo")
        self.server: Optional[Dict[str, Any]] = self.cell.get("server")
        self.stop_grace = float(self.server.get("stop_grace", 15.0)) if self.server else 15.0
        # How long to wait for another runner of this run (cell lock, its live server).
        self.wait_limit = self.stop_grace + wait_margin()
        self.bench: Dict[str, Any] = self.cell["bench"]
        self.deadline = self.t0 + float(self.cell.get("cell_timeout", 4 * 3600.0))

        self.workdir_arg = str(payload.get("workdir") or ".orch")
        self.workdir = resolve_path(self.workdir_arg)
        self.run_dir = os.path.join(self.workdir, "runs", self.run_id)
        self.partial = os.path.join(self.run_dir, "." + self.cell_id + ".partial")
        self.final = os.path.join(self.run_dir, self.cell_id)
        self.archive = self.final + ".tar.gz"
        self.servers_dir = os.path.join(self.workdir, "servers")
        self.lock_path = os.path.join(self.run_dir, "." + self.cell_id + ".lock")
        self.lock_fd: Optional[int] = None  # held (flock) for the runner's whole life
        self.dir = self.partial  # where files go now; becomes self.final after the rename

        self.steps: Dict[str, Dict[str, Any]] = {s: {"status": "not_run"} for s in STEPS}
        self.current_step = ""
        self.status = "passed"
        self.reason = ""
        self.failed_step: Optional[str] = None
        self.cleaning = False
        self.events_fh: Optional[IO[str]] = None

        self.repo_dest: Optional[str] = None
        self.repo_sha: Optional[str] = None
        self.force_setup = False
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.server_pgid = 0
        self.server_start_time: Optional[int] = None
        self.server_record: Optional[str] = None
        self.server_log_fh: Optional[IO[bytes]] = None
        self.captures: List[Dict[str, Any]] = []
        self.stop_info: Dict[str, Any] = {}
        self.ready_info: Dict[str, Any] = {}

    # -- events and control ----------------------------------------------------------------

    def path(self, *parts: str) -> str:
        """A path inside the cell directory."""
        return os.path.join(self.dir, *parts)

    def emit(self, event: Dict[str, Any], to_file: bool = True, to_stdout: bool = True) -> None:
        """Send one event to stdout and events.jsonl (secrets redacted)."""
        event.setdefault("t", round(_now(), 3))
        event = self.redactor.data(event)
        with self.lock:
            if to_file and self.events_fh is not None:
                try:
                    self.events_fh.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
                    self.events_fh.flush()
                except (OSError, ValueError):
                    pass
            if to_stdout and not self.out_broken:
                line = json.dumps(event, default=str) + "\n"
                try:
                    self.out.write(line.encode("utf-8"))
                    self.out.flush()
                except (OSError, ValueError):
                    self.out_broken = True
                    _silence_stdout()
                    self.interrupt("controller gone (stdout closed)")

    def interrupt(self, reason: str) -> None:
        """Ask the cell to stop (first reason wins)."""
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()

    def check(self) -> None:
        """Raise when interrupted or past the cell timeout (not during cleanup)."""
        if self.cleaning:
            return
        if self.stop_event.is_set():
            raise Interrupted(self.stop_reason)
        if _now() > self.deadline:
            raise StepFailed(
                "cell timeout (%gs) reached during step %s"
                % (self.deadline - self.t0, self.current_step)
            )

    def remaining(self) -> float:
        """Seconds left before the cell timeout (at least 1)."""
        return max(1.0, self.deadline - _now())

    def _watch_stdin(self) -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        self.interrupt("controller gone (stdin closed)")

    def _watch_parent(self, ppid: int) -> None:
        while not self.finished.wait(0.5):
            if os.getppid() != ppid:
                self.interrupt("controller gone (parent process exited)")
                return

    def start_watchers(self) -> None:
        """Watch stdin, the parent process and signals for 'controller gone'."""
        threading.Thread(target=self._watch_stdin, name="stdin", daemon=True).start()
        threading.Thread(
            target=self._watch_parent, args=(os.getppid(),), name="parent", daemon=True
        ).start()

        # The handler takes no lock: Event.set() in a handler deadlocks when the signal lands
        # while this thread holds the event's lock (in stop_event.wait, or a first handler).
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)

        def on_signal(signum: int, _frame: Any) -> None:
            with contextlib.suppress(OSError):  # a full pipe: a signal is already on its way
                os.write(wake_w, bytes([signum]))

        def relay() -> None:
            signum = os.read(wake_r, 1)[0]
            self.interrupt("signal %s" % signal.Signals(signum).name)

        threading.Thread(target=relay, name="signals", daemon=True).start()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)

    # -- subprocesses ------------------------------------------------------------------------

    def base_env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """The host environment with the cell's env and the orch markers on top."""
        env = dict(os.environ)
        env.update(self.env)
        env["ORCH_RUN_ID"] = self.run_id
        env["ORCH_CELL_ID"] = self.cell_id
        if extra:
            env.update(extra)
        return env

    def wait_proc(
        self,
        proc: subprocess.Popen[bytes],
        timeout: float,
        also: Optional[Callable[[], Optional[str]]] = None,
    ) -> Tuple[Optional[int], bool, Optional[str]]:
        """Wait for a process started in its own session: (rc, timed_out, why aborted).

        On timeout, interruption or when `also()` returns a reason, the whole process group is
        killed. Interruption re-raises after the kill.
        """
        deadline = _now() + timeout
        why: Optional[str] = None
        timed_out = False
        while True:
            rc = proc.poll()
            if rc is not None:
                return rc, False, None
            if self.stop_event.is_set() and not self.cleaning:
                why = "interrupted"
            elif _now() > self.deadline and not self.cleaning:
                why = "cell timeout"
            elif _now() > deadline:
                timed_out = True
            elif also is not None:
                why = also()
            if why or timed_out:
                break
            # wait() rather than sleep(): a short command returns as soon as it exits.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(POLL)
        kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_group(proc.pid, signal.SIGKILL)
        if why == "interrupted":
            raise Interrupted(self.stop_reason)
        if why == "cell timeout":
            self.check()  # raises StepFailed("cell timeout ...")
        return proc.returncode, timed_out, why

    def run_cmd(
        self, argv: List[str], cwd: str, timeout: float, env: Optional[Dict[str, str]] = None
    ) -> Tuple[Optional[int], str, str, bool]:
        """Run a short command and capture its output: (rc, stdout, stderr, timed_out)."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as exc:
                return 127, "", "cannot run %s: %s" % (argv[0], exc), False
            rc, timed_out, _why = self.wait_proc(proc, timeout)
            out.seek(0)
            err.seek(0)
            return (
                rc,
                out.read().decode("utf-8", "replace"),
                err.read().decode("utf-8", "replace"),
                timed_out,
            )

    def git(self, args: List[str], cwd: str, check: bool = True) -> str:
        """Run git; StepFailed with its stderr when `check` and it fails."""
        env = dict(os.environ)
        env["GIT_TERMINAL_PROMPT"] = "0"  # a credential prompt would hang the cell
        rc, out, err, timed_out = self.run_cmd(["git", *args], cwd, self.remaining(), env)
        if check and (rc != 0 or timed_out):
            raise StepFailed(
                "git %s failed (%s) in %s: %s"
                % (
                    " ".join(args),
                    "timed out" if timed_out else "rc %s" % rc,
                    cwd,
                    (err.strip() or out.strip())[-2000:],
                )
            )
        return out if rc == 0 else ""

    def git_ok(self, args: List[str], cwd: str) -> Tuple[bool, str]:
        """Run git within the cell's time left; (succeeded, stdout). RepoChecks' own has no
        deadline: `check-origin` runs outside any cell."""
        env = dict(os.environ)
        env["GIT_TERMINAL_PROMPT"] = "0"
        rc, out, _err, _t = self.run_cmd(["git", *args], cwd, self.remaining(), env)
        return rc == 0, out

    # -- steps -------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[[], Optional[Dict[str, Any]]], applies: bool) -> None:
        """Run one step with its events and timings; failures propagate."""
        rec = self.steps[name]
        if not applies:
            rec["status"] = "skipped"
            self.emit({"event": "step", "step": name, "status": "skipped"})
            return
        self.current_step = name
        rec.update(status="running", start=round(_now(), 3))
        self.emit({"event": "step", "step": name, "status": "start"})
        try:
            self.check()
            detail = fn() or {}
        except StepFailed as exc:
            rec.update(status="failed", end=round(_now(), 3), reason=exc.reason)
            self.emit({"event": "step", "step": name, "status": "failed", "reason": exc.reason})
            raise
        except Interrupted as exc:
            rec.update(status="interrupted", end=round(_now(), 3), reason=str(exc))
            self.emit({"event": "step", "step": name, "status": "interrupted", "reason": str(exc)})
            raise
        except Exception as exc:
            reason = "runner error in step %s: %s: %s\n%s" % (
                name,
                type(exc).__name__,
                exc,
                traceback.format_exc(),
            )
            rec.update(status="failed", end=round(_now(), 3), reason=reason)
            self.emit({"event": "step", "step": name, "status": "failed", "reason": reason})
            raise StepFailed(reason) from exc
        rec.update(status="ok", end=round(_now(), 3))
        event: Dict[str, Any] = {"event": "step", "step": name, "status": "ok"}
        if detail:
            event["detail"] = detail
        self.emit(event)

    # step 1: repo
    def do_repo(self) -> Dict[str, Any]:
        repo = self.repo
        assert repo is not None
        dest = resolve_path(str(repo["dest"]))
        self.repo_dest = dest
        version = str(repo["version"])
        policy = str(repo.get("dirty", "refuse"))
        home = home_dir()
        cloned = False
        if not os.path.isdir(dest) or not os.listdir(dest):
            parent = os.path.dirname(dest)
            os.makedirs(parent, exist_ok=True)
            # `--`: a URL starting with "-" is a URL, never an option (--upload-pack=...).
            self.git(["clone", "--no-checkout", "--", str(repo["url"]), dest], home)
            cloned = True
        else:
            self.check_existing_clone(dest)
        # Before the dirty policy too: `reset` must never clean a checkout of another repository.
        origin = self.check_origin(dest, str(repo["url"]), checked=not cloned)

        porcelain = ""
        if not cloned:
            porcelain = self.git(["status", "--porcelain", "--untracked-files=all"], dest)
        dirty = bool(porcelain.strip())
        action = "none"
        if dirty:
            if policy == "refuse":
                files = [ln[3:] for ln in porcelain.splitlines() if ln.strip()]
                shown = ", ".join(files[:20]) + (" ..." if len(files) > 20 else "")
                raise StepFailed(
                    "repo dest is dirty: %s (%s; set repo.dirty: reset or record)" % (shown, dest)
                )
            if policy == "reset":
                self.git(["reset", "--hard", "-q"], dest)
                self.git(["clean", "-fdxq"], dest)
                self.force_setup = True  # clean -x may have removed setup's build outputs
                action = "reset"
            else:
                action = "recorded"

        sha, source, fetched = self.resolve_version(dest, version)
        self.git(["checkout", "-q", "--detach", sha], dest)
        head = self.git(["rev-parse", "HEAD"], dest).strip()
        if head != sha:
            raise StepFailed("HEAD is %s after checkout, expected %s" % (head, sha))
        self.repo_sha = sha
        describe = self.git(["describe", "--always", "--tags", "--dirty"], dest, False).strip()
        after = self.git(["status", "--porcelain", "--untracked-files=all"], dest, False)
        reflog = self.git(["reflog", "-n", "50", "--date=iso"], dest, False).splitlines()
        write_json(
            self.path("repo.json"),
            {
                "url": repo["url"],
                "origin_url": masked_url(origin),
                "dest": dest,
                "requested": version,
                "resolved_from": source,
                "sha": sha,
                "describe": describe,
                "status_porcelain": porcelain,
                "dirty": dirty,
                "dirty_action": action,
                "status_after": after,
                "reflog": reflog,
                "fetched": fetched,
                "cloned": cloned,
            },
        )
        return {"sha": sha, "describe": describe, "dirty": dirty, "fetched": fetched}

    def _rev(self, dest: str, ref: str) -> Optional[str]:
        ok, out = self.git_ok(["rev-parse", "--verify", "--quiet", ref + "^{commit}"], dest)
        return out.strip() if ok and out.strip() else None

    def resolve_version(self, dest: str, version: str) -> Tuple[str, str, bool]:
        """The full SHA `version` names: (sha, the ref it came from, fetched?).

        A branch name is resolved on the remote after a fetch, never from a stale local branch.
        """
        if version.startswith("-"):
            raise StepFailed("repo.version %r is not a ref" % version)
        is_hex = re.match(r"^[0-9a-fA-F]{7,40}$", version) is not None
        ok_remote, _ = self.git_ok(
            ["show-ref", "--verify", "--quiet", "refs/remotes/origin/" + version], dest
        )
        ok_local, _ = self.git_ok(
            ["show-ref", "--verify", "--quiet", "refs/heads/" + version], dest
        )
        branch = not is_hex and (ok_remote or ok_local)
        if not branch:
            sha = self._rev(dest, version)
            if sha:
                return sha, version, False
        # origin only: a tag of another remote the user added must not stand in for the
        # declared repo's. Not -q: git's "would clobber existing tag" line is the reason.
        self.git(["fetch", "--tags", "--", "origin"], dest)
        candidates = ["origin/" + version, version] if not is_hex else [version]
        for ref in candidates:
            sha = self._rev(dest, ref)
            if sha:
                return sha, ref, True
        # A commit no branch or tag reaches: ask the remote for it by name.
        if self.git_ok(["fetch", "-q", "--", "origin", version], dest)[0]:
            sha = self._rev(dest, "FETCH_HEAD")
            if sha and (not is_hex or sha.lower().startswith(version.lower())):
                return sha, "FETCH_HEAD", True
        raise StepFailed(
            "unknown ref %r in %s (not found after git fetch)"
            % (version, self.repo["url"] if self.repo else "")
        )

    # step 2: setup
    def do_setup(self) -> Dict[str, Any]:
        repo = self.repo
        assert repo is not None and self.repo_dest is not None and self.repo_sha is not None
        setup = str(repo["setup"])
        key = hashlib.sha256(
            json.dumps([self.repo_dest, self.repo_sha, setup]).encode("utf-8")
        ).hexdigest()
        cache_dir = os.path.join(self.workdir, "setup-cache")
        marker = os.path.join(cache_dir, key + ".ok")
        log = self.path("setup.log")
        if os.path.exists(marker) and not self.force_setup:
            with open(log, "w", encoding="utf-8") as fh:
                fh.write(
                    "cached: setup already succeeded for %s at %s (%s)\n"
                    % (self.repo_dest, self.repo_sha, display_path(marker))
                )
            return {"cached": True, "key": key}
        timeout = min(float(repo.get("setup_timeout", 3600.0)), self.remaining())
        env = self.base_env()
        start = _now()
        with open(log, "ab") as fh:
            try:
                proc = subprocess.Popen(
                    ["bash", "-c", setup],
                    cwd=self.repo_dest,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise StepFailed("cannot run setup: %s" % exc) from exc
            rc, timed_out, _why = self.wait_proc(proc, timeout)
        if timed_out:
            raise StepFailed(
                _with_tail("setup timed out after %gs" % timeout, tail_lines(log), "setup.log")
            )
        if rc != 0:
            raise StepFailed(_with_tail("setup failed (rc %s)" % rc, tail_lines(log), "setup.log"))
        os.makedirs(cache_dir, exist_ok=True)
        write_json(
            marker,
            {"dest": self.repo_dest, "sha": self.repo_sha, "setup": setup, "at": _now()},
        )
        return {"cached": False, "key": key, "seconds": round(_now() - start, 3)}

    # step 3: preflight
    def leftover_reason(self, rec: Dict[str, Any], pids: List[int], why: str = "") -> str:
        """Why a live server record blocks this cell, with the command that stops it."""
        run_id = str(rec.get("run_id"))
        return (
            "an orch server from run %s cell %s is still running (pid %s)%s; stop it with: %s"
            % (
                run_id,
                rec.get("cell_id"),
                pids[0],
                why,
                stop_all_command(run_id, self.workdir),
            )
        )

    def do_preflight(self) -> Dict[str, Any]:
        detail: Dict[str, Any] = {}
        self.clear_servers(detail)
        port = self.server.get("port") if self.server else None
        if port:
            why = port_in_use(int(port))
            if why:
                owner = port_owner(int(port))
                raise StepFailed(
                    "port %s is already in use: %s%s"
                    % (port, why, "; held by " + owner if owner else "")
                )
            detail["port"] = int(port)
        return detail

    def clear_servers(self, detail: Dict[str, Any]) -> None:
        """No live server may be left on this host before ours starts.

        A server of another run (or whose runner cannot be told) fails the cell. One of this
        run whose runner is still alive (stopping it after the controller went away) is waited
        for; one whose runner is dead is an orphan of this run and is stopped here.
        """
        deadline = _now() + self.wait_limit
        announced = set()
        stopped: List[Dict[str, Any]] = []
        while True:
            live = live_server_records(self.servers_dir)
            if not live:
                break
            states = [(rec, pids, record_runner_state(rec)) for rec, pids in live]
            for rec, pids, state in states:
                if str(rec.get("run_id")) != self.run_id or state == "unknown":
                    raise StepFailed(self.leftover_reason(rec, pids))
            waiting = [(rec, pids) for rec, pids, state in states if state == "alive"]
            for rec, pids, state in states:
                if state != "dead":
                    continue
                signal_server(rec, pids, signal.SIGTERM)
                killed, leftover = reap_server(self.servers_dir, rec, pids)
                if leftover:
                    raise StepFailed(
                        self.leftover_reason(
                            rec, leftover, ", left by a runner that died, and survives SIGKILL"
                        )
                    )
                stopped.append(
                    {
                        "run_id": self.run_id,
                        "cell_id": rec.get("cell_id"),
                        "pid": rec.get("pid"),
                        "killed": bool(killed),
                    }
                )
            if not waiting:
                continue  # look again: nothing may have appeared meanwhile
            for rec, _pids in waiting:
                if rec.get("pid") not in announced:
                    announced.add(rec.get("pid"))
                    self.emit(
                        {
                            "event": "wait",
                            "for": "server",
                            "run_id": self.run_id,
                            "cell_id": rec.get("cell_id"),
                            "pid": rec.get("pid"),
                            "runner_pid": rec.get("runner_pid"),
                            "limit": round(self.wait_limit, 1),
                        }
                    )
            if _now() >= deadline:
                rec, pids = waiting[0]
                raise StepFailed(
                    self.leftover_reason(
                        rec,
                        pids,
                        " and its runner (pid %s) has not stopped it after %gs"
                        % (rec.get("runner_pid"), round(self.wait_limit, 1)),
                    )
                )
            self.stop_event.wait(0.2)
            self.check()
        if stopped:
            detail["stopped_orphans"] = stopped

    # steps 4 and 11: snapshots
    def do_snapshot(self, name: str, server_log: Optional[str]) -> Dict[str, Any]:
        python = _python_of(list(self.server["argv"])) if self.server else None
        timeout = PROBE_TIMEOUT if not self.cleaning else min(PROBE_TIMEOUT, 60.0)
        data = take_snapshot(
            self.repo_dest,
            python,
            server_log,
            timeout,
            cancelled=None if self.cleaning else self.stop_event.is_set,
            options=self.cell.get("snapshot") or {},
        )
        write_json(self.path(name), data)
        if self.stop_event.is_set() and not self.cleaning:
            raise Interrupted(self.stop_reason)
        return {"error": str(data["error"])[:200]} if "error" in data else {}

    # step 5: server_start
    def server_cwd(self) -> str:
        assert self.server is not None
        default = self.repo_dest or self.dir
        cwd = self.server.get("cwd")
        return resolve_path(str(cwd), default) if cwd else default

    def do_server_start(self) -> Dict[str, Any]:
        server = self.server
        assert server is not None
        argv = [str(a) for a in server["argv"]]
        cwd = self.server_cwd()
        if not os.path.isdir(cwd):
            raise StepFailed("server cwd %s does not exist" % cwd)
        log = self.path("server.log")
        # Kept open for the server's whole life; closed in do_stop/finish.
        self.server_log_fh = open(log, "ab")  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=self.base_env(),
                stdin=subprocess.DEVNULL,
                stdout=self.server_log_fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise StepFailed("cannot start server %r: %s" % (argv[0], exc)) from exc
        pid = self.proc.pid
        self.server_pgid = pid  # start_new_session: the server leads its own group and session
        info = proc_info(pid)
        self.server_start_time = info.start if info else None
        own = proc_info(os.getpid())
        os.makedirs(self.servers_dir, exist_ok=True)
        self.server_record = os.path.join(self.servers_dir, "%d.json" % pid)
        write_json(
            self.server_record,
            {
                "pid": pid,
                "pgid": self.server_pgid,
                "port": server.get("port"),
                "run_id": self.run_id,
                "cell_id": self.cell_id,
                "start_time": self.server_start_time,
                "runner_pid": os.getpid(),
                "runner_start_time": own.start if own else None,
                "stop_grace": float(server.get("stop_grace", 15.0)),
                "started": _now(),
            },
        )
        write_json(
            self.path("server.json"),
            {
                "argv": argv,
                "cwd": cwd,
                "pid": pid,
                "pgid": self.server_pgid,
                "port": server.get("port"),
                "env_declared": self.redacted_env(),
                "markers": {"ORCH_RUN_ID": self.run_id, "ORCH_CELL_ID": self.cell_id},
                "started": _now(),
            },
        )
        return {"pid": pid}

    def redacted_env(self) -> Dict[str, str]:
        """cell.env with the values of secret names replaced."""
        return {k: (REDACTED if k in self.secret_names else v) for k, v in self.env.items()}

    def server_exit_reason(self, rc: int, when: str) -> str:
        """'server exited <when> (rc N)' with the log tail."""
        return _with_tail(
            "server exited %s (rc %s)" % (when, rc),
            tail_lines(self.path("server.log")),
            "server.log",
        )

    # step 6: ready
    def do_ready(self) -> Dict[str, Any]:
        server = self.server
        assert server is not None and self.proc is not None
        ready = server.get("ready") or {}
        url = ready.get("url")
        want = int(ready.get("status", 200))
        timeout = float(ready.get("timeout", 600.0))
        interval = max(0.05, float(ready.get("interval", 0.5)))
        scanner = None
        if ready.get("log"):
            try:
                scanner = LogScanner(self.path("server.log"), str(ready["log"]))
            except re.error as exc:
                raise StepFailed("server.ready.log is not a valid regex: %s" % exc) from exc
        start = _now()
        deadline = min(start + timeout, self.deadline)
        url_ok = not url
        log_ok = scanner is None
        last = "no HTTP request made yet"
        while True:
            self.check()
            rc = self.proc.poll()
            if rc is not None:
                raise StepFailed(self.server_exit_reason(rc, "during startup"))
            if not url_ok:
                per_request = max(0.5, min(5.0, deadline - _now()))
                status, _body, err = http_get(str(url), per_request)
                if status == want:
                    url_ok = True
                elif status is not None:
                    last = "last HTTP status %s from %s" % (status, url)
                else:
                    last = "last error from %s: %s" % (url, err)
            if not log_ok and scanner is not None:
                log_ok = scanner.found()
            if url_ok and log_ok:
                break
            if _now() >= deadline:
                parts = []
                if not url_ok:
                    parts.append(last)
                if not log_ok:
                    parts.append("log pattern %r not seen" % ready.get("log"))
                raise StepFailed(
                    _with_tail(
                        "server not ready after %gs (%s)"
                        % (round(_now() - start, 1), "; ".join(parts)),
                        tail_lines(self.path("server.log")),
                        "server.log",
                    )
                )
            self.stop_event.wait(interval)
        self.ready_info = {"seconds": round(_now() - start, 3), "url": url, "log": ready.get("log")}
        return {"seconds": self.ready_info["seconds"]}

    # captures
    def capture(self, moment: str) -> Dict[str, str]:
        """Fetch each capture's URLs in order; the first 200 JSON answer is saved."""
        server = self.server
        if not server:
            return {}
        result: Dict[str, str] = {}
        for cap in server.get("captures") or ():
            name = str(cap["name"])
            tried = []
            saved = False
            for url in cap.get("urls") or ():
                status, body, err = http_get(str(url), 10.0)
                if status == 200:
                    try:
                        json.loads(body.decode("utf-8"))
                    except ValueError:
                        tried.append("%s: 200 but not JSON" % url)
                        continue
                    os.makedirs(self.path("captures"), exist_ok=True)
                    with open(self.path("captures", "%s.%s.json" % (name, moment)), "wb") as fh:
                        fh.write(body)
                    saved = True
                    result[name] = str(url)
                    break
                tried.append("%s: %s" % (url, "HTTP %s" % status if status is not None else err))
            entry: Dict[str, Any] = {"name": name, "moment": moment, "ok": saved}
            if saved:
                entry["url"] = result[name]
            else:
                entry["tried"] = tried
                result[name] = "missing: " + "; ".join(tried)
            self.captures.append(entry)
        return result

    # step 8: verify_env
    def do_verify_env(self) -> Dict[str, Any]:
        server = self.server
        assert server is not None and self.proc is not None
        mode = str(server.get("verify_env", "strict"))
        rc = self.proc.poll()
        if rc is not None:
            raise StepFailed(self.server_exit_reason(rc, "after it became ready"))
        declared = sorted(self.env)
        table = proc_table()
        members = tree_members(table, self.proc.pid, self.server_pgid, self.server_pgid)
        processes: List[Dict[str, Any]] = []
        mismatches: List[Dict[str, Any]] = []
        rows: List[Tuple[int, str, List[str], List[str]]] = []
        for pid in members:
            try:
                environ = proc_environ(pid)
            except OSError as exc:
                if not proc_alive(pid):
                    continue
                processes.append(
                    {
                        "pid": pid,
                        "ppid": table[pid].ppid,
                        "cmdline": proc_cmdline(pid),
                        "error": "cannot read environ: %s" % exc,
                        "vars": {},
                    }
                )
                continue
            cmdline = proc_cmdline(pid)
            variables: Dict[str, Any] = {}
            missing: List[str] = []
            wrong: List[str] = []
            for name in declared:
                expected = self.env[name]
                observed = environ.get(name)
                ok = observed == expected
                secret = name in self.secret_names
                shown_exp = REDACTED if secret else expected
                shown_obs = REDACTED if (secret and observed is not None) else observed
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
                        wrong.append("%s=%r (expected %r)" % (name, observed, expected))
            processes.append(
                {"pid": pid, "ppid": table[pid].ppid, "cmdline": cmdline, "vars": variables}
            )
            if missing or wrong:
                rows.append((pid, cmdline, missing, wrong))
        ok = not mismatches
        write_json(
            self.path("env_check.json"),
            {
                "mode": mode,
                "ok": ok,
                "declared": declared,
                "processes": processes,
                "mismatches": mismatches,
            },
        )
        detail = {"ok": ok, "processes": len(processes), "mismatches": len(mismatches)}
        if not ok and mode == "strict":
            raise StepFailed(
                "environment mismatch in %d of %d server processes (env_check.json):\n%s"
                % (len(rows), len(processes), env_table(rows))
            )
        return detail

    # step 9: bench
    def do_bench(self) -> Dict[str, Any]:
        bench = self.bench
        argv = [str(a) for a in bench["argv"]]
        timeout = float(bench.get("timeout", 3600.0))
        runs = [("warmup", i) for i in range(1, int(bench.get("warmup", 0)) + 1)]
        runs += [("measure", i) for i in range(1, int(bench.get("repeats", 1)) + 1)]
        seconds_all = []
        for kind, n in runs:
            self.check()
            name = "warmup-%d" % n if kind == "warmup" else str(n)
            rdir = self.path("bench", name)
            os.makedirs(rdir, exist_ok=True)
            env = self.base_env({"ORCH_REPEAT_KIND": kind, "ORCH_REPEAT": str(n)})
            rc, timed_out, seconds, server_gone = self.run_bench_once(argv, rdir, env, timeout)
            result_file = bench.get("result_file")
            write_json(
                os.path.join(rdir, "exit.json"),
                {
                    "rc": rc,
                    "seconds": round(seconds, 3),
                    "argv": argv,
                    "timed_out": timed_out,
                    "kind": kind,
                    "n": n,
                    "result_file_present": (
                        os.path.exists(os.path.join(rdir, str(result_file)))
                        if result_file
                        else None
                    ),
                },
            )
            self.emit(
                {
                    "event": "repeat",
                    "kind": kind,
                    "n": n,
                    "rc": rc,
                    "seconds": round(seconds, 3),
                    "timed_out": timed_out,
                }
            )
            label = "warmup %d" % n if kind == "warmup" else "repeat %d" % n
            if server_gone is not None:
                raise StepFailed(self.server_exit_reason(server_gone, "during bench %s" % label))
            if timed_out or rc != 0:
                why = "timed out after %gs" % timeout if timed_out else "rc %s" % rc
                raise StepFailed(
                    _with_tail(
                        "bench %s failed (%s)" % (label, why),
                        tail_lines(os.path.join(rdir, "stderr")),
                        "bench/%s/stderr" % name,
                    )
                )
            if kind == "measure":
                seconds_all.append(round(seconds, 3))
            self.capture("after-warmup-%d" % n if kind == "warmup" else "after-%d" % n)
            if self.proc is not None and self.proc.poll() is not None:
                raise StepFailed(self.server_exit_reason(self.proc.returncode, "during bench"))
        return {"seconds": seconds_all}

    def run_bench_once(
        self, argv: List[str], rdir: str, env: Dict[str, str], timeout: float
    ) -> Tuple[Optional[int], bool, float, Optional[int]]:
        """One bench run: (rc, timed_out, seconds, server rc when the server died meanwhile)."""
        start = _now()
        gone: List[int] = []

        def server_died() -> Optional[str]:
            if self.proc is not None:
                rc = self.proc.poll()
                if rc is not None:
                    gone.append(rc)
                    return "server died"
            return None

        out = open(os.path.join(rdir, "stdout"), "wb")  # noqa: SIM115
        err = open(os.path.join(rdir, "stderr"), "wb")  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                argv,
                cwd=rdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        except OSError as exc:
            err.write(("cannot start bench %r: %s\n" % (argv[0], exc)).encode())
            return 127, False, _now() - start, None
        finally:
            # The child holds its own copies of the descriptors.
            out.close()
            err.close()
        try:
            rc, timed_out, _why = self.wait_proc(proc, timeout, server_died)
        except Interrupted:
            write_json(
                os.path.join(rdir, "exit.json"),
                {
                    "rc": proc.returncode,
                    "seconds": round(_now() - start, 3),
                    "argv": argv,
                    "timed_out": False,
                    "interrupted": True,
                },
            )
            raise
        return rc, timed_out, _now() - start, (gone[0] if gone else None)

    # step 10: stop
    def server_members(self) -> Dict[int, int]:
        """Live processes of the server (tree, group, session): pid -> start time."""
        if self.proc is None:
            return {}
        table = proc_table()
        pids = tree_members(table, self.proc.pid, self.server_pgid, self.server_pgid)
        return {p: table[p].start for p in pids}

    def _wait_gone(self, watched: Dict[int, int], timeout: float) -> List[int]:
        """Wait until every watched process is gone; the ones still alive at the end."""
        deadline = _now() + timeout
        while True:
            if self.proc is not None:
                self.proc.poll()  # reap the leader
            for pid, start in self.server_members().items():
                watched.setdefault(pid, start)
            alive = [p for p, s in sorted(watched.items()) if proc_alive(p, s)]
            if not alive or _now() >= deadline:
                return alive
            time.sleep(POLL)

    def do_stop(self) -> Dict[str, Any]:
        server = self.server
        assert server is not None and self.proc is not None
        grace = float(server.get("stop_grace", 15.0))
        start = _now()
        rc_before = self.proc.poll()
        watched = self.server_members()
        kill_group(self.server_pgid, signal.SIGTERM)
        for pid in watched:
            kill_pid(pid, signal.SIGTERM)  # descendants that left the group get it too
        alive = self._wait_gone(watched, grace)
        killed: List[int] = []
        if alive:
            killed = list(alive)
            kill_group(self.server_pgid, signal.SIGKILL)
            for pid in alive:
                kill_pid(pid, signal.SIGKILL)
            alive = self._wait_gone(watched, 5.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(1.0)
        if self.server_log_fh is not None:
            self.server_log_fh.close()
            self.server_log_fh = None
        port = server.get("port")
        port_busy: Optional[str] = None
        if port:
            port_deadline = _now() + 5.0
            while True:
                port_busy = port_in_use(int(port))
                if not port_busy or _now() >= port_deadline:
                    break
                time.sleep(0.2)
        self.stop_info = {
            "rc_before_stop": rc_before,
            "rc": self.proc.returncode,
            "processes": sorted(watched),
            "graceful": not killed,
            "killed": killed,
            "leftover": alive,
            "port_free": None if not port else not port_busy,
            "seconds": round(_now() - start, 3),
        }
        if alive:
            raise StepFailed(
                "server processes still alive after SIGKILL: %s"
                % ", ".join("%d (%s)" % (p, proc_cmdline(p)[:120]) for p in alive)
            )
        if self.server_record:
            with contextlib.suppress(OSError):
                os.unlink(self.server_record)
        if port_busy:
            owner = port_owner(int(str(port)))
            raise StepFailed(
                "port %s still in use after the server stopped: %s%s"
                % (port, port_busy, "; held by " + owner if owner else "")
            )
        return {"graceful": not killed, "seconds": self.stop_info["seconds"]}

    # -- the whole cell ----------------------------------------------------------------------

    def lock_holder(self) -> str:
        """The pid the cell lock's holder wrote into it ('unknown' before it has)."""
        try:
            with open(self.lock_path, encoding="utf-8") as fh:
                pid = fh.read().strip()
        except OSError:
            pid = ""
        return pid if pid.isdigit() else "unknown"

    def acquire_cell_lock(self) -> None:
        """Take <run>/.<cell>.lock (flock) for the runner's life before touching the cell dir.

        Another runner of the same cell (one still stopping its server after its controller
        went away) is waited for, up to stop_grace + the wait margin.
        """
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = _now() + self.wait_limit
        announced = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        raise
                holder = self.lock_holder()
                if not announced:
                    announced = True
                    self.emit(
                        {
                            "event": "wait",
                            "for": "cell lock",
                            "pid": int(holder) if holder.isdigit() else None,
                            "limit": round(self.wait_limit, 1),
                        },
                        to_file=False,
                    )
                if self.stop_event.is_set():
                    raise Interrupted(self.stop_reason)
                if _now() >= deadline:
                    raise StepFailed(
                        "another runner of this cell is still running (pid %s); waited %gs for it"
                        % (holder, round(self.wait_limit, 1))
                    )
                self.stop_event.wait(0.2)
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, ("%d\n" % os.getpid()).encode())
        self.lock_fd = fd

    def finished_result(self) -> Optional[Dict[str, Any]]:
        """cell.json of a passed or failed copy of this cell already finished, else None.

        The runner that left it finished after the controller's `collect`; a copy renamed but
        not yet archived is archived now.
        """
        info: Any = None
        try:
            if os.path.isfile(os.path.join(self.final, "cell.json")):
                info = read_json(os.path.join(self.final, "cell.json"))
                if not isinstance(info, dict) or info.get("status") not in ("passed", "failed"):
                    return None
                if archived_cell_json(self.archive, self.cell_id) != info:
                    make_archive(self.final, self.archive)
            elif os.path.isfile(self.archive):
                info = archived_cell_json(self.archive, self.cell_id)
        except (OSError, ValueError):
            return None
        if not isinstance(info, dict) or info.get("status") not in ("passed", "failed"):
            return None
        return info

    def done_without_dir(self, status: str, reason: str) -> int:
        """`done` for a cell this runner could not start (no cell directory, no archive)."""
        done = {"event": "done", "status": status, "step": None, "reason": reason, "archive": None}
        self.emit(done, to_file=False)
        with contextlib.suppress(OSError, ValueError):
            # Older controllers show stderr when a runner ends without an archive.
            sys.stderr.write(self.redactor.text(reason) + "\n")
            sys.stderr.flush()
        self.finished.set()
        return {"failed": 1}.get(status, 3)

    def prepare_dir(self) -> None:
        """A fresh .<cell>.partial directory (an old partial or finished copy is replaced)."""
        os.makedirs(self.run_dir, exist_ok=True)
        if os.path.isdir(self.partial):
            shutil.rmtree(self.partial)
        os.makedirs(self.partial)
        # Appended to as events happen, so even a killed runner leaves its events behind.
        self.events_fh = open(self.path("events.jsonl"), "a", encoding="utf-8")  # noqa: SIM115

    def execute(self) -> int:
        """Run the cell to the end; returns the process exit status."""
        os.makedirs(self.run_dir, exist_ok=True)
        self.start_watchers()
        try:
            self.acquire_cell_lock()
        except StepFailed as exc:
            return self.done_without_dir("failed", exc.reason)
        except Interrupted as exc:
            return self.done_without_dir("interrupted", str(exc))
        previous = self.finished_result()
        if previous is not None:
            # Finished by an earlier runner after the controller's collect: not run twice.
            status = str(previous["status"])
            self.emit(
                {
                    "event": "done",
                    "status": status,
                    "step": previous.get("failed_step"),
                    "reason": previous.get("reason") or "",
                    "archive": display_path(self.archive),
                    "reused": True,
                },
                to_file=False,
            )
            self.finished.set()
            return {"passed": 0, "failed": 1}[status]
        self.prepare_dir()
        server = self.server
        repo = self.repo
        try:
            self.step("repo", self.do_repo, bool(repo))
            self.step("setup", self.do_setup, bool(repo and repo.get("setup")))
            self.step("preflight", self.do_preflight, True)
            self.step("snapshot_pre", lambda: self.do_snapshot("snapshot.pre.json", None), True)
            self.step("server_start", self.do_server_start, bool(server))
            self.step("ready", self.do_ready, bool(server))
            self.step(
                "capture_ready",
                lambda: self.capture("ready"),
                bool(server and server.get("captures")),
            )
            self.step(
                "verify_env",
                self.do_verify_env,
                bool(server and server.get("verify_env", "strict") != "off"),
            )
            self.step("bench", self.do_bench, True)
        except StepFailed as exc:
            self.status, self.reason, self.failed_step = "failed", exc.reason, self.current_step
        except Interrupted as exc:
            self.status, self.reason, self.failed_step = "interrupted", str(exc), self.current_step
        except BaseException as exc:
            self.status = "failed"
            self.reason = "runner error: %s: %s\n%s" % (
                type(exc).__name__,
                exc,
                traceback.format_exc(),
            )
            self.failed_step = self.current_step or None
        self.cleaning = True
        self.cleanup_step("stop", self.do_stop, self.proc is not None)
        self.cleanup_step(
            "snapshot_post",
            lambda: self.do_snapshot(
                "snapshot.post.json",
                self.path("server.log") if os.path.exists(self.path("server.log")) else None,
            ),
            True,
        )
        return self.finish()

    def cleanup_step(
        self, name: str, fn: Callable[[], Optional[Dict[str, Any]]], applies: bool
    ) -> None:
        """A step that runs whatever happened before; its failure fails only a passing cell."""
        try:
            self.step(name, fn, applies)
        except StepFailed as exc:
            if self.status == "passed":
                self.status, self.reason, self.failed_step = "failed", exc.reason, name
        except Exception:
            pass

    def finish(self) -> int:
        """Write cell.json, redact, rename, archive, and emit `done`."""
        end = _now()
        if self.server_log_fh is not None:
            self.server_log_fh.close()
            self.server_log_fh = None
        cell_out = dict(self.cell)
        cell_out["env"] = self.redacted_env()
        write_json(
            self.path("cell.json"),
            {
                "schema_version": SCHEMA_VERSION,
                "run_id": self.run_id,
                "cell": cell_out,
                "status": self.status,
                "reason": self.reason,
                "failed_step": self.failed_step,
                "steps": self.steps,
                "started": round(self.t0, 3),
                "finished": round(end, 3),
                "seconds": round(end - self.t0, 3),
                "ready": self.ready_info,
                "stop": self.stop_info,
                "captures": self.captures,
                "runner": {
                    "python": sys.executable,
                    "python_version": sys.version.split()[0],
                    "hostname": socket.gethostname(),
                    "pid": os.getpid(),
                    "version": runner_version(),
                    "path": RUNNER_PATH,
                },
            },
        )
        done: Dict[str, Any] = {
            "event": "done",
            "status": self.status,
            "step": self.failed_step,
            "reason": self.reason,
            "archive": display_path(self.archive),
        }
        self.emit(dict(done), to_stdout=False)
        with self.lock:
            if self.events_fh is not None:
                self.events_fh.close()
                self.events_fh = None
        try:
            self.redactor.tree(self.partial)
            if os.path.isdir(self.final):
                shutil.rmtree(self.final)
            os.replace(self.partial, self.final)
            self.dir = self.final
            make_archive(self.final, self.archive)
        except Exception as exc:
            done["archive"] = None
            done["archive_error"] = "%s: %s" % (type(exc).__name__, exc)
        self.emit(done, to_file=False)
        self.finished.set()
        return {"passed": 0, "failed": 1}.get(self.status, 3)


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


def make_archive(cell_dir: str, archive: str) -> None:
    """<cell>.tar.gz holding one top-level directory named after the cell (tmp + rename)."""
    tmp = os.path.join(
        os.path.dirname(archive), "." + os.path.basename(archive) + ".%d.tmp" % os.getpid()
    )
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(cell_dir, arcname=os.path.basename(cell_dir))
    os.replace(tmp, archive)


def archived_cell_json(archive: str, cell_id: str) -> Any:
    """cell.json inside a cell archive (None when absent or unreadable)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            member = tar.extractfile(cell_id + "/cell.json")
            return json.loads(member.read().decode("utf-8")) if member else None
    except (OSError, ValueError, KeyError, tarfile.TarError):
        return None


def live_server_records(servers_dir: str) -> List[Tuple[Dict[str, Any], List[int]]]:
    """Server records whose processes still run; stale records are removed."""
    live: List[Tuple[Dict[str, Any], List[int]]] = []
    try:
        names = sorted(os.listdir(servers_dir))
    except OSError:
        return live
    table: Optional[Dict[int, ProcInfo]] = None
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(servers_dir, name)
        try:
            rec = read_json(path)
            pid = int(rec["pid"])
            pgid = int(rec.get("pgid") or pid)
        except (OSError, ValueError, KeyError, TypeError):
            _unlink(path)
            continue
        if table is None:
            table = proc_table()
        run_id, cell_id = str(rec.get("run_id")), str(rec.get("cell_id"))
        pids = []
        for info in table.values():
            if info.state in ("Z", "X"):
                continue
            same_leader = info.pid == pid and (
                info.start == rec.get("start_time") or has_marker(pid, run_id, cell_id)
            )
            in_group = info.pgid == pgid and has_marker(info.pid, run_id, cell_id)
            if same_leader or in_group:
                pids.append(info.pid)
        if pids:
            live.append((rec, sorted(pids)))
        else:
            _unlink(path)
    return live


def record_runner_state(rec: Dict[str, Any]) -> str:
    """Whether the runner that wrote a server record still runs: alive, dead or unknown."""
    pid = rec.get("runner_pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return "unknown"  # a record from a runner that did not say who it was
    if pid == os.getpid():
        return "dead"  # the pid was reused by this very runner
    start = rec.get("runner_start_time")
    if isinstance(start, int):
        return "alive" if proc_alive(pid, start) else "dead"
    return "alive" if proc_alive(pid) and "runner.py" in proc_cmdline(pid) else "dead"


def signal_server(rec: Dict[str, Any], pids: List[int], sig: int) -> None:
    """Signal a recorded server: its process group and each of its live processes."""
    kill_group(int(rec.get("pgid") or rec["pid"]), sig)
    for pid in pids:
        kill_pid(pid, sig)


def reap_server(
    servers_dir: str, rec: Dict[str, Any], pids: List[int]
) -> Tuple[List[int], List[int]]:
    """After SIGTERM: wait the record's stop_grace, SIGKILL what is left, wait up to 5 s more.

    Returns (the processes that needed SIGKILL, those still alive); the record is removed when
    none is left.
    """
    grace = float(rec.get("stop_grace", 15.0))
    deadline = _now() + grace
    while _now() < deadline and any(proc_alive(p) for p in pids):
        time.sleep(POLL)
    killed = [p for p in pids if proc_alive(p)]
    if killed:
        signal_server(rec, killed, signal.SIGKILL)
        deadline = _now() + 5.0
        while _now() < deadline and any(proc_alive(p) for p in killed):
            time.sleep(POLL)
    leftover = [p for p in pids if proc_alive(p)]
    if not leftover:
        _unlink(os.path.join(servers_dir, "%s.json" % rec["pid"]))
    return killed, leftover


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so later writes (and interpreter exit) cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# commands


def read_first_line() -> bytes:
    """The first line of stdin, read unbuffered so the stdin watcher sees everything after it."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


def _bad_input(out: IO[bytes], reason: str) -> int:
    event = {"event": "done", "status": "failed", "step": None, "reason": reason, "archive": None}
    try:
        out.write((json.dumps(event) + "\n").encode())
        out.flush()
    except (OSError, ValueError):
        pass
    return 2


def cmd_run() -> int:
    """`runner.py run`: one cell, described by the first stdin line."""
    out = sys.stdout.buffer
    line = read_first_line()
    try:
        payload = json.loads(line.decode("utf-8"))
    except ValueError as exc:
        return _bad_input(out, "bad input: the first stdin line is not JSON (%s)" % exc)
    if not isinstance(payload, dict) or not isinstance(payload.get("cell"), dict):
        return _bad_input(out, "bad input: expected {schema_version, run_id, workdir, cell}")
    if int(payload.get("schema_version", SCHEMA_VERSION)) > SCHEMA_VERSION:
        return _bad_input(
            out,
            "bad input: protocol schema_version %s is newer than this runner's %d"
            % (payload.get("schema_version"), SCHEMA_VERSION),
        )
    run_id = str(payload.get("run_id", ""))
    cell_id = str(payload["cell"].get("id", ""))
    if not _ID_RE.match(run_id) or not _ID_RE.match(cell_id):
        return _bad_input(
            out, "bad input: run_id %r / cell id %r are not plain names" % (run_id, cell_id)
        )
    try:
        runner = CellRunner(payload, out)
    except (KeyError, TypeError, ValueError) as exc:
        return _bad_input(out, "bad input: %s: %s" % (type(exc).__name__, exc))
    try:
        return runner.execute()
    except Exception as exc:
        # Only reachable when the cell directory itself cannot be made or finished.
        reason = "runner crashed: %s: %s\n%s" % (type(exc).__name__, exc, traceback.format_exc())
        return _bad_input(out, runner.redactor.text(reason))


def cmd_collect(run_id: str, workdir: str) -> int:
    """`runner.py collect RUN`: one JSON line per finished cell of the run."""
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
    for cell_id in sorted(cells):
        cell_dir = os.path.join(run_dir, cell_id)
        archive = cell_dir + ".tar.gz"
        info: Any = None
        try:
            if os.path.isdir(cell_dir):
                info = read_json(os.path.join(cell_dir, "cell.json"))
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
    return 0


def cmd_probe(repo: Optional[str], python: Optional[str], server_log: Optional[str]) -> int:
    """`runner.py probe`: print one snapshot JSON."""
    data = take_snapshot(
        resolve_path(repo) if repo else None,
        python,
        resolve_path(server_log) if server_log else None,
    )
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()
    return 0


def cmd_stop_all(run_id: str, workdir: str) -> int:
    """`runner.py stop-all RUN`: stop every live server recorded for the run (or `all`)."""
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
    """`runner.py check-origin DEST URL`: {"ok", "origin" | "reason"}; exit 0 only when the
    clone at DEST (as the repo step resolves it) is a clone of URL, or DEST holds no clone."""
    path = resolve_path(dest)
    checks = RepoChecks()
    result = {"ok": True, "origin": None}  # type: Dict[str, Any]
    if os.path.isdir(path) and os.listdir(path):
        try:
            checks.check_existing_clone(path)
            result["origin"] = checks.check_origin(path, url)
        except StepFailed as exc:
            result = {"ok": False, "reason": exc.reason}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["ok"] else 1


def main(argv: Optional[List[str]] = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="runner.py", description="orch cell runner")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run one cell (JSON on stdin, events on stdout)")
    p_collect = sub.add_parser("collect", help="list finished cell archives of a run")
    p_collect.add_argument("run_id")
    p_collect.add_argument("--workdir", default=".orch")
    p_probe = sub.add_parser("probe", help="print one host snapshot")
    p_probe.add_argument("--repo")
    p_probe.add_argument("--python")
    p_probe.add_argument("--server-log")
    p_origin = sub.add_parser("check-origin", help="is the clone at DEST a clone of URL?")
    p_origin.add_argument("dest")
    p_origin.add_argument("url")
    p_stop = sub.add_parser("stop-all", help="stop every live server of a run")
    p_stop.add_argument("run_id")
    p_stop.add_argument("--workdir", default=".orch")
    args = parser.parse_args(argv)
    if args.command == "run":
        return cmd_run()
    if args.command == "collect":
        return cmd_collect(args.run_id, args.workdir)
    if args.command == "probe":
        return cmd_probe(args.repo, args.python, args.server_log)
    if args.command == "check-origin":
        return cmd_check_origin(args.dest, args.url)
    if args.command == "stop-all":
        return cmd_stop_all(args.run_id, args.workdir)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

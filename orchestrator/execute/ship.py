"""Shipping the runner to a host once, as one zipapp (`runner.pyz`), cached there by content hash.

The archive is built from `orchestrator/runner/` in memory, deterministically (fixed order,
timestamps and modes), so the same sources always give the same bytes and the same hash.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
import zipfile
from functools import cache
from pathlib import Path

import orchestrator.runner
from orchestrator.config.host import Host
from orchestrator.errors import ExecutionError
from orchestrator.execute.transport.connect import Connection
from orchestrator.runner.protocol import UNPACKED_SUFFIX

RUNNER_DIR = Path(orchestrator.runner.__file__).parent
ARCHIVE_NAME = "runner.pyz"
_SHEBANG = b"#!/usr/bin/env python3\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
# The zip's own entry points: `orchestrator` holds nothing but the runner package there.
_ZIP_MAIN = (
    '"""orch runner: python3 runner.pyz run | collect | probe | stop-all | check-origin |\n'
    'resolve."""\n'
    "import sys\n\n"
    "from orchestrator.runner.__main__ import main\n\n"
    "sys.exit(main())\n"
)
_ZIP_PACKAGE = '"""orch, as shipped to a host: only orchestrator.runner."""\n'


def _entries() -> list[tuple[str, bytes]]:
    """(name in the archive, content) for every file of runner.pyz, in archive order."""
    entries = [
        ("__main__.py", _ZIP_MAIN.encode()),
        ("orchestrator/__init__.py", _ZIP_PACKAGE.encode()),
    ]
    for path in sorted(RUNNER_DIR.rglob("*.py")):
        entries.append(
            (f"orchestrator/runner/{path.relative_to(RUNNER_DIR).as_posix()}", path.read_bytes())
        )
    return entries


@cache
def runner_archive() -> bytes:
    """runner.pyz's bytes: a shebang line, then a zip whose __main__ runs the runner."""
    buffer = io.BytesIO()
    buffer.write(_SHEBANG)
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in _entries():
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3  # unix, whatever machine builds it
            archive.writestr(info, content)
    return buffer.getvalue()


def runner_hash() -> str:
    """sha256 of runner.pyz: a changed runner lands in a new directory on the host."""
    return hashlib.sha256(runner_archive()).hexdigest()[:16]


def write_runner(directory: Path) -> Path:
    """runner.pyz written into `directory` (tmp + rename; left alone when already there)."""
    path = Path(directory) / ARCHIVE_NAME
    data = runner_archive()
    if path.is_file() and path.read_bytes() == data:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{ARCHIVE_NAME}.")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path


def runner_path(host: Host) -> str:
    """Where the runner lives on `host`, relative to its $HOME unless workdir is absolute."""
    return f"{host.workdir.rstrip('/')}/lib/{runner_hash()}/{ARCHIVE_NAME}"


# The cached runner is what runs next time: exit 0 only when the file there is this version.
_EXISTS = (
    "import hashlib,os,sys\n"
    "p=os.path.join(os.path.expanduser('~'),os.path.expanduser(sys.argv[1]))\n"
    "ok=os.path.isfile(p) and hashlib.sha256(open(p,'rb').read()).hexdigest()[:16]==sys.argv[2]\n"
    "sys.exit(0 if ok else 3)\n"
)
# stdin -> the path named, through a temporary file and a rename (home-relative like the runner).
_WRITE = (
    "import os,sys,tempfile\n"
    "p=os.path.join(os.path.expanduser('~'),os.path.expanduser(sys.argv[1]))\n"
    "os.makedirs(os.path.dirname(p),exist_ok=True)\n"
    "fd,t=tempfile.mkstemp(dir=os.path.dirname(p),prefix='.runner.')\n"
    "with os.fdopen(fd,'wb') as f: f.write(sys.stdin.buffer.read())\n"
    "os.chmod(t,0o755); os.replace(t,p)\n"
)

MANIFEST_NAME = ".orch-manifest"  # in the unpacked folder: every file's sha256, as unpacked
# Helpers of the host-side code below. _tree: every file under a folder with its sha256 (a link
# counts as a difference). _mine: a cache folder must be this user's; one writable by others is
# closed first (its content is checked after), one of another user is refused: with a shared
# absolute orch_workdir, another user could otherwise plant code this user's run executes.
_CACHE = (
    "import json,shutil,stat\n"
    "def _tree(r):\n"
    "    out={}\n"
    "    for b,ds,fs in os.walk(r):\n"
    "        for x in ds+fs:\n"
    "            q=os.path.join(b,x); k=os.path.relpath(q,r)\n"
    "            if os.path.islink(q): out[k]='link'\n"
    "            elif x in fs:\n"
    "                with open(q,'rb') as f: out[k]=hashlib.sha256(f.read()).hexdigest()\n"
    f"    out.pop({MANIFEST_NAME!r},None)\n"
    "    return out\n"
    "def _mine(d):\n"
    "    s=os.lstat(d)\n"
    "    if s.st_uid!=os.getuid() or not stat.S_ISDIR(s.st_mode):\n"
    "        sys.exit('orch: %s is not a folder of this user: its runner is not run '\n"
    "                 '(give this host an orch_workdir of its own)' % d)\n"
    "    if s.st_mode&0o022: os.chmod(d,stat.S_IMODE(s.st_mode)&~0o022)\n"
)
# runner.pyz unpacked beside itself (`<pyz>.d/`) and byte-compiled once, so each start loads
# cached bytecode instead of compiling the runner from the zip again (about 0.2 s of CPU a start);
# a folder that no longer matches its manifest (an edited or truncated module, a planted file)
# is unpacked again. `u` is what to run: the folder, or the archive where it cannot be made.
_UNPACK = (
    f"u=p+{UNPACKED_SUFFIX!r}\n"
    f"m=os.path.join(u,{MANIFEST_NAME!r})\n"
    "if os.path.isdir(u) and not os.path.islink(u):\n"
    "    try:\n"
    "        with open(m) as f: good=json.load(f)==_tree(u)\n"
    "    except Exception: good=False\n"
    "    if not good: shutil.rmtree(u,ignore_errors=True)\n"
    "if not os.path.isdir(u) or os.path.islink(u):\n"
    "    try:\n"
    "        import compileall,zipfile\n"
    "        t=tempfile.mkdtemp(dir=os.path.dirname(p),prefix='.runner.d.')\n"
    "        zipfile.ZipFile(p).extractall(t)\n"
    "        compileall.compile_dir(t,quiet=2)\n"
    "        g=_tree(t)\n"  # before .m.tmp exists: a manifest listing it never matched again
    "        with open(os.path.join(t,'.m.tmp'),'w') as f: json.dump(g,f)\n"
    f"        os.rename(os.path.join(t,'.m.tmp'),os.path.join(t,{MANIFEST_NAME!r}))\n"
    "        try: os.rename(t,u)\n"
    "        except OSError: shutil.rmtree(t,ignore_errors=True)\n"
    "    except Exception: pass\n"
    "    if not os.path.isdir(u) or os.path.islink(u): u=p\n"
)


def unpacked_runner(pyz: Path) -> Path:
    """What a host runs: runner.pyz unpacked and byte-compiled beside itself (as BOOTSTRAP does),
    or the archive where that fails."""
    namespace = {"p": str(pyz), "os": os, "tempfile": tempfile, "hashlib": hashlib, "sys": sys}
    exec(_CACHE + _UNPACK, namespace)  # the very code hosts run, not a copy of it
    return Path(str(namespace["u"]))


# Runs the runner in the same invocation that ships it: stdin starts with runner.pyz (N bytes,
# read exactly, so what follows stays on stdin for the runner), written to its cache path unless
# there already; then exec. One remote command per host and run, also where each costs a Slurm job.
# Python 3.8, standard library only, like the runner.
BOOTSTRAP = (
    "import hashlib,os,sys,tempfile\n"
    "p,n,h=sys.argv[1],int(sys.argv[2]),sys.argv[3]\n"
    "p=os.path.join(os.path.expanduser('~'),os.path.expanduser(p))\n"
    "parts=[]\n"
    "while n>0:\n"
    "    c=os.read(0,min(n,65536))\n"
    "    if not c: sys.exit('orch: stdin ended inside runner.pyz')\n"
    "    parts.append(c); n-=len(c)\n"
    "data=b''.join(parts)\n"
    "if hashlib.sha256(data).hexdigest()[:16]!=h: sys.exit('orch: runner.pyz arrived damaged')\n"
    + _CACHE
    + "d=os.path.dirname(p); os.makedirs(d,exist_ok=True)\n"
    "for x in (os.path.dirname(d),d): _mine(x)\n"
    "try:\n"
    "    with open(p,'rb') as f: same=f.read()==data\n"
    "except OSError: same=False\n"
    "if not same:\n"  # missing, or not these bytes: written again (what runs is what was sent)
    "    fd,t=tempfile.mkstemp(dir=d,prefix='.runner.')\n"
    "    with os.fdopen(fd,'wb') as f: f.write(data)\n"
    "    os.chmod(t,0o755); os.replace(t,p)\n"
    + _UNPACK
    + "os.execv(sys.executable,[sys.executable,u]+sys.argv[4:])\n"
)


def runner_invocation(host: Host, *args: str) -> tuple[list[str], bytes]:
    """argv and the stdin prefix that ship runner.pyz (when the host lacks it) and run it with
    `args` in one remote command; the caller's own stdin follows the prefix."""
    data = runner_archive()
    argv = [host.python, "-c", BOOTSTRAP, runner_path(host), str(len(data)), runner_hash(), *args]
    return argv, data


def ensure_runner(conn: Connection) -> str:
    """Put runner.pyz on the host unless this exact version is already there; its path."""
    host = conn.host
    path = runner_path(host)
    check = conn.run([host.python, "-c", _EXISTS, path, runner_hash()], timeout=60)
    if check.rc == 0:
        return path
    if check.rc != 3:
        raise ExecutionError(
            f"{host.name}: cannot run {host.python!r} (rc {check.rc}): "
            f"{check.stderr.strip()[-300:]}",
            hint="set python / ansible_python_interpreter for this host in the inventory",
        )
    # Sent through the command's stdin, not SFTP: hardened hosts often disable that subsystem.
    put = conn.run([host.python, "-c", _WRITE, path], stdin=runner_archive(), timeout=120)
    if put.rc != 0:
        raise ExecutionError(
            f"{host.name}: cannot write the runner to {path} (rc {put.rc}): "
            f"{put.stderr.strip()[-300:]}",
            hint="the host's workdir must be writable (inventory: orch_workdir)",
        )
    return path

"""A real PostgreSQL server for the tests, from Debian's packages: initdb into a fresh folder,
listening on a Unix socket only (no TCP port), trust authentication for the test's own user,
stopped at the end. As root it runs as the `postgres` user the package made (PostgreSQL refuses
to run as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

PORT = 5439  # names the socket file only: nothing listens on TCP


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (initdb, pg_ctl, createdb)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parent)
    return found[-1].parent if found else None


def require_postgres() -> Path:
    """The bin folder, or skip (fail in CI as root: scripts/test.sh installs it)."""
    bindir = postgres_bin()
    if bindir is not None:
        return bindir
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        pytest.fail("PostgreSQL is missing: scripts/test.sh installs it when run as root")
    pytest.skip("needs PostgreSQL (apt-get install postgresql; scripts/test.sh does as root)")


class PostgresServer:
    """One server in its own folder; `url` reaches its `orch` database over the socket."""

    def __init__(self) -> None:
        self.bindir = require_postgres()
        self.root = Path(tempfile.mkdtemp(prefix="orch-pg-"))
        self.data, self.sock = self.root / "data", self.root / "sock"
        self.sock.mkdir()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            for path in (self.root, self.sock):
                os.chown(path, user.pw_uid, user.pw_gid)
            self.root.chmod(0o755)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.url = f"postgresql://postgres@/orch?host={self.sock}&port={PORT}"

    def _run(self, *argv: str) -> None:
        done = subprocess.run([*self.as_user, *argv], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}")

    def start(self) -> PostgresServer:
        """initdb, start, create the database."""
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-sync")  # fmt: skip
        options = f"-k {self.sock} -c listen_addresses= -p {PORT} -c fsync=off"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.root / "server.log"), "-w", "start")  # fmt: skip
        self._run(str(self.bindir / "createdb"), "-h", str(self.sock), "-p", str(PORT),
                  "-U", "postgres", "orch")  # fmt: skip
        return self

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        subprocess.run([*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data),
                        "-m", "immediate", "stop"], capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)

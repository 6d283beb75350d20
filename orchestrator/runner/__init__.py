"""orch's host side: runs one cell on a host and leaves a complete cell directory behind.

Shipped to each host as one zipapp, `runner.pyz` (built by `orchestrator.execute.ship`), and run
under the host's own Python (3.8 or newer, standard library only, Linux): nothing here imports
outside `orchestrator.runner`. The controller imports the same modules where it shares a rule
(`protocol`, `redaction`, the probe's parsers). See docs/ARCHITECTURE.md, "The runner protocol"
and "The cell directory".

Commands (cwd is $HOME; a relative --workdir is relative to $HOME, default `.orch`):

    runner.pyz run                                one JSON line on stdin, JSON events on stdout
    runner.pyz collect RUN_ID [--workdir W]       one JSON line per finished cell archive
    runner.pyz probe [--repo DIR] [--python PY] [--server-log FILE]   one snapshot JSON
    runner.pyz stop-all RUN_ID [--workdir W]      stop every live server recorded for RUN_ID
                                                  (RUN_ID `all`: every recorded server)
    runner.pyz check-origin DEST URL              is the clone at DEST a clone of URL?
    runner.pyz resolve [--] URL REF...            what each branch or tag REF names at URL now

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

Every process a cell starts (setup, server, bench) gets a parent-death signal (SIGKILL when the
runner dies, PR_SET_PDEATHSIG on Linux), a session of its own that the runner's session guard
watches (`guard`: it stops the session's workers, re-parented or re-titled, when the runner is
killed), and inherits
`ORCH_CELL_MARKER=<run>/<cell>/<runner pid>-<runner start>-<nonce>-<workdir tag>`.
The stop step stops every process of this user carrying the cell's marker (a daemon that
double-forked away included) and lists those found by the marker alone (`escaped`); preflight
stops the marked processes and recorded servers whose runner is dead (orphans of any run of this
workdir, noted in its detail; another workdir's are left to its own preflight) and fails on a
server of another run whose runner is alive (a live run: no stop-all hint).

Secrets: events on stdout are redacted except their protocol values (`archive`, a real path
even when a secret value lies inside it); every file of the cell directory is redacted. The
values redacted are the cell's secret env values, the controller's `secret_values`, and every
secret-named variable of the environment processes start with (GITHUB_TOKEN in the login
environment); a value under 8 characters is redacted by name only (see `redaction`).

Before archiving, symlinks, fifos, sockets and devices in the cell directory are removed and
recorded in a `links.json` of their folder (nothing is followed); the archive holds regular
files and directories only. A clone orch made (`--no-checkout`) carries `.git/orch-unfinished-
clone` until its first checkout: a later run finishes it (or re-clones when it is not the
declared repository's) instead of calling it dirty.

A cell's life, module by module: protocol (payload, events, exit codes) -> context (the cell's
state) -> repo -> server -> snapshot -> envcheck -> bench -> stop -> cell (the narrative);
procs (/proc, signals, ports) and redaction (the secret rule) serve them all.
"""

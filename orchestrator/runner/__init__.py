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

A cell's life, module by module: protocol (payload, events, exit codes) -> context (the cell's
state) -> repo -> server -> snapshot -> envcheck -> bench -> stop -> cell (the narrative);
procs (/proc, signals, ports) and redaction (the secret rule) serve them all.
"""

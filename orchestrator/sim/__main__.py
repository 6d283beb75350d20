"""`python -m orchestrator.sim <serve|bench|init-repo|nvidia-smi|worker> ...`.

Hosts start the simulator by interpreter path, so this works without the `orch` entry point.
Dispatching here (not through click) keeps worker start-up cheap: one import per process.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run one simulator subcommand and return its exit status."""
    args = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m orchestrator.sim {serve,bench,init-repo,nvidia-smi} ..."
    if not args or args[0] in {"-h", "--help"}:
        print(usage)
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "worker":
        from orchestrator.sim import worker

        return worker.main(rest)
    if cmd == "serve":
        from orchestrator.sim import server

        return server.main(rest)
    if cmd == "bench":
        from orchestrator.sim import bench

        return bench.main(rest)
    if cmd == "init-repo":
        from orchestrator.sim import repo

        return repo.main(rest)
    if cmd == "nvidia-smi":
        from orchestrator.sim import smi

        return smi.main(rest)
    print(f"unknown command {cmd!r}\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""The guard stops a watched container by name when the runner's pipe ends: a container whose
server ignores SIGTERM and whose client is gone (conmon keeps it) is not left running."""

from __future__ import annotations

import io
import os
import signal
import subprocess

from container.podman_parts import _run
from orchestrator.runner.guard import serve
from orchestrator.runner.image import ImageRef


def test_the_guard_stops_a_watched_container_that_ignores_sigterm(
    podman_env: dict[str, str],
    images: dict[str, ImageRef],
) -> None:
    name = f"orch-guard-test-{os.getpid()}"
    # Detached: no client forwards signals, only the engine knows the container.
    _run(
        ["podman", "run", "-d", "--rm", "--name", name, images["v1"].run_ref(),
         "/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done"],
        podman_env,
    )  # fmt: skip
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE)}
    try:
        conf = podman_env["CONTAINERS_CONF"]
        os.environ["CONTAINERS_CONF"] = conf  # the guard's own environment, as on a host
        words = f"container 999999 podman {name} {conf}\n".encode()
        serve(io.BytesIO(words))  # EOF at once: the runner is gone
        running = _run(["podman", "ps", "--format", "{{.Names}}"], podman_env).split()
        assert name not in running
    finally:
        for sig, handler in kept.items():  # serve() ignores them: pytest's are put back
            signal.signal(sig, handler)
        os.environ.pop("CONTAINERS_CONF", None)
        subprocess.run(["podman", "rm", "-f", name], env=podman_env, capture_output=True)

"""The container command lines against a real Podman and a real registry on loopback.

What the runner will rely on, proven on the real parts: a tag resolved to its registry digest
(skopeo) runs by that digest; the container's image id identifies what ran (a tag moved to
another image afterwards changes nothing that ran, and is seen); a variable passed by name
reaches the server's process inside the container, seen from the host's /proc through the
container's init pid; orch's labels find the container; stop leaves nothing.

The registry and Podman's environment are the session's (tests/container/podman_parts.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from container.podman_parts import _run
from orchestrator.runner.container import (
    ContainerSpec,
    engine_container_image,
    engine_image_id,
    engine_orphans,
    engine_pid,
    engine_run,
    engine_stop,
    labels,
    same_image_id,
)
from orchestrator.runner.image import ImageRef


def test_pinned_image_runs_with_env_by_name_and_is_found_by_label(
    podman_env: dict[str, str], images: dict[str, ImageRef]
) -> None:
    spec = ContainerSpec(image=images["v1"], runtime="podman", network="host")
    name = f"orch-test-{os.getpid()}"
    argv = engine_run(
        spec,
        ["/bin/sh", "-c", "cat /etc/orch-version; exec sleep 60"],
        name=name,
        env_names=["ORCH_TEST_SECRET_TOKEN"],
        label_map=labels("run-1", "cell-1", os.getpid()),
    )
    value = "s3cret-value-from-the-runner"
    assert value not in " ".join(argv)
    env = {**podman_env, "ORCH_TEST_SECRET_TOKEN": value}
    server = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "v1"  # the pinned image's content
        ran = _run(engine_container_image("podman", name), podman_env).strip()
        pinned = _run(engine_image_id("podman", images["v1"].run_ref()), podman_env).strip()
        other = _run(engine_image_id("podman", images["v2"].run_ref()), podman_env).strip()
        assert same_image_id(ran, pinned) and not same_image_id(ran, other)

        init = int(_run(engine_pid("podman", name), podman_env).strip())
        children = subprocess.run(
            ["pgrep", "-P", str(init)], capture_output=True, text=True
        ).stdout.split()
        assert children, "the container's init has no child: the server is not under it"
        environ = Path(f"/proc/{children[0]}/environ").read_bytes().split(b"\0")
        assert f"ORCH_TEST_SECRET_TOKEN={value}".encode() in environ

        listed = _run(engine_orphans("podman"), podman_env).splitlines()
        assert any(line.split()[1:] == [name, str(os.getpid())] for line in listed)
    finally:
        subprocess.run(engine_stop("podman", name, grace_s=1), env=podman_env, capture_output=True)
        server.wait(30)
    names = _run(["podman", "ps", "-a", "--format", "{{.Names}}"], podman_env).split()
    assert name not in names  # --rm: a stopped container leaves nothing


def test_a_moved_tag_is_seen_and_changes_nothing_pinned(
    podman_env: dict[str, str], registry: str, images: dict[str, ImageRef]
) -> None:
    # The tag v1 now points at v2's image: what a pinned run pulls does not move with it.
    v1, v2 = images["v1"], images["v2"]
    _run(
        [
            "skopeo",
            "copy",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            f"docker://{v2.run_ref()}",
            f"docker://{v1.name()}:v1",
        ],
        podman_env,
    )
    now = _run(
        [
            "skopeo",
            "inspect",
            "--tls-verify=false",
            "--format",
            "{{.Digest}}",
            f"docker://{v1.name()}:v1",
        ],
        podman_env,
    ).strip()
    assert now == v2.digest != v1.digest  # resolving again names another digest: moved
    out = _run(
        ["podman", "run", "--rm", "--tls-verify=false", v1.run_ref(), "cat", "/etc/orch-version"],
        podman_env,
    )
    assert out.strip() == "v1"

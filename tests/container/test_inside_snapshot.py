"""The snapshot read inside a container, against a real Podman: an image without Python says
why its read failed (the cell does not fail for it), and the image's labels are read on the
host as the runtime keeps them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from container.podman_parts import _rootfs, _run
from orchestrator.runner.container import ContainerSpec, engine_run, engine_stop
from orchestrator.runner.container_steps import image_labels, read_inside
from orchestrator.runner.image import ImageRef


def test_a_read_inside_an_image_without_python_records_why(
    podman_env: dict[str, str],
    images: dict[str, ImageRef],
) -> None:
    spec = ContainerSpec(image=images["v1"], runtime="podman", network="host")
    name = f"orch-inside-{os.getpid()}"
    argv = engine_run(spec, ["/bin/sleep", "60"], name=name, env_names=[], label_map={})
    server = subprocess.Popen(argv, env=podman_env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):  # until it runs
            ps = _run(["podman", "ps", "--format", "{{.Names}}"], podman_env).split()
            if name in ps:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        doc = {"runtime": "podman", "name": name, "conf": podman_env["CONTAINERS_CONF"]}
        got = read_inside(doc, "python3", ["vllm"])
        assert set(got) == {"error"}
        assert got["error"].startswith(f"podman exec {name} python3 failed"), got
        assert "python3" in got["error"].split("failed", 1)[1]  # the runtime's own reason
    finally:
        subprocess.run(engine_stop("podman", name, grace_s=1), env=podman_env, capture_output=True)
        server.wait(30)


def test_image_labels_are_read_on_the_host(
    podman_env: dict[str, str],
    tmp_path: Path,
) -> None:
    tar = _rootfs(tmp_path, "labelled")
    tag = f"localhost/orch/labelled-{os.getpid()}:v1"
    _run(["podman", "import", "-q", "--change", "LABEL org.opencontainers.image.version=1.2.3",
          str(tar), tag], podman_env)  # fmt: skip
    try:
        labels = image_labels("podman", tag, podman_env)
        assert labels == {"org.opencontainers.image.version": "1.2.3"}
        assert image_labels("podman", "localhost/orch/absent:none", podman_env) is None
    finally:
        _run(["podman", "rmi", "-f", tag], podman_env)

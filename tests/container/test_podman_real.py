"""The container command lines against a real Podman and a real registry on loopback.

What the runner will rely on, proven on the real parts: a tag resolved to its registry digest
(skopeo) runs by that digest; the container's image id identifies what ran (a tag moved to
another image afterwards changes nothing that ran, and is seen); a variable passed by name
reaches the server's process inside the container, seen from the host's /proc through the
container's init pid; orch's labels find the container; stop leaves nothing.

Podman, runc, skopeo and the registry are Debian packages that scripts/test.sh installs as
root; elsewhere (or without them) the tests skip, under CI they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
from orchestrator.runner.image import ImageRef, parse_image

TOOLS = ("podman", "skopeo", "docker-registry", "runc")
# This machine's cgroups are v1 and root lacks CAP_SYS_RESOURCE: crun refuses, runc needs
# limits below the hard ones (docs/FACTS.md, "Containers").
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""


def _missing() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


@pytest.fixture(scope="module")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment Podman runs under here, or a skip (a failure under CI)."""
    missing = _missing()
    if missing or os.geteuid() != 0:
        why = f"needs root and {', '.join(missing) or 'nothing'} (scripts/test.sh installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def registry(podman_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A distribution registry on loopback: its `host:port`."""
    root = tmp_path_factory.mktemp("registry")
    port = _free_port()
    config = root / "config.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (root / "registry.log").open("w")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"the registry never listened: {(root / 'registry.log').read_text()}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout


def _rootfs(tmp: Path, version: str) -> Path:
    """A tar of a tiny root filesystem: sh, sleep, cat and their libraries, /etc/orch-version."""
    root = tmp / f"rootfs-{version}"
    for binary in ("/bin/sh", "/bin/sleep", "/bin/cat"):
        needed = [binary] + [
            word
            for word in subprocess.run(
                ["ldd", binary], capture_output=True, text=True
            ).stdout.split()
            if word.startswith("/")
        ]
        for path in needed:
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(path), target)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "orch-version").write_text(version + "\n")
    tar = tmp / f"rootfs-{version}.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True)
    return tar


@pytest.fixture(scope="module")
def images(
    podman_env: dict[str, str], registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ImageRef]]:
    """Images v1 and v2 pushed to the registry, each pinned to its registry digest."""
    tmp = tmp_path_factory.mktemp("images")
    out: dict[str, ImageRef] = {}
    name = f"{registry}/orch/tiny"
    for version in ("v1", "v2"):
        _run(
            ["podman", "import", "-q", str(_rootfs(tmp, version)), f"{name}:{version}"], podman_env
        )
        _run(["podman", "push", "-q", "--tls-verify=false", f"{name}:{version}"], podman_env)
        digest = _run(
            [
                "skopeo",
                "inspect",
                "--tls-verify=false",
                "--format",
                "{{.Digest}}",
                f"docker://{name}:{version}",
            ],
            podman_env,
        ).strip()
        out[version] = parse_image(f"{name}:{version}").with_digest(digest)
    # Pulled by digest, as a run will: the local images built above are dropped first.
    _run(["podman", "rmi", "-f", f"{name}:v1", f"{name}:v2"], podman_env)
    for ref in out.values():
        _run(["podman", "pull", "-q", "--tls-verify=false", ref.run_ref()], podman_env)
    try:
        yield out
    finally:
        subprocess.run(
            ["podman", "rmi", "-f", *(r.run_ref() for r in out.values())],
            env=podman_env,
            capture_output=True,
        )


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

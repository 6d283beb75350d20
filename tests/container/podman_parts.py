"""What the container tests share: Podman's environment on these machines, one registry on
loopback per session and the simulator's images pushed to it once (their roots cached outside
the clone, `~/.cache/orch/images`, as the demo caches them), and small helpers.

Podman, runc, skopeo and the registry are Debian packages that scripts/test.sh installs as
root; elsewhere (or without them) the tests skip, under CI they fail. The fixtures are
registered by tests/container/conftest.py (one instance per session there); the engine tier
imports them for its one test in an image.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.runner.image import ImageRef, parse_image
from orchestrator.sim.images import VERSIONS, push_images

TOOLS = ("podman", "skopeo", "docker-registry", "runc")
# This machine's cgroups are v1 and root lacks CAP_SYS_RESOURCE: crun refuses, runc needs
# limits below the hard ones (docs/FACTS.md, "Containers").
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""
IMAGE_CACHE = Path.home() / ".cache" / "orch" / "images"  # the sim images' roots, as the demo's


def _missing() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout


def digest_of(ref: str, env: dict[str, str]) -> str:
    """The manifest digest the registry names for `ref` now (skopeo, plain http)."""
    argv = ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}"]
    return _run([*argv, f"docker://{ref}"], env).strip()


@pytest.fixture(scope="session")
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


@contextlib.contextmanager
def serve_registry(root: Path, address: str = "127.0.0.1") -> Iterator[str]:
    """A distribution registry listening on `address` while the block runs: its `host:port`."""
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = root / "config.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
        f"http:\n  addr: {address}:{port}\n"
    )
    log = (root / "registry.log").open("w")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((address, port)) == 0:
                break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"the registry never listened: {(root / 'registry.log').read_text()}")
    try:
        yield f"{address}:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def registry(podman_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A distribution registry on loopback: its `host:port`."""
    with serve_registry(tmp_path_factory.mktemp("registry")) as where:
        yield where


@pytest.fixture(scope="session")
def sim_tags(podman_env: dict[str, str], registry: str) -> dict[str, str]:
    """The simulator's four images (v1, v1.1, v2, v2.1) pushed once: version -> tag. A test
    that moves a tag puts it back."""
    return push_images(registry, IMAGE_CACHE, podman_env, list(VERSIONS))


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


@pytest.fixture(scope="session")
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

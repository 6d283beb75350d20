"""`server.container.image` pinned at plan time against a real registry on loopback: a tag
becomes the digest the registry names now (asked on the cell's host), a tag the registry lacks
is a located input error, a tag moved after the plan is another digest when planned again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from container.podman_parts import _rootfs, _run
from orchestrator.app.plan import load_plan
from orchestrator.errors import InputError

INVENTORY = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"


def _push(podman_env: dict[str, str], tmp: Path, name: str, version: str) -> str:
    tar = _rootfs(tmp, version)
    _run(["podman", "import", "-q", str(tar), f"{name}:{version}"], podman_env)
    _run(["podman", "push", "-q", "--tls-verify=false", f"{name}:{version}"], podman_env)
    return _run(
        ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
         f"docker://{name}:{version}"],
        podman_env,
    ).strip()  # fmt: skip


def _plan(tmp_path: Path, image: str, conf: str):  # type: ignore[no-untyped-def]
    (tmp_path / "pb.yml").write_text(
        "name: c\nserver:\n  command: [sleep, '60']\n  container:\n"
        f"    image: {image}\n    tls_verify: false\n    conf: {conf}\n"
        "bench:\n  command: [echo, hi]\n"
    )
    (tmp_path / "inv.yml").write_text(INVENTORY)
    return load_plan(tmp_path / "pb.yml", [tmp_path / "inv.yml"])


def test_a_tag_is_pinned_to_its_registry_digest_and_a_missing_one_is_refused(
    podman_env: dict[str, str],
    registry: str,
    tmp_path: Path,
) -> None:
    name = f"{registry}/orch/pin"
    v1 = _push(podman_env, tmp_path, name, "v1")
    conf = podman_env["CONTAINERS_CONF"]
    plan = _plan(tmp_path, f"{name}:v1", conf)
    pinned, _ = plan.pinned()
    pin = pinned.cells[0].server.container  # type: ignore[union-attr]
    assert pin is not None and pin.digest == v1 and pin.resolved_by == "host localhost"
    assert pinned.cells[0].id == plan.cells[0].id  # the id hashes the tag, not the digest

    # The tag moved to another image: planned again, the pin names the other digest.
    v2 = _push(podman_env, tmp_path, name, "v2")
    _run(["skopeo", "copy", "--src-tls-verify=false", "--dest-tls-verify=false",
          f"docker://{name}:v2", f"docker://{name}:v1"], podman_env)  # fmt: skip
    again, _ = _plan(tmp_path, f"{name}:v1", conf).pinned()
    assert again.cells[0].server.container.digest == v2 != v1  # type: ignore[union-attr]

    with pytest.raises(InputError) as caught:
        _plan(tmp_path, f"{name}:nope", conf).pinned()
    assert caught.value.exit_code == 2
    assert caught.value.key_path == "server.container.image"
    assert caught.value.location is not None and caught.value.location.line == 5
    assert "no such image" in caught.value.message

    # What `orch apply` asks a remote host: the runner's own command, the same answer.
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.runner", "resolve-image", f"{name}:v2",
         "--no-tls-verify", "--conf", conf],
        capture_output=True, text=True, env=podman_env, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == {"ok": True, "digest": v2}
    _run(["podman", "rmi", "-f", f"{name}:v1", f"{name}:v2"], podman_env)

"""`server.container`: validated with located errors, in the schema, rendered by `orch plan`,
and part of the server's identity without moving any cell id that declares no container."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.app.plan import load_plan
from orchestrator.cell import cell_id
from orchestrator.cli.plan_output import container_commands
from orchestrator.config.model import playbook_json_schema
from orchestrator.errors import InputError
from orchestrator.plan.build import cell_spec
from orchestrator.plan.sessions import session_key

DIGEST = "sha256:" + "ab" * 32
INVENTORY = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"


def _playbook(container: str) -> str:
    return (
        "name: c\nmatrix:\n  x: [1, 2]\nenv: {FOO: bar}\nserver:\n"
        "  command: [python3, -m, http.server, '8000']\n  port: 8000\n"
        + container
        + "bench:\n  command: [echo, hi]\n"
    )


def _plan(tmp_path: Path, container: str):  # type: ignore[no-untyped-def]
    (tmp_path / "pb.yml").write_text(_playbook(container))
    (tmp_path / "inv.yml").write_text(INVENTORY)
    return load_plan(tmp_path / "pb.yml", [tmp_path / "inv.yml"])


@pytest.mark.parametrize(
    ("container", "line", "key_path", "words"),
    [
        ("  container:\n    image: Foo/Bar:v1\n", 9, "server.container.image", "'Foo/Bar'"),
        ("  container:\n    image: foo@sha256:12\n", 9, "server.container.image", "after @"),
        (
            "  container:\n    image: foo:v1\n    runtime: pyxis\n    network: host\n",
            11,
            "server.container.network",
            "option of podman and docker",
        ),
        (
            "  container:\n    image: foo:v1\n    runtime: docker\n    tls_verify: false\n",
            11,
            "server.container.tls_verify",
            "podman's",
        ),
        (
            "  container:\n    image: foo:v1\n    mounts: [/a:/b, rel:/x]\n",
            10,
            "server.container.mounts[1]",
            "absolute",
        ),
        (
            "  container:\n    image: foo:v1\n    gpus: first\n",
            10,
            "server.container.gpus",
            "'0,1'",
        ),
        (
            "  container:\n    image: foo:v1\n    runtime: lxc\n",
            10,
            "server.container.runtime",
            "podman",
        ),
        ("  container:\n    imgae: foo:v1\n", 9, "server.container.imgae", "'image'"),
    ],
)
def test_a_bad_container_setting_is_a_located_error(
    tmp_path: Path, container: str, line: int, key_path: str, words: str
) -> None:
    with pytest.raises(InputError) as caught:
        _plan(tmp_path, container)
    err = caught.value
    assert err.exit_code == 2
    assert err.key_path == key_path
    assert err.location is not None and err.location.line == line, err.render()
    assert words in err.render()


def test_the_schema_knows_the_container_section() -> None:
    schema = playbook_json_schema()
    section = schema["$defs"]["ContainerSection"]
    assert {"image", "runtime", "mounts", "gpus", "shm_size", "ipc", "network", "workdir",
            "flags", "conf", "tls_verify"} <= set(section["properties"])  # fmt: skip
    assert section["required"] == ["image"]
    server = schema["$defs"]["ServerSection"]["properties"]["container"]
    assert json.dumps(server).count("ContainerSection") == 1


def test_no_container_leaves_the_cell_json_and_ids_as_they_were(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "")
    for cell in plan.cells:
        assert cell.server is not None and "container" not in cell.server.model_dump(mode="json")
    # The ids main gave this playbook before `container:` existed.
    assert [c.id for c in plan.cells] == ["1-be42df67", "2-4189de85"]


def test_the_id_hashes_the_reference_and_the_session_the_digest(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "  container:\n    image: reg.example:5000/orch/sim:v1\n")
    cell = plan.cells[0]
    assert cell.server is not None and cell.server.container is not None
    assert cell.server.container.digest is None
    pinned_server = cell.server.model_copy(
        update={"container": cell.server.container.model_copy(update={"digest": DIGEST})}
    )
    pinned = cell.model_copy(update={"server": pinned_server})
    # Pinning keeps the id (resume and diff pair by it) ...
    assert cell_id(pinned.axes, pinned.host, cell_spec(pinned)) == cell.id
    # ... and another image is another server: no shared session.
    assert session_key(pinned) != session_key(cell)
    # A reference written with another tag is another cell.
    other = _plan(tmp_path, "  container:\n    image: reg.example:5000/orch/sim:v2\n")
    assert other.cells[0].id != cell.id


def test_a_reference_with_a_digest_is_pinned_as_written(tmp_path: Path) -> None:
    plan, _ = _plan(tmp_path, f"  container:\n    image: reg.example/sim:v1@{DIGEST}\n").pinned(
        ask_hosts=False
    )
    pin = plan.cells[0].server.container  # type: ignore[union-attr]
    assert pin is not None and pin.digest == DIGEST and pin.resolved_by == "reference"


@pytest.mark.parametrize(
    ("runtime", "first"),
    [
        ("podman", ["podman", "run", "--rm", "--init"]),
        ("docker", ["docker", "run", "--rm", "--init"]),
        ("pyxis", ["srun", "--container-image=reg.example#sim:" + DIGEST]),
        ("enroot", ["enroot", "import", "--output"]),
        ("apptainer", ["apptainer", "exec", "--cleanenv"]),
    ],
)
def test_plan_renders_each_runtime_s_command_lines(
    tmp_path: Path, runtime: str, first: list[str]
) -> None:
    container = (
        f"  container:\n    image: reg.example/sim:v1@{DIGEST}\n    runtime: {runtime}\n"
        "    mounts: [/models:/models:ro]\n    workdir: /work\n"
    )
    cell = _plan(tmp_path, container).cells[0]
    commands = container_commands(cell)
    assert commands[0][: len(first)] == first
    assert commands[-1][-4:] == ["python3", "-m", "http.server", "8000"]
    flat = " ".join(" ".join(c) for c in commands)
    assert "bar" not in flat  # env by name only: FOO's value never in an argv
    if runtime in ("podman", "docker"):
        assert "--env FOO" in flat and f"reg.example/sim@{DIGEST}" in flat
        assert f"--label orch.cell={cell.id}" in flat


def test_orch_plan_prints_the_image_and_its_command_line(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(
        _playbook("  container:\n    image: 127.0.0.1:5000/orch/sim:v1\n    tls_verify: false\n")
    )
    (tmp_path / "inv.yml").write_text(INVENTORY)
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", "pb.yml", "-i", "inv.yml", "-v"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "server.container podman 127.0.0.1:5000/orch/sim:v1: a tag" in proc.stdout
    assert "container: podman run --rm --init" in proc.stdout
    assert "--tls-verify=false" in proc.stdout


def test_a_resume_keeps_the_first_start_s_image_pins(tmp_path: Path) -> None:
    from orchestrator.execute.images import recorded_images

    plan = _plan(tmp_path, "  container:\n    image: reg.example:5000/orch/sim:v1\n")
    pin = plan.cells[0].server.container  # type: ignore[union-attr]
    assert pin is not None
    first = pin.model_copy(update={"digest": DIGEST, "resolved_by": "host localhost"})
    cells = [
        c.model_copy(update={"server": c.server.model_copy(update={"container": first})})  # type: ignore[union-attr]
        for c in plan.cells
    ]
    run = tmp_path / "run"
    run.mkdir()
    (run / "plan.json").write_text(
        json.dumps({"cells": [c.model_dump(mode="json") for c in cells]})
    )
    kept = recorded_images(run)
    assert list(kept.values()) == [(DIGEST, "kept from the first start of run")]
    # The registry at reg.example is never asked: the recorded pin wins.
    resumed, _ = plan.pinned(images=kept)
    assert {c.server.container.digest for c in resumed.cells} == {DIGEST}  # type: ignore[union-attr]

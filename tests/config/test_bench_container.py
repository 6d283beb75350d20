"""`bench.container`: the bench client in an image, its own or the server's (the same
reference pins once), validated with located errors, rendered by `orch plan`, its pin left out
of the cell id as the server's is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.app.plan import load_plan
from orchestrator.cell import cell_id
from orchestrator.cli.plan_output import bench_container_commands
from orchestrator.errors import InputError
from orchestrator.plan.build import cell_spec

DIGEST = "sha256:" + "cd" * 32
INVENTORY = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"


def _write(tmp_path: Path, server: str, bench: str) -> None:
    (tmp_path / "pb.yml").write_text(
        "name: b\nenv: {FOO: bar}\nserver:\n"
        "  command: [python3, -m, http.server, '8000']\n  port: 8000\n"
        + server
        + "bench:\n  command: [echo, hi]\n"
        + bench
    )
    (tmp_path / "inv.yml").write_text(INVENTORY)


@pytest.mark.parametrize(
    ("bench", "line", "key_path", "words"),
    [
        (
            "  container:\n    image: reg.example/c:v1\n    runtime: pyxis\n",
            10,
            "bench.container.runtime",
            "podman or docker",
        ),
        ("  container:\n    image: Reg/C:v1\n", 9, "bench.container.image", "'Reg/C'"),
        (
            "  container:\n    image: c:v1\n    mounts: [rel:/x]\n",
            10,
            "bench.container.mounts[0]",
            "absolute",
        ),
    ],
)  # fmt: skip
def test_a_bad_bench_container_is_a_located_error(
    tmp_path: Path, bench: str, line: int, key_path: str, words: str
) -> None:
    _write(tmp_path, "", bench)
    with pytest.raises(InputError) as caught:
        load_plan(tmp_path / "pb.yml", [tmp_path / "inv.yml"])
    err = caught.value
    assert err.exit_code == 2 and err.key_path == key_path, err.render()
    assert err.location is not None and err.location.line == line, err.render()
    assert words in err.render()


def test_one_image_shared_by_server_and_bench_pins_once_and_keeps_the_id(tmp_path: Path) -> None:
    image = f"reg.example/sim:v1@{DIGEST}"
    _write(tmp_path, f"  container: {{image: '{image}'}}\n", f"  container: {{image: '{image}'}}\n")
    plan = load_plan(tmp_path / "pb.yml", [tmp_path / "inv.yml"])
    (cell,) = plan.cells
    _write(tmp_path, f"  container: {{image: '{image}'}}\n", "")
    (alone,) = load_plan(tmp_path / "pb.yml", [tmp_path / "inv.yml"]).cells
    assert alone.id != cell.id  # a bench in an image is another measurement
    pinned, _ = plan.pinned(ask_hosts=False)
    (done,) = pinned.cells
    assert done.server is not None and done.server.container is not None
    assert done.bench.container is not None
    assert done.server.container.digest == done.bench.container.digest == DIGEST
    assert cell_id(done.axes, done.host, cell_spec(done)) == cell.id  # the pin is not hashed
    (command,) = bench_container_commands(done)
    flat = " ".join(command)
    assert command[:4] == ["podman", "run", "--rm", "--init"]
    assert "--volume <repeat dir>:<repeat dir>" in flat and "--workdir <repeat dir>" in flat
    assert "--env FOO" in flat and "--env ORCH_REPEAT" in flat and "bar" not in flat
    assert command[-3:] == [f"reg.example/sim@{DIGEST}", "echo", "hi"]


def test_orch_plan_prints_the_bench_image_and_its_command_line(tmp_path: Path) -> None:
    _write(
        tmp_path, "", "  container:\n    image: 127.0.0.1:5000/orch/c:v1\n    tls_verify: false\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", "pb.yml", "-i", "inv.yml", "-v"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "bench.container podman 127.0.0.1:5000/orch/c:v1: a tag" in proc.stdout
    assert "bench container: podman run --rm --init" in proc.stdout
    assert "server.container" not in proc.stdout

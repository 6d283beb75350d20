"""`orch apply` of the simulator's server inside a container (podman, a registry on loopback):
the image is built here from a scratch root with the host's Python, venv and this checkout
mounted read-only, pushed, resolved by tag at plan time and run by digest. The env is verified
in every process inside the container, the bundle records the image, and a SIGKILLed runner
leaves no container running 30 s later; a pull that fails fails the cell with its reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from container.test_podman_real import _run, podman_env, registry  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
TOP_DIRS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")


def _root_and_mounts(tmp: Path) -> tuple[Path, list[str]]:
    """A scratch root (the host's top-level links copied, mount points made) and the host
    paths the simulator needs, mounted read-only: /usr, the interpreter, the venv, this clone."""
    root = tmp / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "etc" / "orch-image").write_text("sim v1\n")
    paths = ["/usr"]
    for name in TOP_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            (root / name).symlink_to(os.readlink(host))  # merged /usr: the link is enough
        elif host.is_dir():
            paths.append(str(host))
    for path in (sys.base_prefix, sys.prefix, str(ROOT)):
        if not any(path == p or path.startswith(p + "/") for p in paths):
            paths.append(path)
    for path in paths:
        (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return root, [f"{p}:{p}:ro" for p in paths]


@pytest.fixture(scope="module")
def sim_image(
    podman_env: dict[str, str],  # noqa: F811
    registry: str,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, list[str]]]:
    """The tag of the simulator's image in the registry, and the mounts it runs with."""
    tmp = tmp_path_factory.mktemp("simimage")
    root, mounts = _root_and_mounts(tmp)
    tar = tmp / "rootfs.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True)
    tag = f"{registry}/orch/simhost:v1"
    _run(["podman", "import", "-q", str(tar), tag], podman_env)
    _run(["podman", "push", "-q", "--tls-verify=false", tag], podman_env)
    _run(["podman", "rmi", "-f", tag], podman_env)  # the run pulls it by digest
    yield tag, mounts


def _playbook(image: str, mounts: list[str], conf: str, port: int, repeats: int) -> str:
    return yaml.safe_dump(
        {
            "name": "contained",
            "vars": {"port": port},
            "env": {"ORCH_SIM_TIME_SCALE": "0.02", "ORCH_SIM_SEED": "11", "NCCL_ALGO": "Ring"},
            "server": {
                "adapter": "sglang",
                "launcher": ["{{ orch_python }}", "-m", "orchestrator.sim", "serve"],
                "args": {
                    "model-path": "/models/m",
                    "host": "127.0.0.1",
                    "port": "{{ port }}",
                    "tp-size": 2,
                },
                "ready": {"timeout": 60},
                "stop_grace": 3,
                "container": {
                    "image": image,
                    "tls_verify": False,
                    "conf": conf,
                    "network": "host",
                    "mounts": mounts,
                },
            },
            "bench": {
                "adapter": "sglang.bench_serving",
                "launcher": ["{{ orch_python }}", "-m", "orchestrator.sim", "bench"],
                "args": {
                    "dataset-name": "random-ids",
                    "random-input-len": 64,
                    "random-output-len": 64,
                    "num-prompts": 1,
                    "max-concurrency": 1,
                },
                "repeats": repeats,
            },
            "snapshot": {"pip_freeze": True, "topo": False},
            "timeouts": {"cell": 180},
        }
    )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _apply(tmp_path: Path, text: str, env: dict[str, str], *more: str) -> subprocess.Popen[str]:
    (tmp_path / "pb.yml").write_text(text)
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "apply", "pb.yml", "--results", "results", *more],
        cwd=tmp_path,
        env={**env, "HOME": str(tmp_path / "home")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _cell(tmp_path: Path) -> Path:
    (cell,) = (tmp_path / "results").glob("*/cells/*")
    return cell


def test_the_sim_server_runs_in_its_pinned_image_with_its_env_verified_inside(
    podman_env: dict[str, str],  # noqa: F811
    sim_image: tuple[str, list[str]],
    tmp_path: Path,
) -> None:
    tag, mounts = sim_image
    conf = podman_env["CONTAINERS_CONF"]
    digest = _run(
        ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{tag}"],
        podman_env,
    ).strip()
    # A container of a dead runner (by its labels): the cell's preflight stops it.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"orch-stale-{os.getpid()}"
    volumes = [a for m in mounts for a in ("--volume", m)]
    _run(
        ["podman", "run", "-d", "--rm", "--name", stale, "--label", "orch.cell=old",
         "--label", f"orch.runner-pid={dead.pid}", *volumes, "--tls-verify=false",
         f"{tag.rsplit(':', 1)[0]}@{digest}", "/usr/bin/sleep", "600"],
        podman_env,
    )  # fmt: skip
    proc = _apply(tmp_path, _playbook(tag, mounts, conf, _free_port(), 1), podman_env)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    cell = _cell(tmp_path)
    assert stale not in _run(["podman", "ps", "--format", "{{.Names}}"], podman_env).split()
    assert stale in (cell / "cell.json").read_text()  # the preflight says what it stopped
    server = json.loads((cell / "server.json").read_text())
    record = server["container"]
    assert record["image"] == tag and record["digest"] == digest
    assert record["run_ref"].endswith("@" + digest)
    assert record["image_id"] == record["running_image_id"]
    assert record["runtime_version"]
    assert server["argv"][:2] == ["podman", "run"]
    checked = json.loads((cell / "env_check.json").read_text())
    assert checked["ok"]
    inside = [p for p in checked["processes"] if "orchestrator.sim" in p["cmdline"]]
    # The server and its two TP workers: every process inside the container was read.
    assert len([p for p in inside if "worker" in p["cmdline"]]) == 2, checked["processes"]
    assert any(
        p["cmdline"].startswith(("/run/podman-init", "catatonit")) for p in checked["processes"]
    )
    for p in inside:
        assert p["vars"]["ORCH_SIM_SEED"]["ok"] and p["vars"]["NCCL_ALGO"]["ok"]
    names = _run(["podman", "ps", "-a", "--format", "{{.Names}}"], podman_env).split()
    assert record["name"] not in names
    # What the image holds, read inside the running container beside the host's snapshot.
    image = json.loads((cell / "snapshot.image.json").read_text())
    assert image["digest"] == digest and image["labels"] == {}
    assert image["runtime_version"] == record["runtime_version"]
    inside = image["inside"]
    assert inside["python"] == sys.version.split()[0]
    assert inside["executable"].startswith(sys.prefix)  # the server's own interpreter
    assert any(line.lower().startswith("pyyaml==") for line in inside["freeze"]), inside
    # Neither torch nor the engine is in the simulator's venv: each says why, the cell passed.
    assert "torch" not in inside["versions"] and "torch" in inside["version_errors"]
    assert "No module named 'sglang'" in inside["version_errors"]["sglang"]
    assert record["inside"] == inside
    # The host's freeze would be taken for the server's: the host snapshot has none.
    host = json.loads((cell / "snapshot.pre.json").read_text())
    assert "disabled" in host["pip_freeze"]["absent"], host["pip_freeze"]


def test_a_sigkilled_runner_leaves_no_container_running(
    podman_env: dict[str, str],  # noqa: F811
    sim_image: tuple[str, list[str]],
    tmp_path: Path,
) -> None:
    tag, mounts = sim_image
    text = _playbook(tag, mounts, podman_env["CONTAINERS_CONF"], _free_port(), 200)
    proc = _apply(tmp_path, text, podman_env)
    listing = ["podman", "ps", "--filter", "label=orch.cell", "--format",
               '{{.Names}} {{index .Labels "orch.runner-pid"}}']  # fmt: skip
    name, runner = "", 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not name:
        for line in _run(listing, podman_env).splitlines():
            words = line.split()
            if "contained" in words[0]:
                name, runner = words[0], int(words[1])
        time.sleep(0.5)
    try:
        assert name, "the container never ran"
        time.sleep(2)  # mid-bench
        os.kill(runner, signal.SIGKILL)
        deadline = time.monotonic() + 30
        running = [name]
        while time.monotonic() < deadline and name in running:
            time.sleep(1)
            running = _run(["podman", "ps", "--format", "{{.Names}}"], podman_env).split()
        assert name not in running, "a container outlived its SIGKILLed runner by 30 s"
    finally:
        proc.kill()
        proc.communicate(timeout=60)
        subprocess.run(["podman", "rm", "-f", name or "none"], env=podman_env, capture_output=True)


def test_a_pull_that_fails_fails_the_cell_with_its_reason(
    podman_env: dict[str, str],  # noqa: F811
    sim_image: tuple[str, list[str]],
    tmp_path: Path,
) -> None:
    tag, mounts = sim_image
    missing = tag.rsplit(":", 1)[0] + "@sha256:" + "0" * 64  # a digest the registry lacks
    text = _playbook(missing, mounts, podman_env["CONTAINERS_CONF"], _free_port(), 1)
    proc = _apply(tmp_path, text, podman_env)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode != 0, out
    info = json.loads((_cell(tmp_path) / "cell.json").read_text())
    assert info["status"] == "failed" and info["failed_step"] == "server_start", info
    assert "pulling" in info["reason"] and "0000000000" in info["reason"]


def test_a_slurm_runtime_is_refused_outside_slurm_with_the_reason(tmp_path: Path) -> None:
    image = "reg.example/sim@sha256:" + "ab" * 32  # pinned as written: no registry asked
    text = _playbook(image, [], "/nonexistent", _free_port(), 1)
    data = yaml.safe_load(text)
    data["server"]["container"] = {"image": image, "runtime": "pyxis"}
    proc = _apply(tmp_path, yaml.safe_dump(data), dict(os.environ))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    info = json.loads((_cell(tmp_path) / "cell.json").read_text())
    assert info["failed_step"] == "server_start", info
    assert "pyxis runs only inside a Slurm job" in info["reason"]


def test_a_tag_moved_between_plan_and_run_is_caught_and_the_pin_still_runs(
    podman_env: dict[str, str],  # noqa: F811
    sim_image: tuple[str, list[str]],
    tmp_path: Path,
) -> None:
    import socket

    tag, mounts = sim_image
    port = _free_port()
    text = _playbook(tag, mounts, podman_env["CONTAINERS_CONF"], port, 1)
    pinned = _digest(tag, podman_env)
    with socket.socket() as held:  # the first start fails at preflight: its port is taken
        held.bind(("127.0.0.1", port))
        held.listen()
        out, _ = _apply(tmp_path, text, podman_env).communicate(timeout=240)
    (run,) = [p for p in (tmp_path / "results").iterdir() if (p / "run.json").exists()]
    assert json.loads((_cell(tmp_path) / "cell.json").read_text())["status"] == "failed", out
    # Between the plan and the retry the tag moves to another image.
    root = tmp_path / "v2"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "orch-image").write_text("sim v2\n")
    subprocess.run(["tar", "-C", str(root), "-cf", str(tmp_path / "v2.tar"), "."], check=True)
    other = tag.rsplit(":", 1)[0] + ":v2"
    _run(["podman", "import", "-q", str(tmp_path / "v2.tar"), other], podman_env)
    _run(["podman", "push", "-q", "--tls-verify=false", other], podman_env)
    _run(["skopeo", "copy", "--src-tls-verify=false", "--dest-tls-verify=false",
          f"docker://{other}", f"docker://{tag}"], podman_env)  # fmt: skip
    moved = _digest(tag, podman_env)
    assert moved != pinned
    proc = _apply(tmp_path, text, podman_env, "--resume", run.name, "--retry-failed")
    out, _ = proc.communicate(timeout=240)
    try:
        assert proc.returncode == 0, out
        record = json.loads((_cell(tmp_path) / "server.json").read_text())["container"]
        assert record["digest"] == pinned and record["tag_moved_to"] == moved
        assert f"now names {moved}" in out  # said on the terminal
    finally:
        back = f"docker://{tag.rsplit(':', 1)[0]}@{pinned}"  # the tag back, for the others
        _run(["skopeo", "copy", "--src-tls-verify=false", "--dest-tls-verify=false",
              back, f"docker://{tag}"], podman_env)  # fmt: skip


def _digest(tag: str, env: dict[str, str]) -> str:
    return _run(
        ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{tag}"],
        env,
    ).strip()

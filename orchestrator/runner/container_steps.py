"""A server in a container (`server.container`, podman or docker): pulled by its pinned
digest, started through `podman run`/`docker run` with orch's labels, checked to run the pinned
image, its processes found through the container's init, stopped by name at the cell's end, by
the guard when the runner dies, and by the next preflight when both are gone.

The state lives in the server's record (`server_doc["container"]`), so a cell that takes a
running server over (server sessions) knows its container too.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Dict, List, Optional, Tuple

from orchestrator.runner.container import (
    ENGINES,
    ContainerSpec,
    ContainerSpecError,
    bench_command,
    bench_env_names,
    command_lines,
    container_name,
    engine_container_image,
    engine_image_id,
    engine_orphans,
    engine_pid,
    engine_stop,
    labels,
    same_image_id,
    spec_of,
)
from orchestrator.runner.context import CellContext
from orchestrator.runner.guard import GUARD
from orchestrator.runner.image import ImageRefError, parse_image
from orchestrator.runner.layout import SERVER_JSON, SNAPSHOT_IMAGE
from orchestrator.runner.procs import MARKER_VAR, proc_alive
from orchestrator.runner.protocol import StepFailed, write_json
from orchestrator.runner.registry import registry_digest

PULL_TIMEOUT = 3600.0  # seconds: an engine's image is tens of GB
STARTED_TIMEOUT = 120.0  # seconds from `run` until the container's init runs
INSIDE_TIMEOUT = 180.0  # seconds for the snapshot inside: importing torch takes a while
# Run inside the container by its Python (argv: the engine's module names): what is installed
# there, as JSON on stdout; each part that fails says why instead of failing the whole read.
INSIDE_SCRIPT = r"""
import importlib, json, subprocess, sys
out = {"python": sys.version.split()[0], "python_full": sys.version, "executable": sys.executable}
try:
    p = subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze",
                        "--disable-pip-version-check"], capture_output=True, text=True, timeout=120)
    if p.returncode == 0:
        out["freeze"], out["freeze_from"] = p.stdout.splitlines(), "pip list --format=freeze"
    else:
        out["pip_error"] = (p.stderr or p.stdout).strip()[-300:]
except Exception as exc:
    out["pip_error"] = "%s: %s" % (type(exc).__name__, exc)
if "freeze" not in out:
    try:
        import importlib.metadata as md
        dists = md.distributions()
        out["freeze"] = sorted("%s==%s" % (d.metadata["Name"], d.version) for d in dists)
        out["freeze_from"] = "importlib.metadata (pip failed)"
    except Exception as exc:
        out["freeze_error"] = "%s: %s" % (type(exc).__name__, exc)
out["versions"], out["version_errors"] = {}, {}
for name in ["torch"] + sys.argv[1:]:
    try:
        out["versions"][name] = str(getattr(importlib.import_module(name), "__version__", "?"))
    except BaseException as exc:
        out["version_errors"][name] = "%s: %s" % (type(exc).__name__, str(exc)[:200])
print(json.dumps(out))
"""
ENGINE_MODULES = ("sglang", "vllm")  # adapters whose name is the engine's importable module


def engine_env(doc: Dict[str, Any], base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment a podman/docker command runs in: `base` with the spec's containers.conf."""
    env = dict(os.environ if base is None else base)
    if doc.get("conf"):
        env["CONTAINERS_CONF"] = str(doc["conf"])
    return env


def engine_output(argv: List[str], env: Dict[str, str], timeout: float) -> Tuple[int, str]:
    """(rc, stdout, or stderr's tail when it failed) of one engine command."""
    try:
        done = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    if done.returncode != 0:
        return done.returncode, done.stderr.decode("utf-8", "replace").strip()[-600:]
    return 0, done.stdout.decode("utf-8", "replace").strip()


class ContainerSteps(CellContext):
    """The container parts of server_start, verify_env, stop and preflight."""

    def container_spec_doc(self) -> Optional[Dict[str, Any]]:
        """The cell's `server.container`, or None for a server on the host."""
        doc = (self.server or {}).get("container")
        return doc if isinstance(doc, dict) else None

    def container_start_argv(
        self, argv: List[str], env: Dict[str, str]
    ) -> Tuple[List[str], Dict[str, Any]]:
        """Pull the pinned image; the `run` argv for `argv` and the container's record.
        StepFailed (with the reason) for a runtime that cannot run here, an unpinned image or
        a failed pull."""
        doc = self.container_spec_doc()
        assert doc is not None
        spec, record = pull_pinned(doc, engine_env(doc, env), "server")
        name = container_name(self.run_id, self.cell_id)
        record["name"] = name
        names = sorted({*self.expected_env(), "ORCH_RUN_ID", "ORCH_CELL_ID", MARKER_VAR})
        label_map = labels(self.run_id, self.cell_id, os.getpid())
        run = command_lines(spec, argv, name=name, env_names=names, label_map=label_map)[0]
        return run, record

    def bench_container_record(self) -> Optional[Dict[str, Any]]:
        """Pull the bench's pinned image once (`bench.container`): its record, None for a
        bench on the host; StepFailed as for the server's."""
        doc = (self.bench or {}).get("container")
        if not isinstance(doc, dict):
            return None
        return pull_pinned(doc, engine_env(doc), "bench")[1]

    def bench_container_watch(
        self, record: Dict[str, Any], run: str
    ) -> Tuple[str, str, Optional[str]]:
        """(runtime, name, conf) of the container of bench run `run`."""
        name = "%s-bench-%s" % (container_name(self.run_id, self.cell_id), run)
        return str(record["runtime"]), name, record.get("conf")

    def bench_container_stop(self, watch: Tuple[str, str, Optional[str]]) -> None:
        """Stop a bench run's container by name (gone already when its client ended it)."""
        runtime, name, conf = watch
        engine_output(engine_stop(runtime, name, 5), engine_env({"conf": conf}), 65.0)

    def bench_container_argv(
        self, record: Dict[str, Any], argv: List[str], rdir: str, run: str
    ) -> List[str]:
        """The `run` argv of one bench run (`run`: warmup-N or N) in the pinned image."""
        doc = dict(self.bench["container"], digest=record["digest"])
        name = self.bench_container_watch(record, run)[1]
        names = bench_env_names([*self.expected_env(), MARKER_VAR])
        label_map = labels(self.run_id, self.cell_id, os.getpid())
        return bench_command(
            spec_of(doc), argv, name=name, env_names=names, label_map=label_map, repeat_dir=rdir
        )

    def container_started(self, doc: Dict[str, Any], server_pid: int) -> None:
        """Wait for the container's init, record its pid, and check that the container runs the
        pinned image (by image id: docs/FACTS.md, "Containers"); StepFailed when it does not."""
        runtime, name = str(doc["runtime"]), str(doc["name"])
        env = engine_env(doc)
        GUARD.watch_container(server_pid, runtime, name, doc.get("conf"))
        deadline = time.monotonic() + STARTED_TIMEOUT
        init = 0
        while time.monotonic() < deadline:
            rc, out = engine_output(engine_pid(runtime, name), env, 30.0)
            if rc == 0 and out.isdigit() and int(out) > 0:
                init = int(out)
                break
            if self.proc is not None and self.proc.poll() is not None:
                raise StepFailed(
                    "the container %s exited before it ran (rc %s): see server.log"
                    % (name, self.proc.returncode)
                )
            time.sleep(0.2)
        if not init:
            raise StepFailed("the container %s did not start in %gs" % (name, STARTED_TIMEOUT))
        doc["init_pid"] = init
        rc, ran = engine_output(engine_container_image(runtime, name), env, 30.0)
        doc["running_image_id"] = ran if rc == 0 else None
        if rc != 0 or not same_image_id(ran, str(doc["image_id"])):
            raise StepFailed(
                "the container %s runs image %s, not the pinned %s (%s)"
                % (name, ran if rc == 0 else "?", doc["digest"], doc["image_id"])
            )

    def container_inside_snapshot(self) -> None:
        """Read what the running container holds (Python, its packages, torch's and the
        engine's versions) into `snapshot.image.json` and the container's record; a read that
        fails is recorded with why, never failing the cell. A session's later cells reuse the
        first read: it is the same container."""
        doc = (self.server_doc or {}).get("container")
        if not isinstance(doc, dict):
            return
        if not isinstance(doc.get("inside"), dict):
            doc["inside"] = read_inside(doc, self.inside_python(), self.engine_modules())
            write_json(self.path(SERVER_JSON), self.server_doc)
        write_json(
            self.path(SNAPSHOT_IMAGE),
            {
                "image": doc.get("image"),
                "digest": doc.get("digest"),
                "image_id": doc.get("image_id"),
                "labels": doc.get("labels"),
                "runtime": doc.get("runtime"),
                "runtime_version": doc.get("runtime_version"),
                "inside": doc["inside"],
            },
        )

    def inside_python(self) -> str:
        """The Python inside the image: the server's first argv word that is one (behind a
        wrapper such as `sh -c ... python`, `env` or `numactl`), else python3."""
        argv = [str(a) for a in (self.server or {}).get("argv") or ()]
        for word in argv:
            if os.path.basename(word).startswith("python") and " " not in word:
                return word
        return "python3"

    def engine_modules(self) -> List[str]:
        """The engine's module whose version is read inside (sglang, vllm), if the adapter
        names one."""
        adapter = str((self.server or {}).get("adapter") or "")
        return [adapter] if adapter in ENGINE_MODULES else []

    def container_roots(self) -> List[int]:
        """The container's init pid (its processes' root on the host), if it runs one."""
        doc = (self.server_doc or {}).get("container")
        pid = doc.get("init_pid") if isinstance(doc, dict) else None
        return [int(pid)] if isinstance(pid, int) and pid > 0 else []

    def container_stop(self, grace: float) -> Optional[str]:
        """Stop the server's container by name (SIGTERM, SIGKILL after `grace`); the engine's
        complaint when it could not, None when stopped or already gone."""
        doc = (self.server_doc or {}).get("container")
        if not isinstance(doc, dict):
            return None
        argv = engine_stop(str(doc["runtime"]), str(doc["name"]), int(max(1.0, grace)))
        rc, out = engine_output(argv, engine_env(doc), grace + 60.0)
        if rc != 0 and "no such container" not in out.lower():
            return out
        return None

    def clear_container_orphans(self, detail: Dict[str, Any]) -> None:
        """Stop orch's containers whose runner is dead (listed by label): in the detail."""
        doc = self.container_spec_doc()
        runtime = str((doc or {}).get("runtime") or "")
        if doc is None or runtime not in ENGINES:
            return
        env = engine_env(doc)
        rc, out = engine_output(engine_orphans(runtime), env, 60.0)
        if rc != 0:
            detail["container_orphans_error"] = out
            return
        stopped = []
        for line in out.splitlines():
            words = line.split()
            if len(words) != 3 or not words[2].isdigit():
                continue
            pid = int(words[2])
            if pid == os.getpid() or proc_alive(pid):
                continue
            engine_output(engine_stop(runtime, words[1], 5), env, 120.0)
            stopped.append(words[1])
        if stopped:
            detail["container_orphans"] = stopped


def pull_pinned(
    doc: Dict[str, Any], env: Dict[str, str], owner: str
) -> Tuple[ContainerSpec, Dict[str, Any]]:
    """Pull `owner`'s (server or bench) pinned image: its spec and record (digest, image id,
    labels, the runtime's version, where its tag points now when it moved). StepFailed for a
    runtime that cannot run here, an unpinned image or a failed pull."""
    runtime = str(doc.get("runtime") or "podman")
    if runtime not in ENGINES:
        raise StepFailed(
            "%s.container.runtime %s runs only inside a Slurm job, which orch does not "
            "start for containers yet: use podman or docker here" % (owner, runtime)
        )
    try:
        spec = spec_of(doc)
    except (ContainerSpecError, ValueError) as exc:
        raise StepFailed("%s.container: %s" % (owner, exc)) from exc
    if not spec.image.pinned:
        raise StepFailed("%s.container.image %s was not pinned to a digest" % (owner, doc["image"]))
    pull = [runtime, "pull", "-q"]
    if doc.get("tls_verify") is False and runtime == "podman":
        pull.append("--tls-verify=false")
    rc, out = engine_output([*pull, spec.image.run_ref()], env, PULL_TIMEOUT)
    if rc != 0:
        raise StepFailed("pulling %s failed (rc %d): %s" % (spec.image.run_ref(), rc, out))
    rc, pinned_id = engine_output(engine_image_id(runtime, spec.image.run_ref()), env, 60.0)
    if rc != 0:
        raise StepFailed("cannot read the id of %s: %s" % (spec.image.run_ref(), pinned_id))
    record = {
        "runtime": runtime,
        "conf": doc.get("conf"),
        "image": str(doc["image"]),
        "digest": spec.image.digest,
        "run_ref": spec.image.run_ref(),
        "image_id": pinned_id,
        "runtime_version": runtime_version(runtime, env),
        "labels": image_labels(runtime, spec.image.run_ref(), env),
    }
    moved = tag_now(str(doc["image"]), spec.image.digest, doc)
    if moved:
        record["tag_moved_to"] = moved
    return spec, record


def tag_now(image: str, pinned: str, doc: Dict[str, Any]) -> Optional[str]:
    """The digest `image`'s tag names now when it is no longer the pinned one (the tag moved
    after the plan: the pin still runs, the record says so); None otherwise or unknown."""
    try:
        ref = parse_image(image)
    except ImageRefError:
        return None
    if ref.digest or not ref.tag:
        return None
    conf = str(doc["conf"]) if doc.get("conf") else None
    now, _why, _known = registry_digest(image, doc.get("tls_verify") is not False, conf, 60.0)
    return now if now is not None and now != pinned else None


def container_moved_warning(record: Dict[str, Any]) -> str:
    """What server_start says when the image's tag moved after the plan."""
    return "the tag of %s now names %s; this run keeps the pinned %s" % (
        record["image"],
        record["tag_moved_to"],
        record["digest"],
    )


def read_inside(doc: Dict[str, Any], python: str, modules: List[str]) -> Dict[str, Any]:
    """INSIDE_SCRIPT's answer run in the container `doc` names, or {"error": why}."""
    runtime, name = str(doc["runtime"]), str(doc["name"])
    argv = [runtime, "exec", name, python, "-c", INSIDE_SCRIPT, *modules]
    began = time.monotonic()
    rc, out = engine_output(argv, engine_env(doc), INSIDE_TIMEOUT)
    seconds = round(time.monotonic() - began, 3)
    if rc != 0:
        return {"error": "%s exec %s %s failed (rc %d): %s" % (runtime, name, python, rc, out)}
    try:
        data = json.loads(out.splitlines()[-1]) if out else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return {"error": "the read inside printed no JSON: %s" % out[-300:]}
    data["seconds"] = seconds
    return data


def image_labels(runtime: str, ref: str, env: Dict[str, str]) -> Optional[Dict[str, Any]]:
    """The image's labels as the runtime on the host reads them ({} for none), None when it
    cannot say."""
    rc, out = engine_output(
        [runtime, "image", "inspect", "--format", "{{json .Config.Labels}}", ref], env, 60.0
    )
    if rc != 0:
        return None
    try:
        labels_doc = json.loads(out)
    except ValueError:
        return None
    return labels_doc if isinstance(labels_doc, dict) else {}


def runtime_version(runtime: str, env: Dict[str, str]) -> Optional[str]:
    """The engine's version as it prints it (`podman version`), None when it cannot say."""
    rc, out = engine_output([runtime, "version", "--format", "{{.Client.Version}}"], env, 30.0)
    return out if rc == 0 and out else None

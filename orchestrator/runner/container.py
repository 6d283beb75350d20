"""Command lines that run a server (or a bench) inside a container, one function per runtime.

The same `ContainerSpec` becomes `podman run`/`docker run` on a host, `srun` with pyxis's
`--container-*` flags or `enroot start` under Slurm, or `apptainer exec`. Each function returns
an argv (a list, never a shell string: the caller quotes it once). Environment values never
appear in an argv, where `ps` and the bundle's argv record would show them: the argv names the
variables and the runner sets their values in the environment of the command it starts
(`APPTAINERENV_NAME` for Apptainer with `--cleanenv`). Flags as documented by each runtime:
docs/FACTS.md, "Containers". Stdlib only: the runner ships this module to the hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.runner.image import ImageRef, parse_image

RUNTIMES = ("podman", "docker", "pyxis", "enroot", "apptainer")
ENGINES = ("podman", "docker")  # the runtimes with a daemon-style container: inspect, stop, label
LABEL_PREFIX = "orch."  # every container orch starts carries these labels; preflight reads them


class ContainerSpecError(ValueError):
    """A container setting that the chosen runtime cannot honour; the message says which."""


@dataclass(frozen=True)
class Mount:
    """A bind mount: `source` on the host at `target` inside, read-only unless `writable`."""

    source: str
    target: str
    writable: bool = True

    @classmethod
    def parse(cls, text: str) -> Mount:
        """`SRC:DST[:ro|rw]` (or `SRC` alone, mounted at the same path)."""
        parts = text.split(":")
        if not parts[0] or len(parts) > 3 or any(not p for p in parts):
            raise ContainerSpecError(f"a mount is SRC:DST[:ro|rw], got {text!r}")
        if len(parts) == 3 and parts[2] not in {"ro", "rw"}:
            raise ContainerSpecError(f"a mount's mode is ro or rw, got {parts[2]!r} in {text!r}")
        for path in parts[:2]:
            if not path.startswith("/"):
                raise ContainerSpecError(f"a mount's paths are absolute, got {path!r} in {text!r}")
        target = parts[1] if len(parts) > 1 else parts[0]
        return cls(parts[0], target, writable=not (len(parts) == 3 and parts[2] == "ro"))


@dataclass(frozen=True)
class ContainerSpec:
    """How one server (or bench) runs in a container; validated by `check`.

    `gpus` is `all`, empty (none) or a comma list of device indices. `options` are the three
    the engines need from a daemon runtime: `shm_size` (e.g. `32g`), `ipc` and `network`
    (`host` for NCCL and for a server the runner polls on the host's loopback).
    """

    image: ImageRef
    runtime: str = "podman"
    mounts: tuple[Mount, ...] = ()
    gpus: str = ""
    shm_size: str = ""
    ipc: str = ""
    network: str = ""
    workdir: str = ""
    extra: tuple[str, ...] = field(default=())  # runtime flags passed as written, recorded

    def check(self) -> None:
        """ContainerSpecError for a setting the runtime cannot honour."""
        if self.runtime not in RUNTIMES:
            raise ContainerSpecError(
                f"unknown container runtime {self.runtime!r}; known: {', '.join(RUNTIMES)}"
            )
        indices = self.gpus.split(",")
        if self.gpus not in {"", "all"} and not all(part.isdigit() for part in indices):
            raise ContainerSpecError(
                f"gpus is 'all' or device indices like '0,1', got {self.gpus!r}"
            )
        if self.runtime not in ENGINES:
            daemon_only = [k for k in ("shm_size", "ipc", "network") if getattr(self, k)]
            if daemon_only:
                raise ContainerSpecError(
                    f"{', '.join(daemon_only)}: options of podman and docker; {self.runtime} "
                    "shares the host's IPC and network already"
                )


def labels(run_id: str, cell: str, runner_pid: int) -> dict[str, str]:
    """The labels that tie a container to its runner: preflight finds orphans by them."""
    return {
        f"{LABEL_PREFIX}run": run_id,
        f"{LABEL_PREFIX}cell": cell,
        f"{LABEL_PREFIX}runner-pid": str(runner_pid),
    }


def _gpu_flags(spec: ContainerSpec) -> list[str]:
    if not spec.gpus:
        return []
    if spec.runtime == "podman":
        # Podman reaches NVIDIA GPUs through CDI (nvidia-ctk cdi generate): one device per GPU.
        if spec.gpus == "all":
            return ["--device", "nvidia.com/gpu=all"]
        return [a for i in spec.gpus.split(",") for a in ("--device", f"nvidia.com/gpu={i}")]
    # Docker reads --gpus as CSV: a device list must be one quoted field, '"device=0,1"'.
    return ["--gpus", "all" if spec.gpus == "all" else f'"device={spec.gpus}"']


def engine_run(
    spec: ContainerSpec,
    argv: Sequence[str],
    *,
    name: str,
    env_names: Sequence[str],
    label_map: Mapping[str, str],
) -> list[str]:
    """`podman run`/`docker run` for `argv`, detached from nothing: the runner waits on it.

    `--rm` so a stopped container leaves nothing; `--init` so signals reach the server's
    tree; `--env NAME` takes each value from the runner's environment, never from the argv.
    """
    spec.check()
    if spec.runtime not in ENGINES:
        raise ContainerSpecError(f"{spec.runtime} has no `run`: use its own command line")
    out = [spec.runtime, "run", "--rm", "--init", "--name", name]
    for key, value in sorted(label_map.items()):
        out += ["--label", f"{key}={value}"]
    for mount in spec.mounts:
        mode = "" if mount.writable else ":ro"
        out += ["--volume", f"{mount.source}:{mount.target}{mode}"]
    out += _gpu_flags(spec)
    if spec.shm_size:
        out += ["--shm-size", spec.shm_size]
    if spec.ipc:
        out += ["--ipc", spec.ipc]
    if spec.network:
        out += ["--network", spec.network]
    if spec.workdir:
        out += ["--workdir", spec.workdir]
    for env_name in sorted(env_names):
        out += ["--env", env_name]
    out += list(spec.extra)
    out += [spec.image.run_ref(), *argv]
    return out


def engine_container_image(runtime: str, container: str) -> list[str]:
    """The argv that prints the id of the image a container was created from.

    orch compares ids, not `.ImageDigest`: Podman's names the manifest the image was first
    stored under, which for an image built here and pulled back by its registry digest is
    another manifest of the same image (docs/FACTS.md, "Containers").
    """
    if runtime not in ENGINES:
        raise ContainerSpecError(f"{runtime} has no container to inspect")
    return [runtime, "container", "inspect", "--format", "{{.Image}}", container]


def engine_image_id(runtime: str, image: str) -> list[str]:
    """The argv that prints the id of a local image (`name@sha256:...` once pulled by digest)."""
    if runtime not in ENGINES:
        raise ContainerSpecError(f"{runtime} keeps no local image store orch reads")
    return [runtime, "image", "inspect", "--format", "{{.Id}}", image]


def same_image_id(a: str, b: str) -> bool:
    """True when two printed image ids name one image (Docker prefixes `sha256:`, Podman not)."""
    return bool(a.strip()) and _bare_id(a) == _bare_id(b)


def _bare_id(text: str) -> str:
    text = text.strip()
    return text[len("sha256:") :] if text.startswith("sha256:") else text


def engine_pid(runtime: str, container: str) -> list[str]:
    """The argv that prints the host pid of the container's init: the root of its tree."""
    if runtime not in ENGINES:
        raise ContainerSpecError(f"{runtime} has no container pid to inspect")
    return [runtime, "container", "inspect", "--format", "{{.State.Pid}}", container]


def engine_orphans(runtime: str) -> list[str]:
    """The argv that lists orch's containers with their runner's pid: `ID NAME PID`."""
    if runtime not in ENGINES:
        raise ContainerSpecError(f"{runtime} has no container list")
    fmt = '{{.ID}} {{.Names}} {{index .Labels "' + LABEL_PREFIX + 'runner-pid"}}'
    return [runtime, "ps", "--filter", f"label={LABEL_PREFIX}runner-pid", "--format", fmt]


def engine_stop(runtime: str, container: str, grace_s: int = 10) -> list[str]:
    """The argv that stops a container: SIGTERM, then SIGKILL after `grace_s` seconds."""
    if runtime not in ENGINES:
        raise ContainerSpecError(f"{runtime} has no container to stop")
    return [runtime, "stop", "--time", str(grace_s), container]


def pyxis_flags(spec: ContainerSpec, env_names: Sequence[str]) -> list[str]:
    """srun's pyxis flags (`--container-*`) for the spec: srun's argv goes before the command.

    `--container-env` keeps each named variable's host value over the image's; GPUs follow
    Slurm's own allocation (`--gpus`), so the spec's `gpus` adds nothing here.
    """
    spec.check()
    out = [f"--container-image={spec.image.enroot_ref()}"]
    if spec.mounts:
        parts = [f"{m.source}:{m.target}" + ("" if m.writable else ":ro") for m in spec.mounts]
        out.append("--container-mounts=" + ",".join(parts))
    if spec.workdir:
        out.append(f"--container-workdir={spec.workdir}")
    out.append("--no-container-mount-home")  # the host's home is no part of the pinned stack
    if env_names:
        out.append("--container-env=" + ",".join(sorted(env_names)))
    return out + list(spec.extra)


def enroot_commands(
    spec: ContainerSpec, argv: Sequence[str], *, name: str, image_file: str
) -> list[list[str]]:
    """enroot's three steps: import the pinned image, create a container, start `argv` in it."""
    spec.check()
    start = ["enroot", "start"]
    for mount in spec.mounts:
        start += ["--mount", f"{mount.source}:{mount.target}" + ("" if mount.writable else ":ro")]
    start += list(spec.extra)
    return [
        ["enroot", "import", "--output", image_file, f"docker://{spec.image.enroot_ref()}"],
        ["enroot", "create", "--force", "--name", name, image_file],
        [*start, name, *argv],
    ]


def apptainer_exec(spec: ContainerSpec, argv: Sequence[str]) -> list[str]:
    """`apptainer exec` for `argv`: `--cleanenv` so only the declared variables (set as
    `APPTAINERENV_NAME` in the runner's environment, see `apptainer_env`) reach the server."""
    spec.check()
    out = ["apptainer", "exec", "--cleanenv"]
    if spec.gpus:
        out.append("--nv")
    for mount in spec.mounts:
        out += ["--bind", f"{mount.source}:{mount.target}" + ("" if mount.writable else ":ro")]
    if spec.workdir:
        out += ["--pwd", spec.workdir]
    out += list(spec.extra)
    return [*out, f"docker://{spec.image.run_ref()}", *argv]


def apptainer_env(env: Mapping[str, str]) -> dict[str, str]:
    """The runner-side environment that passes `env` through `--cleanenv`."""
    return {f"APPTAINERENV_{key}": value for key, value in env.items()}


def spec_of(doc: Mapping[str, Any]) -> ContainerSpec:
    """The ContainerSpec of a cell's `server.container` (its JSON), pinned when it has a digest.

    The registry's plain-http switch (`tls_verify: false`) becomes podman's own flag; the
    playbook's `flags` follow it as written.
    """
    image = parse_image(str(doc["image"]))
    digest = doc.get("digest")
    if digest and not image.digest:
        image = image.with_digest(str(digest))
    runtime = str(doc.get("runtime") or "podman")
    extra = list(doc.get("flags") or ())
    if doc.get("tls_verify") is False and runtime == "podman":
        extra.insert(0, "--tls-verify=false")
    spec = ContainerSpec(
        image=image,
        runtime=runtime,
        mounts=tuple(Mount.parse(str(m)) for m in doc.get("mounts") or ()),
        gpus=str(doc.get("gpus") or ""),
        shm_size=str(doc.get("shm_size") or ""),
        ipc=str(doc.get("ipc") or ""),
        network=str(doc.get("network") or ""),
        workdir=str(doc.get("workdir") or ""),
        extra=tuple(str(f) for f in extra),
    )
    spec.check()
    return spec


def command_lines(
    spec: ContainerSpec,
    argv: Sequence[str],
    *,
    name: str,
    env_names: Sequence[str],
    label_map: Mapping[str, str],
) -> list[list[str]]:
    """Every command that runs `argv` in the spec's runtime, in order (enroot needs three)."""
    if spec.runtime in ENGINES:
        return [engine_run(spec, argv, name=name, env_names=env_names, label_map=label_map)]
    if spec.runtime == "pyxis":
        return [["srun", *pyxis_flags(spec, env_names), *argv]]
    if spec.runtime == "enroot":
        return enroot_commands(spec, argv, name=name, image_file=f"{name}.sqsh")
    return [apptainer_exec(spec, argv)]


# What a bench run's container gets by name besides the playbook's env (runner/bench.py sets them)
BENCH_ENV = ("ORCH_RUN_ID", "ORCH_CELL_ID", "ORCH_REPEAT_KIND", "ORCH_REPEAT", "ORCH_BENCH_SEED")


def bench_env_names(declared: Sequence[str]) -> list[str]:
    """The variables passed by name into a bench run's container: the declared env and orch's."""
    return sorted({*declared, *BENCH_ENV})


def bench_command(
    spec: ContainerSpec,
    argv: Sequence[str],
    *,
    name: str,
    env_names: Sequence[str],
    label_map: Mapping[str, str],
    repeat_dir: str,
) -> list[str]:
    """`podman run`/`docker run` of one bench run: the repeat's folder mounted writable at its
    own path and the working directory, so the client writes its results where the runner
    reads them."""
    mounts = (*spec.mounts, Mount(repeat_dir, repeat_dir))
    inside = replace(spec, mounts=mounts, workdir=repeat_dir)
    return engine_run(inside, argv, name=name, env_names=env_names, label_map=label_map)


def container_name(run_id: str, cell_id: str) -> str:
    """The name of a cell's server container: unique per run and cell, valid for every engine."""
    text = f"orch-{run_id}-{cell_id}"
    return "".join(c if c.isalnum() or c in "_.-" else "-" for c in text)[:200]

"""The image a cell's server runs in, as the Cell carries it (`server.container`): the
reference as written and the digest a run pins it to. Beside cell.py, whose id rules it keeps:
the id hashes the reference, never the pin."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class ContainerPin(BaseModel):
    """The image a server runs in (`server.container`), pinned to a registry digest.

    `image` is the reference as written; `digest` is what the run pins it to (execute/images.py
    resolves a tag on the host at plan time). The cell id hashes the reference as written (as a
    repo pin hashes its requested ref); the server's session identity hashes the digest.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str  # [REGISTRY/]REPOSITORY[:TAG][@sha256:HEX], as written
    runtime: Literal["podman", "docker", "pyxis", "enroot", "apptainer"] = "podman"
    mounts: tuple[str, ...] = ()  # SRC:DST[:ro|rw]
    gpus: str = ""  # "", "all" or device indices "0,1"
    shm_size: str = ""
    ipc: str = ""
    network: str = ""
    workdir: str = ""
    flags: tuple[str, ...] = ()  # runtime flags passed as written (before the image)
    conf: str | None = None  # a containers.conf for podman (CONTAINERS_CONF)
    tls_verify: bool = True  # false: an http registry (podman, skopeo --tls-verify=false)
    digest: str | None = None  # sha256:..., once pinned
    resolved_at: float | None = None  # epoch seconds
    resolved_by: str | None = None  # "host NAME", or "reference" when written with a digest

    @model_serializer(mode="wrap")
    def _without_unset_pin(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Unpinned as planned: the planner's cached JSON (which the id hashes) has no pin.
        data = handler(self)
        if isinstance(data, dict):
            for key in CONTAINER_NOT_HASHED:
                if data.get(key) is None:
                    data.pop(key, None)
        return data


# Not in a cell id: the digest a run pinned the reference to, and when and where it was asked.
CONTAINER_NOT_HASHED = ("digest", "resolved_at", "resolved_by")


def without_container_pin(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """`spec` with its server's and bench's container pins left out (what the cell id hashes)."""
    for owner in ("server", "bench"):
        section = spec.get(owner)
        container = section.get("container") if isinstance(section, Mapping) else None
        if not isinstance(section, Mapping) or not isinstance(container, Mapping):
            continue
        kept = {k: v for k, v in container.items() if k not in CONTAINER_NOT_HASHED}
        spec = {**spec, owner: {**section, "container": kept}}
    return spec

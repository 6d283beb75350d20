"""The playbook model: the sections users write and the keys each one knows.

`PlaybookModel` validates a loaded file; the planner validates each rendered section with the
same section model, so the schema is written once.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from orchestrator.config.fields import FieldProblem, is_number
from orchestrator.config.fieldtypes import (
    TArgs,
    TBenchAdapter,
    TBool,
    TCache,
    TCommand,
    TContainerGpus,
    TContainerRuntime,
    TCount,
    TDirty,
    TEnv,
    TExtends,
    TFetch,
    TGpusBusy,
    THttpStatus,
    TImage,
    TLauncher,
    TMatrix,
    TMetrics,
    TMetricsEngine,
    TMounts,
    TName,
    TNonNegative,
    TNumber,
    TPort,
    TPositive,
    TPositiveCount,
    TRef,
    TRegex,
    TRepeats,
    TRestart,
    TSearch,
    TServerAdapter,
    TStr,
    TStrategy,
    TStrList,
    TTolerance,
    TVars,
    TVerifyEnv,
)
from orchestrator.config.values import describe, is_template, shown, suggest
from orchestrator.runner.prompts import ACCURACY_MAX, FINGERPRINT_PROMPTS

# --------------------------------------------------------------------------------------------
# The model


class _Section(BaseModel):
    """A mapping with a fixed set of keys: an unknown key is an error naming the closest one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise FieldProblem(f"expected a mapping, got {describe(value)}")
        known = list(cls.model_fields)
        for key in value:
            if key not in known:
                hint = _elsewhere_hint(str(key), cls) or suggest(str(key), known)
                if hint is None:
                    hint = "known keys: " + ", ".join(known)
                raise FieldProblem(
                    f"unknown key {shown(key)}", sub_path=(key,), hint=hint, at_key=True
                )
        return value


class RepoSection(_Section):
    """The serving repo to pin: cloned/fetched, checked out, verified as a full SHA."""

    url: TStr
    dest: TStr
    version: TRef
    setup: TStr | None = None
    dirty: TDirty = "refuse"
    setup_timeout: TPositive = 3600.0
    fetch: TFetch = "always"


class ReadySection(_Section):
    """Readiness: an HTTP check (`url`, or `path` on the server's host:port) and/or a log regex."""

    url: TStr | None = None
    path: TStr | None = None
    status: THttpStatus = 200
    log: TRegex | None = None
    timeout: TPositive = 600.0
    interval: TPositive = 0.5
    generate: TBool | None = None  # then one 1-token completion must succeed (vllm: default)
    from_nodes: TBool | None = None  # multi-node: every node asks the URL too (runner/node.py)

    @model_validator(mode="after")
    def _url_or_path(self) -> ReadySection:
        if self.url is not None and self.path is not None:
            raise FieldProblem("give either url or path, not both", sub_path=("path",), at_key=True)
        return self


class CaptureSection(_Section):
    """A JSON document fetched after readiness and after every repeat."""

    name: TName
    urls: TStrList


class ContainerSection(_Section):
    """The image the server runs in, pinned to its registry digest for the run: `runtime`
    podman or docker here, pyxis/enroot/apptainer rendered for Slurm (runner/container.py)."""

    image: TImage
    runtime: TContainerRuntime = "podman"
    mounts: TMounts | None = None
    gpus: TContainerGpus | None = None
    shm_size: TStr | None = None
    ipc: TStr | None = None
    network: TStr | None = None
    workdir: TStr | None = None
    flags: TStrList | None = None  # runtime flags passed as written, before the image
    conf: TStr | None = None  # podman: a containers.conf (CONTAINERS_CONF) for this host
    tls_verify: TBool = True  # false: the registry speaks plain http (a loopback one)

    @model_validator(mode="after")
    def _options_fit_runtime(self) -> ContainerSection:
        if self.tls_verify is False and self.runtime != "podman" and not is_template(self.runtime):
            raise FieldProblem(
                f"tls_verify: false is podman's; {self.runtime} reads insecure registries from "
                "its own configuration",
                sub_path=("tls_verify",),
                at_key=True,
            )
        if is_template(self.runtime) or self.runtime in ("podman", "docker"):
            return self
        for key in ("shm_size", "ipc", "network", "conf"):
            if getattr(self, key) is not None:
                raise FieldProblem(
                    f"{key} is an option of podman and docker, not {self.runtime}",
                    sub_path=(key,),
                    at_key=True,
                    hint=f"{self.runtime} shares the host's IPC and network already",
                )
        return self


def _check_command(section: ServerSection | BenchSection, generic: bool, kind: str) -> None:
    if is_template(section.adapter):
        return
    if generic and section.command is None:
        raise FieldProblem(
            f"a generic {kind} needs 'command'", hint="give command: [argv...] or pick an adapter"
        )
    if not generic and section.command is not None:
        raise FieldProblem(
            f"'command' is for the generic adapter, not {section.adapter!r}",
            sub_path=("command",),
            at_key=True,
            hint="use launcher: to replace how the adapter starts it, args: for flags",
        )


def _or_boolean(schema: dict[str, Any]) -> None:
    """The section's JSON Schema also accepts `true`/`false` (editors must not flag them)."""
    mapping = dict(schema)
    schema.clear()
    schema["anyOf"] = [mapping, {"type": "boolean"}]


class ServerSection(_Section):
    """The server under test."""

    adapter: TServerAdapter = "generic"
    command: TCommand | None = None
    launcher: TLauncher | None = None
    python: TStr | None = None
    args: TArgs | None = None
    host: TStr | None = None
    port: TPort | None = None
    cwd: TStr | None = None
    ready: ReadySection | None = None
    captures: list[CaptureSection] | None = None
    stop_grace: TNonNegative | None = None
    verify_env: TVerifyEnv = "strict"
    restart: TRestart = "per_config"
    between: TCommand | None = None
    nodes: TPositiveCount = 1  # hosts one server spans (plan/nodes.py)
    dist_port: TPort | None = None  # the head's port for the nodes to join (head_port)
    container: ContainerSection | None = None  # the image the server runs in

    @model_validator(mode="after")
    def _command_fits_adapter(self) -> ServerSection:
        _check_command(self, self.adapter == "generic", "server")
        return self


class AccuracySection(_Section):
    """`bench.accuracy`: the bundled arithmetic task (`prompts` questions) scored by exact
    match after the measured repeats (`accuracy: true`, or the options)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_or_boolean)
    enabled: TBool = True
    prompts: TPositiveCount = 32  # the first N of the bundled set (runner/prompts.py)
    max_tokens: TPositiveCount = 16
    url: TStr | None = None  # the server's base URL; default: where its readiness check asks
    timeout: TPositive = 60.0  # seconds per request

    @model_validator(mode="before")
    @classmethod
    def _on_or_off(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _bundled(self) -> AccuracySection:
        most = len(FINGERPRINT_PROMPTS) if isinstance(self, FingerprintSection) else ACCURACY_MAX
        if isinstance(self.prompts, int) and self.prompts > most:
            raise FieldProblem(
                f"prompts {self.prompts} is more than the {most} bundled",
                sub_path=("prompts",),
                hint=f"at most {most}",
            )
        return self


class FingerprintSection(AccuracySection):
    """`bench.fingerprint`: the greedy outputs of the bundled prompts, each hashed, after the
    measured repeats; `passes: 2` takes them twice from the one server (equal, or said)."""

    passes: TPositiveCount = 1


class BenchSection(_Section):
    """The benchmark client, run warmup + repeats times."""

    adapter: TBenchAdapter = "generic"
    command: TCommand | None = None
    launcher: TLauncher | None = None
    python: TStr | None = None
    args: TArgs | None = None
    warmup: TCount = 0
    repeats: TRepeats = 1
    # server starts the repeats are spread over (the server restarted between groups): the
    # start is the unit of replication (analyze/replication.py)
    starts: TPositiveCount = 1
    timeout: TPositive = 3600.0
    result_file: TStr | None = None
    metrics: TMetrics | None = None
    # fresh: each run sends prompts of its own; warm: the same each run (a warm prefix cache)
    cache: TCache = "fresh"
    fingerprint: FingerprintSection | None = None
    accuracy: AccuracySection | None = None
    # an SLO search along a matrix axis: its highest level whose SLO holds (config/slo.py)
    search: TSearch | None = None
    container: ContainerSection | None = None  # the image the bench client runs in

    @model_validator(mode="after")
    def _command_fits_adapter(self) -> BenchSection:
        _check_command(self, self.adapter == "generic", "bench")
        return self


class ExpectSection(_Section):
    """Bounds for one metric: min/max, or ref with a tolerance ('5%' or 0.05)."""

    min: TNumber | None = None
    max: TNumber | None = None
    ref: TNumber | None = None
    tolerance: TTolerance | None = None
    equal: TStr | None = None  # `fingerprint: {equal: DIGEST}`: the greedy outputs' digest

    @model_validator(mode="after")
    def _bounds(self) -> ExpectSection:
        if self.equal is not None:
            if self.min is not None or self.max is not None or self.ref is not None:
                raise FieldProblem("equal stands alone (no min, max or ref beside it)")
            return self
        if self.tolerance is not None and self.ref is None:
            raise FieldProblem("tolerance needs ref", sub_path=("tolerance",), at_key=True)
        if self.min is None and self.max is None and self.ref is None:
            raise FieldProblem("give min, max, or ref with tolerance (equal: for fingerprint)")
        if self.ref is not None and self.tolerance is None:
            raise FieldProblem(
                "ref needs a tolerance", sub_path=("ref",), at_key=True, hint="e.g. tolerance: '5%'"
            )
        low: Any = self.min
        high: Any = self.max
        if is_number(low) and is_number(high) and low > high:
            raise FieldProblem(f"min {low} is above max {high}", sub_path=("min",))
        return self


class SnapshotSection(_Section):
    """What the host snapshot records besides the defaults."""

    pip_freeze: TBool = True
    topo: TBool = True


class TelemetrySection(_Section):
    """GPU sampling while a cell runs (`telemetry: false` turns it off); not in the cell id."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_or_boolean)
    enabled: TBool = True
    interval: TPositive = 1.0
    fields: TStrList | None = None

    @model_validator(mode="before")
    @classmethod
    def _on_or_off(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value


class ProfileSection(_Section):
    """A short profile of the server after the measured repeats, through the engine's own
    profiler endpoints (`profile: true`, or the options); not in the cell id."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_or_boolean)
    enabled: TBool = True
    num_steps: TPositiveCount = 20
    activities: TStrList | None = None
    wait: TPositive = 30.0

    @model_validator(mode="before")
    @classmethod
    def _on_or_off(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value


class EngineMetricsSection(_Section):
    """The serving engine's Prometheus /metrics scraped during each measured repeat (on by
    default where the server adapter knows its engine's families; `engine_metrics: false`
    turns it off); not in the cell id."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_or_boolean)
    enabled: TBool = True
    path: TStr = "/metrics"
    interval: TPositive = 1.0
    engine: TMetricsEngine | None = None  # a generic server's engine: whose families to read

    @model_validator(mode="before")
    @classmethod
    def _on_or_off(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value


class TrackSection(_Section):
    """`orch apply` compares each run with its history (`track: true`, or the metric); as
    `--track`, which wins over it."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_or_boolean)
    enabled: TBool = True
    metric: TStr = "output_throughput"

    @model_validator(mode="before")
    @classmethod
    def _on_or_off(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value


class PreflightSection(_Section):
    """What the runner checks before a server starts (not in the cell id): GPUs already busy
    with other processes or memory refuse the cell, or only warn."""

    gpus_busy: TGpusBusy = "refuse"


class TimeoutsSection(_Section):
    """Seconds before a cell, the repo setup, readiness or one bench run is given up."""

    cell: TPositive | None = None
    setup: TPositive | None = None
    ready: TPositive | None = None
    bench: TPositive | None = None


class PlaybookModel(_Section):
    """A playbook as users write it (see docs/ARCHITECTURE.md, "The playbook")."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        title="orch playbook",
        json_schema_extra={"$id": "orch-playbook"},
    )

    name: TName
    hosts: TStr = "all"
    strategy: TStrategy = "each"
    extends: TExtends | None = None
    vars: TVars | None = None
    vars_files: TStrList | None = None
    secrets: TStrList | None = None
    matrix: TMatrix | None = None
    repo: RepoSection | None = None
    env: TEnv | None = None
    server: ServerSection | None = None
    bench: BenchSection
    expect: dict[str, ExpectSection] | None = None
    snapshot: SnapshotSection | None = None
    telemetry: TelemetrySection | None = None
    preflight: PreflightSection | None = None
    profile: ProfileSection | None = None
    engine_metrics: EngineMetricsSection | None = None
    track: TrackSection | None = None
    timeouts: TimeoutsSection | None = None


_SECTIONS: dict[str, type[_Section]] = {
    "repo": RepoSection,
    "server": ServerSection,
    "container": ContainerSection,
    "bench": BenchSection,
    "snapshot": SnapshotSection,
    "telemetry": TelemetrySection,
    "preflight": PreflightSection,
    "profile": ProfileSection,
    "engine_metrics": EngineMetricsSection,
    "track": TrackSection,
    "timeouts": TimeoutsSection,
}


def _elsewhere_hint(key: str, model: type[_Section]) -> str | None:
    """`'warmup' belongs under 'bench:'` when a key sits at the wrong level."""
    homes = [name for name, section in _SECTIONS.items() if key in section.model_fields]
    if model is PlaybookModel and homes:
        return f"{key!r} belongs under " + " or ".join(f"'{h}:'" for h in homes)
    if model is not PlaybookModel and key in PlaybookModel.model_fields:
        return f"{key!r} is a top-level key"
    return None


def playbook_json_schema() -> dict[str, Any]:
    """The JSON Schema of the playbook, for editors (`orch schema`)."""
    schema = PlaybookModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema

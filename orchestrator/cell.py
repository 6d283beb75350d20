"""A Cell: one matrix point on one host, fully rendered (no templates left).

The Cell is the contract between planning and execution: the controller sends it as JSON to
the runner on the host, the bundle stores it, and `orch diff` pairs cells across runs by `id`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from orchestrator.cell_ids import (
    SECRET_SLUG as SECRET_SLUG,
)
from orchestrator.cell_ids import (
    axis_slugs as axis_slugs,
)
from orchestrator.cell_ids import (
    canonical_json as canonical_json,
)
from orchestrator.cell_ids import (
    cell_id as cell_id,
)
from orchestrator.cell_ids import (
    cell_id_text as cell_id_text,
)
from orchestrator.cell_ids import (
    entries_text as entries_text,
)
from orchestrator.cell_ids import (
    id_from_text as id_from_text,
)
from orchestrator.cell_ids import (
    keyed_text as keyed_text,
)
from orchestrator.cell_ids import (
    repo_id_data as repo_id_data,
)
from orchestrator.cell_ids import (
    slug_part as slug_part,
)
from orchestrator.cell_ids import (
    spec_id_text as spec_id_text,
)
from orchestrator.container_pin import ContainerPin

CELL_SCHEMA_VERSION = 1
DEFAULT_CELL_TIMEOUT = 4 * 3600.0  # seconds, when the playbook gives no timeouts.cell


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RepoPin(_Frozen):
    """The serving repo, pinned: the runner checks it out and verifies HEAD as a full SHA."""

    url: str
    dest: str  # absolute, or relative to the host's $HOME
    version: str  # the requested ref (branch, tag, short or full SHA)
    setup: str | None = None  # shell command run in dest once per (commit, setup)
    dirty: Literal["refuse", "reset", "record"] = "refuse"
    setup_timeout: float = 3600.0
    # always: a branch or tag is the origin's now; never: the clone's refs, nothing fetched.
    fetch: Literal["always", "never"] = "always"
    # Set when the run pinned `version` to the commit a symbolic ref named (execute/refs.py):
    requested: str | None = None  # the ref as written (the id hashes it, not the SHA)
    resolved_at: float | None = None  # epoch seconds
    resolved_by: str | None = None  # "controller" or "host NAME"


class ReadyCheck(_Frozen):
    """How the runner decides the server is up: an HTTP status, a log regex, or both."""

    url: str | None = None  # full URL, e.g. http://127.0.0.1:30000/health_generate
    status: int = 200
    log: str | None = None  # regex searched in server.log
    timeout: float = 600.0
    interval: float = 0.5
    # After the checks above: POST this JSON to `generate_url` and want a 200 with `choices`
    # (one 1-token completion), since /health answers before an engine has generated anything.
    generate_url: str | None = None
    generate_body: dict[str, Any] | None = None
    # A multi-node cell's other nodes ask `url` too (as they reach the head), once the head
    # said it is ready: the network path checked (runner/node.py).
    from_nodes: bool = False

    @model_serializer(mode="wrap")
    def _without_generate(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Left out when off: the ids of cells that do not use them are what they were before.
        data = handler(self)
        if isinstance(data, dict) and data.get("generate_url") is None:
            data.pop("generate_url", None)
            data.pop("generate_body", None)
        if isinstance(data, dict) and not data.get("from_nodes"):
            data.pop("from_nodes", None)
        return data


class Capture(_Frozen):
    """A JSON document fetched from the server after readiness and after each repeat."""

    name: str  # file stem in the cell dir: captures/<name>.<moment>.json
    urls: tuple[str, ...]  # full URLs tried in order; the first 200 wins


class ServerSpec(_Frozen):
    """A long-running server started in its own process group with exactly `Cell.env` on top."""

    adapter: str = "generic"
    argv: tuple[str, ...]
    cwd: str | None = None  # default: the repo dest when there is a repo, else the cell dir
    port: int | None = None  # checked free before start and after stop
    ready: ReadyCheck = Field(default_factory=ReadyCheck)
    captures: tuple[Capture, ...] = ()
    stop_grace: float = 15.0
    verify_env: Literal["strict", "warn", "off"] = "strict"
    args: dict[str, Any] = Field(default_factory=dict)  # the flag mapping the argv came from
    # Server sessions: `per_config` shares one start among cells of equal server identity on a
    # host; `per_cell` starts and stops the server for every cell. `between` runs between cells.
    restart: Literal["per_config", "per_cell"] = "per_config"
    between: tuple[str, ...] | None = None
    # Variables the adapter puts in the server's environment unless `env:` names them (e.g.
    # SPT_NOENV=1, so re-titled workers keep a readable /proc/PID/environ); verified like `env`.
    env_defaults: dict[str, str] = Field(default_factory=dict)
    container: ContainerPin | None = None  # the image the server runs in (runner/container.py)

    @model_serializer(mode="wrap")
    def _without_session_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Left out at their defaults: the JSON (and so every cell id) of a playbook that does
        # not use them is what it was before they existed.
        data = handler(self)
        if isinstance(data, dict):
            if data.get("restart") == "per_config":
                data.pop("restart")
            if data.get("between") is None:
                data.pop("between", None)
            if not data.get("env_defaults"):
                data.pop("env_defaults", None)
            if data.get("container") is None:
                data.pop("container", None)
        return data


class Watch(_Frozen):
    """Where the runner reads a deciding metric in a measured repeat's folder, between repeats
    (runner/repeat_rule.py): a JSON object's key, a JSON-lines file's last line's, or a regex."""

    metric: str
    file: str  # relative to the repeat's folder
    format: Literal["json", "jsonl", "regex"]
    key: str | None = None  # json, jsonl
    pattern: str | None = None  # regex: group 1 when it has one


class Between(_Frozen):
    """Bisect's stop: the commit's mean is `good` or `bad` (its ends, in the runner's units),
    repeats normal with standard deviation `noise`; each wrong call at most about `error`."""

    good: float
    bad: float
    noise: float
    error: float


class Against(_Frozen):
    """`orch audit --rerun`'s stop: the rerun against the recorded repeats (`reference`, per
    metric, in the runner's units), higher / lower by `tolerance` or the same, each wrong call
    at most about `error` (runner/compare_rule.py)."""

    reference: dict[str, tuple[float, ...]]
    tolerance: float
    error: float
    noise_z: float
    start_noise: float = 0.0  # sd (log scale) of a server start's offset, where it is known


class RepeatRule(_Frozen):
    """`repeats: {min, max, until}`: after `min` measured repeats, stop once every deciding
    metric's median is known to within `until` (relative) at `confidence`; `max` is
    `BenchSpec.repeats`. Bisect's steps set `between` instead, audit's reruns `against`, or none
    to only record the values as the runner read them."""

    min: int
    until: float | None = None
    confidence: float = 0.9
    between: Between | None = None
    against: Against | None = None
    metrics: tuple[str, ...]
    watch: tuple[Watch, ...]
    chosen: Literal["metric", "expect", "headline", "slo"] = "headline"  # what chose the metrics
    # an SLO search's level: metric -> {max: X} or {min: X}, stopped once decided (slo_rule.py)
    slo: dict[str, dict[str, float]] | None = None

    @model_serializer(mode="wrap")
    def _without_audit_rule(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Left out when unset: the ids of cells that settle stay what they were before audit's.
        data = handler(self)
        if isinstance(data, dict):
            for key in ("against", "slo"):
                if data.get(key) is None:
                    data.pop(key, None)
        return data


class SloSearch(_Frozen):
    """`bench.search`: this cell is one level of a search along matrix axis `axis` for its
    highest value whose SLO holds (`slo`: metric -> {max: X} or {min: X}), each call at
    one-sided `confidence` (analyze/slo.py)."""

    axis: str
    slo: dict[str, dict[str, float]]
    confidence: float = 0.95


class RunInputs(_Frozen):
    """What the runner adds to each bench run's argv so that every run sends new prompts
    (`bench.cache: fresh`): the client's seed flag with a seed derived per run
    (`runner/bench.py` `derive_seed`), and flags added as they are (SGLang's `--flush-cache`).
    Not in the cell id: the seed is derived from the workload, not a part of it."""

    seed_flag: str | None = None  # e.g. "--seed"; None: the playbook pinned the seed
    flags: tuple[str, ...] = ()
    # What the seeds are derived from: the bench's adapter and args, not where the server
    # listens (`adapters/base.py` `workload_key`); empty: the bench argv.
    seed_key: str = ""


class OutputsSpec(_Frozen):
    """`bench.fingerprint` or `bench.accuracy` as the runner asks them (runner/outputs.py):
    the first `prompts` of the bundled set at temperature 0, after the measured repeats."""

    url: str  # the server's base URL (scheme://host:port)
    prompts: int = 32
    max_tokens: int = 16
    timeout: float = 60.0  # seconds per request
    passes: int = 1  # fingerprint: taken this many times from the one server


class BenchSpec(_Frozen):
    """A benchmark client run `warmup` + `repeats` times, each in its own directory as cwd;
    with `settle`, `repeats` is the most it runs."""

    adapter: str = "generic"
    argv: tuple[str, ...]
    warmup: int = 0
    repeats: int = 1
    timeout: float = 3600.0  # per run
    result_file: str | None = None  # relative to the repeat dir, written by the client
    metrics: dict[str, str] = Field(default_factory=dict)  # generic: name -> regex on stdout
    args: dict[str, Any] = Field(default_factory=dict)
    settle: RepeatRule | None = None
    starts: int = 1  # server starts the measured repeats are spread over (restarts between)
    # fresh: every run sends prompts of its own (Cell.run_inputs); warm: the same prompts each
    # run, so the engine's prefix cache serves repeats from what the runs before left in it.
    cache: Literal["fresh", "warm"] = "fresh"
    fingerprint: OutputsSpec | None = None  # greedy outputs hashed per prompt (outputs.json)
    accuracy: OutputsSpec | None = None  # the bundled arithmetic task (outputs.json)
    search: SloSearch | None = None  # an SLO search's level (`bench.search`)
    container: ContainerPin | None = None  # the image the client runs in (podman/docker)

    @model_serializer(mode="wrap")
    def _without_fixed_repeats(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A fixed count leaves `settle` out, so the ids of playbooks that do not use it stay;
        # so does the default `cache: fresh`.
        data = handler(self)
        if isinstance(data, dict):
            if data.get("settle") is None:
                data.pop("settle", None)
            if data.get("starts") == 1:
                data.pop("starts", None)  # one start, as every cell before `starts:`: ids stay
            if data.get("cache") == "fresh":
                data.pop("cache", None)
            for key in ("fingerprint", "accuracy"):  # off: ids stay what they were
                if data.get(key) is None:
                    data.pop(key, None)
            if data.get("search") is None:
                data.pop("search", None)  # ids of cells outside a search stay
            if data.get("container") is None:
                data.pop("container", None)
        return data


class Expectation(_Frozen):
    """Bounds for one metric: min/max, or a reference with a relative tolerance (0.05 = 5%)."""

    min: float | None = None
    max: float | None = None
    ref: float | None = None
    tolerance: float | None = None
    equal: str | None = None  # a recorded value such as the outputs' fingerprint digest

    @model_serializer(mode="wrap")
    def _without_equal(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)  # left out when unused: the ids of existing playbooks stay
        if isinstance(data, dict) and data.get("equal") is None:
            data.pop("equal", None)
        return data


class SnapshotSpec(_Frozen):
    """What the host snapshots record besides the defaults (observation only: not in the id)."""

    pip_freeze: bool = True
    topo: bool = True


class TelemetrySpec(_Frozen):
    """GPU sampling while the cell runs (observation only: not in the id); `enabled: false`
    turns it off."""

    enabled: bool = True
    interval: float = 1.0  # seconds between samples
    fields: tuple[str, ...] | None = None  # nvidia-smi --query-gpu names; None: the runner's


class EngineMetricsSpec(_Frozen):
    """The engine's Prometheus /metrics scraped during each measured repeat (observation only:
    not in the id); `families` are the ones kept, named by `engine`'s adapter."""

    url: str
    engine: str | None = None  # whose family names (vllm, sglang); None: kept whole, no summary
    interval: float = 1.0  # seconds between scrapes
    families: tuple[str, ...] = ()  # empty: every family kept


class ProfileSpec(_Frozen):
    """A short profile of the server after the measured repeats (observation only: one extra,
    unmeasured bench run, so not in the id): the engine's own start/stop endpoints, its traces
    into the cell's profile/ folder, summarized as time per phase per decode step."""

    start_url: str  # POSTed with {"output_dir", "num_steps", "activities"} (SGLang's body)
    stop_url: str | None = None  # POSTed after the profiled run, unless the steps ran out
    num_steps: int = 20  # decode steps the engine records
    activities: tuple[str, ...] = ("CPU", "GPU")
    wait: float = 30.0  # seconds to wait for the trace files after the run


class PreflightSpec(_Frozen):
    """What the runner's preflight tolerates (a policy, not the measurement: not in the id)."""

    gpus_busy: Literal["refuse", "warn"] = "refuse"  # foreign GPU processes or memory in use


class NodePart(_Frozen):
    """One more node of a server that spans several hosts (`server.nodes`): its own part of the
    server, rendered with that node's variables (`node_rank`...), started by its own runner."""

    host: str  # inventory hostname
    address: str  # as the other nodes reach it (ansible_host)
    rank: int  # 1.. (the head, rank 0, is the cell's own host and server)
    head_address: str  # the head as this node reaches it (`head_host`)
    head_port: int | None = None  # where it joins the head (`head_port`), checked free there
    repo: RepoPin | None = None
    env: dict[str, str] = Field(default_factory=dict)
    server: ServerSpec | None = None


class NodeRole(_Frozen):
    """Set on the cell a node's runner gets for its part (never on a planned cell): which
    cell's server it is a part of, and how it knows the head is up."""

    of: str  # the multi-node cell's id
    rank: int
    head: str  # the head's inventory hostname
    head_url: str | None = None  # the head's readiness URL, as this node reaches it
    head_status: int = 200


class Cell(_Frozen):
    """One matrix point on one host (or, with `nodes`, a head host and more), fully rendered."""

    schema_version: int = CELL_SCHEMA_VERSION
    id: str
    playbook: str  # the playbook's name
    host: str  # inventory hostname
    axes: dict[str, Any]  # axis name -> the value as declared in the matrix
    repo: RepoPin | None = None
    env: dict[str, str] = Field(default_factory=dict)  # merged, stringified; verified in the server
    secrets: tuple[str, ...] = ()  # env/var names whose values must never reach a bundle
    server: ServerSpec | None = None
    bench: BenchSpec
    expect: dict[str, Expectation] = Field(default_factory=dict)
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    snapshot: SnapshotSpec = Field(default_factory=SnapshotSpec)
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    preflight: PreflightSpec = Field(default_factory=PreflightSpec)
    profile: ProfileSpec | None = None  # `profile:` on and the server adapter can profile
    engine_metrics: EngineMetricsSpec | None = None  # the server's /metrics per repeat
    # A server over several hosts: the other nodes, by rank; `host` is the head (rank 0).
    nodes: tuple[NodePart, ...] = ()
    node: NodeRole | None = None  # only on a node's part, as sent to that node's runner
    run_inputs: RunInputs | None = None  # what each bench run adds to its argv (not in the id)

    @model_serializer(mode="wrap")
    def _without_single_node_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Left out when unused: a one-node cell's JSON (and so its id) is what it was before.
        data = handler(self)
        if isinstance(data, dict):
            if not data.get("nodes"):
                data.pop("nodes", None)
            if data.get("node") is None:
                data.pop("node", None)
            if data.get("profile") is None:
                data.pop("profile", None)
            if data.get("engine_metrics") is None:
                data.pop("engine_metrics", None)
            if data.get("run_inputs") is None:
                data.pop("run_inputs", None)
        return data

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host the cell's server runs on, head first."""
        return (self.host, *(n.host for n in self.nodes))


def part_id(cell_id: str, rank: int) -> str:
    """The id of node `rank`'s part of a multi-node cell (its folder and lock on that host)."""
    return f"{cell_id}.n{rank}"

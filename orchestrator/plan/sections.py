"""One point's playbook sections, rendered and checked by the model that checked the file.

Each section is rendered, then validated with its own field of `PlaybookModel` (or of
`ServerSection`/`BenchSection`) in rendered mode (`config.validation.validate_rendered`), so the
keys, names and value rules are those of the schema, written once. What is left here is what
rendering adds: `env` values become text (bools as `true`/`false`, numbers with `str()`),
`args` items merge in order, the adapters build the ServerSpec/BenchSpec, and `timeouts.setup`,
`timeouts.ready` and `timeouts.bench` are defaults for `repo.setup_timeout`,
`server.ready.timeout` and `bench.timeout`.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from pydantic import BaseModel

from orchestrator.adapters import bench_adapter, server_adapter
from orchestrator.adapters.engine_families import default_engine, families_of
from orchestrator.adapters.sections import server_url
from orchestrator.cell import (
    BenchSpec,
    EngineMetricsSpec,
    Expectation,
    OutputsSpec,
    PreflightSpec,
    ProfileSpec,
    RepoPin,
    RunInputs,
    ServerSpec,
    SnapshotSpec,
    TelemetrySpec,
)
from orchestrator.config.keypath import KeyPath, format_key_path
from orchestrator.config.loaded import LoadedPlaybook
from orchestrator.config.model import (
    BenchSection,
    ContainerSection,
    PlaybookModel,
    ServerSection,
)
from orchestrator.config.templates.render import TemplateEngine, VariableScope
from orchestrator.config.validation import validate_rendered
from orchestrator.config.values import is_template
from orchestrator.container_pin import ContainerPin
from orchestrator.errors import InputError
from orchestrator.plan.outputs import OUTPUT_KEYS, outputs_spec
from orchestrator.plan.repeats import settle_rule
from orchestrator.plan.slo import search_rule

_KEY_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


class ScopeSource(Protocol):
    """What a section is rendered in: the template scope of one point, built on first use."""

    @property
    def scope(self) -> VariableScope: ...


class SectionRenderer:
    """Renders the sections of one playbook into the parts of a Cell."""

    def __init__(self, playbook: LoadedPlaybook, engine: TemplateEngine) -> None:
        self.playbook = playbook
        self.data = playbook.data
        self.locate = playbook.locate
        self.engine = engine
        self.node_vars: dict[str, Any] | None = None  # a host planner's node variables

    def render(
        self, ps: ScopeSource, value: Any, path: KeyPath, shell: frozenset[KeyPath] = frozenset()
    ) -> Any:
        """`value` (found at `path`) rendered in the point's scope."""
        return self.engine.render_tree(value, ps.scope, path, self.locate, shell)

    def check(self, owner: type[BaseModel], name: str, value: Any, path: KeyPath) -> Any:
        """`value` rendered at `path`, validated as field `name` of `owner`."""
        return validate_rendered(owner, name, value, path, self.locate)

    def _mapping_section(self, ps: ScopeSource, name: str, **render: Any) -> Any:
        """A top-level mapping section rendered and validated (a null rendering is empty)."""
        rendered = self.render(ps, self.data[name], (name,), **render)
        return self.check(PlaybookModel, name, {} if rendered is None else rendered, (name,))

    def timeouts(self, ps: ScopeSource) -> dict[str, float]:
        """The `timeouts:` given, in seconds."""
        if self.data.get("timeouts") is None:
            return {}
        section = self._mapping_section(ps, "timeouts")
        return {k: v for k, v in section.model_dump().items() if v is not None}

    def repo(self, ps: ScopeSource, timeouts: dict[str, float]) -> RepoPin | None:
        """The repo pin, `timeouts.setup` as its default setup timeout."""
        if self.data.get("repo") is None:
            return None
        path: KeyPath = ("repo",)
        rendered = self.render(ps, self.data["repo"], path, frozenset({("repo", "setup")}))
        section = {} if rendered is None else rendered
        if isinstance(section, dict):
            section = dict(section)
            for key in ("url", "dest", "version"):
                value = section.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    section[key] = str(value)  # a short SHA written bare is read as a number
            if "setup" in timeouts and "setup_timeout" not in section:
                section["setup_timeout"] = timeouts["setup"]
        checked = self.check(PlaybookModel, "repo", section, path)
        return RepoPin.model_validate(checked.model_dump())

    def env(self, ps: ScopeSource) -> dict[str, str]:
        """`env:` (a mapping, or a list of them merged in order) with its values as text."""
        raw = self.data.get("env")
        if raw is None:
            return {}
        checked = self.check(PlaybookModel, "env", self.render(ps, raw, ("env",)), ("env",))
        out: dict[str, str] = {}
        for item in checked if isinstance(checked, list) else [checked]:
            if item is not None:  # a list item that rendered to null adds nothing
                out.update((k, _env_text(v)) for k, v in item.items())
        return out

    def _args(self, owner: type[BaseModel], raw: Any, ps: ScopeSource, path: KeyPath) -> Any:
        if raw is None:
            return {}
        checked = self.check(owner, "args", self.render(ps, raw, path), path)
        merged: dict[str, Any] = {}
        for item in checked if isinstance(checked, list) else [checked]:
            if item is not None:  # a list item that rendered to null adds nothing
                merged.update((str(k), v) for k, v in item.items())
        return merged

    def _section(
        self,
        ps: ScopeSource,
        name: str,
        owner: type[BaseModel],
        timeout_key: str,
        timeouts: dict[str, float],
    ) -> tuple[str, dict[str, Any]]:
        """(adapter name, rendered section) of `server` or `bench` for its adapter to build."""
        path: KeyPath = (name,)
        raw = self.data[name]
        body = {k: v for k, v in raw.items() if k != "args"}
        section = self.render(ps, body, path, frozenset({(name, "command")}))
        if "args" in raw:
            section["args"] = self._args(owner, raw["args"], ps, (name, "args"))
        if timeout_key in timeouts:
            if name == "server":
                ready = section.get("ready")
                if ready is None:
                    section["ready"] = {"timeout": timeouts[timeout_key]}
                elif isinstance(ready, dict) and "timeout" not in ready:
                    section["ready"] = {**ready, "timeout": timeouts[timeout_key]}
            elif "timeout" not in section:
                section["timeout"] = timeouts[timeout_key]
        adapter = section.get("adapter", "generic")
        return self.check(owner, "adapter", adapter, (*path, "adapter")), section

    def server(self, ps: ScopeSource, timeouts: dict[str, float]) -> ServerSpec | None:
        """The server spec its adapter builds, or None without a `server:`."""
        if self.data.get("server") is None:
            return None
        adapter, section = self._section(ps, "server", ServerSection, "ready", timeouts)
        container = section.pop("container", None)  # the runner's business, not the adapter's
        nodes = self.node_vars
        if nodes is not None and nodes["nnodes"] > 1:  # the adapter adds its multi-node flags
            section = {**section, "node": nodes}
        try:
            spec = server_adapter(adapter).build(section)
        except InputError as exc:
            raise self._relocate(exc, "server") from None
        if container is None:
            return spec
        path: KeyPath = ("server", "container")
        pin = container_pin(self.check(ServerSection, "container", container, path))
        return spec.model_copy(update={"container": pin})

    def bench(
        self, ps: ScopeSource, timeouts: dict[str, float], server: ServerSpec | None
    ) -> BenchSpec:
        """The bench spec its adapter builds for `server`."""
        adapter, section = self._section(ps, "bench", BenchSection, "bench", timeouts)
        outputs: dict[str, OutputsSpec | None] = {}
        for key in OUTPUT_KEYS:  # the runner asks the server itself: no adapter builds them
            if section.get(key) is not None:
                path: KeyPath = ("bench", key)
                checked = self.check(BenchSection, key, section.pop(key), path)
                outputs[key] = outputs_spec(checked, server, path, self.locate(path))
            section.pop(key, None)
        container = section.pop("container", None)  # the runner's business, not the adapter's
        if section.get("repeats") is not None:  # a template may give either form
            section["repeats"] = self.check(
                BenchSection, "repeats", section["repeats"], ("bench", "repeats")
            )
        if section.get("search") is not None:  # rendered: bounds as {max|min: number}
            section["search"] = self.check(
                BenchSection, "search", section["search"], ("bench", "search")
            )
        try:
            spec = settle_rule(section, bench_adapter(adapter).build(section, server))
            spec = search_rule(section, spec)
        except InputError as exc:
            raise self._relocate(exc, "bench") from None
        if spec.starts > 1:
            self._check_starts(spec, server)
        if outputs:
            spec = spec.model_copy(update=outputs)
        if container is None:
            return spec
        return spec.model_copy(update={"container": self._bench_container(container)})

    def _bench_container(self, raw: Any) -> ContainerPin:
        """`bench.container`, validated: podman or docker (the client runs to its end in the
        foreground; Slurm's runtimes run servers only so far)."""
        path: KeyPath = ("bench", "container")
        section = self.check(BenchSection, "container", raw, path)
        if section.runtime not in ("podman", "docker"):
            where: KeyPath = (*path, "runtime")
            raise InputError(
                f"bench.container runs with podman or docker, not {section.runtime}",
                hint="run the bench on the host, or in a podman/docker image",
                location=self.locate(where),
                key_path=format_key_path(where),
            )
        return container_pin(section)

    def _check_starts(self, spec: BenchSpec, server: ServerSpec | None) -> None:
        """`bench.starts: N` restarts the cell's own server between groups of fixed repeats."""
        why, hint = "", ""
        if server is None:
            why, hint = "starts needs a server to restart", "remove starts:, or add a server:"
        elif (self.node_vars or {}).get("nnodes", 1) > 1:
            why = "starts cannot restart a server over several hosts (server.nodes > 1)"
            hint = "remove starts:, or measure the cell again in another run"
        elif spec.settle is not None:
            why = "starts needs a fixed repeats count (repeats: {until} stops on repeats alone)"
            hint = f"e.g. repeats: {max(spec.repeats, 2 * spec.starts)}"
        elif spec.starts > spec.repeats:
            why = f"starts {spec.starts} is more than repeats {spec.repeats}: a start measures"
            why += " at least one repeat"
            hint = f"repeats: {spec.starts * max(1, spec.repeats // spec.starts)} or more"
        if why:
            path: KeyPath = ("bench", "starts")
            raise InputError(
                why, hint=hint, location=self.locate(path), key_path=format_key_path(path)
            )

    def _relocate(self, exc: InputError, section: str) -> InputError:
        """An adapter's error (key path relative to its section) at the playbook location."""
        if exc.location is not None:
            return exc
        path: KeyPath = (section,)
        if exc.key_path:
            for m in _KEY_PART.finditer(exc.key_path):
                path = (*path, m.group(1) if m.group(1) is not None else int(m.group(2)))
        return InputError(
            exc.message, location=self.locate(path), key_path=format_key_path(path), hint=exc.hint
        )

    def expect(self, ps: ScopeSource) -> dict[str, Expectation]:
        """`expect:` bounds per metric, tolerances as fractions."""
        if self.data.get("expect") is None:
            return {}
        checked = self._mapping_section(ps, "expect")
        return {
            str(metric): Expectation(
                **{k: v for k, v in section.model_dump().items() if v is not None}
            )
            for metric, section in checked.items()
        }

    def snapshot(self) -> SnapshotSpec:
        """The `snapshot:` options (plain booleans; a template keeps the default)."""
        given = self.playbook.model.snapshot
        if given is None:
            return SnapshotSpec()
        chosen = given.model_dump(exclude_unset=True)
        return SnapshotSpec(**{k: v for k, v in chosen.items() if isinstance(v, bool)})

    def telemetry(self) -> TelemetrySpec:
        """The `telemetry:` options (plain values; a template keeps the default)."""
        given = self.playbook.model.telemetry
        if given is None:
            return TelemetrySpec()
        chosen = given.model_dump(exclude_unset=True)
        plain: dict[str, Any] = {}
        if isinstance(chosen.get("enabled"), bool):
            plain["enabled"] = chosen["enabled"]
        interval = chosen.get("interval")
        if isinstance(interval, int | float) and not isinstance(interval, bool):
            plain["interval"] = float(interval)
        if isinstance(chosen.get("fields"), list):
            plain["fields"] = tuple(chosen["fields"])
        return TelemetrySpec(**plain)

    def profile(self, server: ServerSpec | None) -> ProfileSpec | None:
        """The `profile:` options for this server, None when off; refused where the server's
        adapter has no profiler endpoints (plain values; a template keeps the default)."""
        given = self.playbook.model.profile
        if given is None or given.enabled is not True:
            return None
        where = self.locate(("profile",))
        if server is None:
            raise InputError(
                "profile needs a server to profile", location=where, key_path="profile"
            )
        urls = server_adapter(server.adapter).profile_urls(server)
        if urls is None:
            raise InputError(
                f"the {server.adapter} adapter has no profiler endpoints orch can use",
                hint="remove profile:, or use the sglang adapter",
                location=where,
                key_path="profile",
            )
        chosen = given.model_dump(exclude_unset=True)
        plain: dict[str, Any] = {"start_url": urls[0], "stop_url": urls[1]}
        if isinstance(chosen.get("num_steps"), int) and not isinstance(chosen["num_steps"], bool):
            plain["num_steps"] = chosen["num_steps"]
        if isinstance(chosen.get("activities"), list):
            plain["activities"] = tuple(chosen["activities"])
        wait = chosen.get("wait")
        if isinstance(wait, int | float) and not isinstance(wait, bool):
            plain["wait"] = float(wait)
        return ProfileSpec(**plain)

    def run_inputs(self, bench: BenchSpec) -> RunInputs | None:
        """What each run of `bench` adds to its argv (its adapter's `run_inputs`), once per
        bench object: the planner shares one among the cells of equal bench sections."""
        memo: dict[int, tuple[BenchSpec, RunInputs | None]] = self.__dict__.setdefault(
            "_run_inputs", {}
        )
        found = memo.get(id(bench))
        if found is None or found[0] is not bench:
            found = memo[id(bench)] = (bench, bench_adapter(bench.adapter).run_inputs(bench))
        return found[1]

    def engine_metrics(self, server: ServerSpec | None) -> EngineMetricsSpec | None:
        """The `engine_metrics:` scrape for this server, None when off: on by default where the
        adapter's engine serves /metrics (engine_families.default_engine), a generic server's
        only with `engine:`; refused without a server (plain values; a template keeps the
        default). One spec per server object: the planner shares them like run_inputs."""
        memo: dict[int, tuple[ServerSpec | None, EngineMetricsSpec | None]] = (
            self.__dict__.setdefault("_engine_metrics_memo", {})
        )
        found = memo.get(id(server))
        if found is None or found[0] is not server:
            found = memo[id(server)] = (server, self._engine_metrics(server))
        return found[1]

    def _engine_metrics(self, server: ServerSpec | None) -> EngineMetricsSpec | None:
        given = self.playbook.model.engine_metrics
        if given is not None and given.enabled is False:
            return None
        where = self.locate(("engine_metrics",))
        url = server_url(server)
        if server is None or url is None:
            if given is None:
                return None
            raise InputError(
                "engine_metrics needs a server with a port to scrape",
                location=where,
                key_path="engine_metrics",
                hint="remove engine_metrics:, or declare server.port",
            )
        chosen = given.model_dump(exclude_unset=True) if given is not None else {}
        engine = chosen.get("engine") if chosen.get("engine") in ("vllm", "sglang") else None
        engine = engine or default_engine(server.adapter, server.args)
        if engine is None and given is None:
            return None  # SGLang without --enable-metrics, or a generic server: nothing asked
        if engine is None and server.adapter not in ("vllm", "sglang"):
            raise InputError(
                f"a {server.adapter} server's /metrics families are not known",
                location=where,
                key_path="engine_metrics.engine",
                hint="name the engine it runs: engine: vllm or engine: sglang",
            )
        engine = engine or server.adapter  # asked for explicitly: SGLang without the flag
        path = chosen.get("path")
        path = path if isinstance(path, str) and not is_template(path) else "/metrics"
        interval = chosen.get("interval")
        if not isinstance(interval, int | float) or isinstance(interval, bool):
            interval = 1.0  # a template keeps the default
        return EngineMetricsSpec(
            url=path if path.startswith(("http://", "https://")) else url + "/" + path.lstrip("/"),
            engine=engine,
            interval=float(interval),
            families=families_of(engine),
        )

    def preflight(self) -> PreflightSpec:
        """The `preflight:` options (plain values; a template keeps the default)."""
        given = self.playbook.model.preflight
        if given is None or given.gpus_busy not in ("refuse", "warn"):
            return PreflightSpec()
        return PreflightSpec(gpus_busy=given.gpus_busy)


def _env_text(value: Any) -> str:
    """A rendered env value (text, number or boolean: the model checked) as the text exported."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def container_pin(section: ContainerSection) -> ContainerPin:
    """The validated `server.container` as the cell carries it, not yet pinned: `orch apply`
    pins a tag to its digest, a reference written with one to that (execute/images.py)."""
    gpus = section.gpus
    return ContainerPin(
        image=section.image,
        runtime=section.runtime,
        mounts=tuple(section.mounts or ()),
        gpus="" if gpus is None else str(gpus),
        shm_size=section.shm_size or "",
        ipc=section.ipc or "",
        network=section.network or "",
        workdir=section.workdir or "",
        flags=tuple(section.flags or ()),
        conf=section.conf,
        tls_verify=section.tls_verify,
    )

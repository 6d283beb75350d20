"""vLLM: `vllm serve MODEL --flags` and `vllm bench serve`, readiness on /health, log metrics.

Facts in docs/FACTS.md (vLLM section): `/health` is 200 once the engine is up (connection refused
while booting); `--speculative-config` takes one JSON argument; `vllm bench serve --save-result`
writes one JSON object; spec-decode stats appear as `SpecDecoding metrics: ...` log lines.
The log metrics (`log_*`) are per repeat: only the stats intervals inside a measured repeat's
window count (vllm_log.py); the server's whole life is kept as facts.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from orchestrator.adapters.base import (
    TITLE_ENV_DEFAULTS,
    BenchAdapter,
    MetricInfo,
    RepeatResult,
    ServerAdapter,
)
from orchestrator.adapters.flags import ListStyle, flags_to_argv, normalize_args
from orchestrator.adapters.nccl import analyze_nccl
from orchestrator.adapters.outputs import (
    finite_float,
    read_json,
    read_text,
    regex_metrics_from_file,
)
from orchestrator.adapters.sections import (
    aimed_url,
    as_mapping,
    build_captures,
    build_ready,
    common_bench_fields,
    common_server_fields,
    get_port,
    get_str,
    node_of,
    prompts_text,
    server_url,
    split_command,
)
from orchestrator.adapters.sglang import section_vs_args
from orchestrator.adapters.vllm_log import (
    ServerLog,
    Window,
    inside,
    interval_metrics,
    parse_log,
    placed_window,
    read_log,
    utc_text,
    window_metrics,
)
from orchestrator.cell import BenchSpec, Cell, ServerSpec, Watch
from orchestrator.errors import InputError, OrchError
from orchestrator.results.layout import CELL_JSON, EXIT_JSON, SERVER_LOG, STDOUT
from orchestrator.results.records import CellRecord

DEFAULT_PORT = 8000
READY_PATH = "/health"
READY_TIMEOUT = 1200.0  # model load, torch.compile and CUDA graph capture take minutes
RESULT_FILE = "result.json"

# vLLM list flags are nargs ("--served-model-name a b") except these.
LIST_STYLES: dict[str, ListStyle] = {
    "middleware": "repeat",  # action="append"
    "allowed-origins": "json",  # type=json.loads
    "allowed-methods": "json",
    "allowed-headers": "json",
}


# `vllm` is a console script for this module's main(): `python -m` runs the same CLI under the
# interpreter the playbook names (a venv's python), with no `vllm` needed on PATH.
CLI_MODULE = "vllm.entrypoints.cli.main"


def _launcher(section: Mapping[str, Any], command: list[str]) -> list[str]:
    """`launcher` split into argv; else `[python, -m, CLI_MODULE, *command]` when `python` is
    given; else `vllm *command`."""
    python = get_str(section, "python", None, "python")
    if section.get("launcher") is not None:
        if python is not None:
            raise InputError(
                "launcher and python both say what to run",
                key_path="python",
                hint=f"keep one: python runs `python -m {CLI_MODULE} {' '.join(command)}`",
            )
        return split_command(section["launcher"], "launcher")
    if python is not None:
        return [python, "-m", CLI_MODULE, *command]
    return ["vllm", *command]


def one_token_completion(model: Any, args: Mapping[str, Any]) -> dict[str, Any]:
    """The readiness generate check's request: /health is 200 before the engine has run a
    forward pass (a model with an unsupported head size answered it, then died on the first
    request), so one 1-token completion must succeed too (`ready.generate: false` skips it)."""
    served = args.get("served-model-name")
    if isinstance(served, list | tuple) and served:
        served = served[0]
    name = served if isinstance(served, str) and served else str(model)
    return {"model": name, "prompt": "Hello", "max_tokens": 1, "temperature": 0}


class VllmServer(ServerAdapter):
    """`vllm serve <args.model> --flag ...` (`launcher` replaces `vllm serve`).

    Dict values, such as `speculative-config: {method: eagle3, ...}`, become one JSON argument.
    """

    name = "vllm"

    def build(self, section: Mapping[str, Any]) -> ServerSpec:
        """argv with the model positional; readiness GET /health == 200 on args.port (8000)."""
        args = normalize_args(as_mapping(section.get("args"), "args"))
        model = args.pop("model", None)
        if model is None or isinstance(model, bool | dict | list):
            raise InputError(
                "vllm needs the model to serve",
                key_path="args.model",
                hint="add model: /path/to/model (or a hub name) to server.args",
            )
        port_value = section_vs_args(section, args, "port", DEFAULT_PORT)
        port = get_port({"port": port_value}, "port", DEFAULT_PORT, "args.port")
        assert port is not None
        args["port"] = port  # always passed: readiness and the bench client rely on it
        node = node_of(section)
        if node is not None:
            # Data parallel over nodes, vLLM's Ray-free form: one `vllm serve` per node, the
            # others `--headless`. Tensor/pipeline parallel over nodes needs a Ray cluster
            # orch does not start.
            local = args.get("data-parallel-size-local") or 1
            args.setdefault("data-parallel-size-local", local)
            args.setdefault("data-parallel-size", int(local) * int(node["nnodes"]))
            args.setdefault("data-parallel-address", node["head_host"])
            args.setdefault("data-parallel-rpc-port", node["head_port"])
            if node["node_rank"]:
                args.setdefault("headless", True)
                args.setdefault("data-parallel-start-rank", int(local) * int(node["node_rank"]))
        host_value = section_vs_args(section, args, "host", None)
        host = None if host_value is None else str(host_value)
        argv = [*_launcher(section, ["serve"]), str(model)]
        argv += flags_to_argv(args, list_styles=LIST_STYLES)
        return ServerSpec(
            adapter=self.name,
            argv=tuple(argv),
            port=port,
            ready=build_ready(
                section,
                host=host,
                port=port,
                default_path=READY_PATH,
                default_timeout=READY_TIMEOUT,
                generate_body=one_token_completion(model, args),
            ),
            captures=build_captures(section, host=host, port=port),
            args={"model": model, **args},
            env_defaults=dict(TITLE_ENV_DEFAULTS),
            **common_server_fields(section),
        )

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """The server.log metrics `analyze` reports (the measured repeats' windows together)."""
        return SERVER_CATALOGUE

    def reset_url(self, spec: ServerSpec) -> str | None:
        """vLLM's prefix-cache reset, POSTed between cells sharing one server.

        vLLM serves it only with VLLM_SERVER_DEV_MODE=1; elsewhere its 404 is noted, not fatal.
        """
        url = server_url(spec)
        return None if url is None else url + "/reset_prefix_cache"

    def analyze(self, cell_dir: Path, cell: Cell) -> dict[str, Any]:
        """Log metrics over the measured repeats' windows, the whole log's as facts, and the
        NCCL facts and checks."""
        metrics: dict[str, float] = {}
        facts: dict[str, Any] = {}
        log = read_text(cell_dir / SERVER_LOG)
        if log is None:
            facts["server_log"] = "missing"
            log = ""
        parsed = parse_log(log)
        intervals = parsed.intervals
        facts["spec_decoding"] = whole_life_spec(parsed.spec)
        gen = [i.gen_throughput for i in intervals if i.gen_throughput > 0]
        if gen:
            # the server's whole life (idle, ramp-up, warm-ups): for reading, not comparing
            facts["generation_throughput"] = {"lines": len(gen), "median": statistics.median(gen)}
        windows = measured_windows(cell_dir, cell, parsed)
        facts["log_windows"] = [w.detail for w in windows]
        chosen = [i for i in intervals if any(w.window and inside(i, w.window) for w in windows)]
        metrics.update(interval_metrics(chosen)[0])
        facts["nccl"], checks = analyze_nccl(log, cell.env)
        return {"metrics": metrics, "facts": facts, "checks": checks}


_LOG = SERVER_LOG
_WINDOWS = " inside the measured repeats' windows"
SERVER_CATALOGUE = (
    MetricInfo(
        "log_accept_len",
        "tokens/step",
        "higher",
        _LOG + " SpecDecoding lines" + _WINDOWS + " (weighted by drafted tokens)",
    ),
    MetricInfo(
        "log_draft_acceptance_rate",
        "fraction",
        "higher",
        _LOG + " SpecDecoding lines" + _WINDOWS + " (accepted/drafted)",
    ),
    MetricInfo(
        "log_gen_throughput",
        "tok/s",
        "higher",
        _LOG + " stats lines" + _WINDOWS + " (median, summed over engines)",
    ),
)


def parse_spec_decoding(text: str) -> list[dict[str, Any]]:
    """Every `SpecDecoding metrics:` line as a dict (rates as fractions, counts as floats)."""
    return parse_log(text).spec


def parse_generation_throughput(text: str) -> list[float]:
    """`Avg generation throughput: X tokens/s` values of vLLM's periodic stats lines."""
    return [i.gen_throughput for i in parse_log(text).intervals]


def whole_life_spec(spec: list[dict[str, Any]]) -> dict[str, Any]:
    """The SpecDecoding lines of the server's whole life (warm-up included), for facts."""
    out: dict[str, Any] = {"lines": len(spec)}
    lengths = [r["mean_acceptance_length"] for r in spec if "mean_acceptance_length" in r]
    if lengths:
        out["mean_acceptance_length"] = {
            "mean": statistics.fmean(lengths),
            "min": min(lengths),
            "max": max(lengths),
            "last": lengths[-1],
        }
    accepted = sum(r.get("accepted_tokens", 0.0) for r in spec)
    drafted = sum(r.get("drafted_tokens", 0.0) for r in spec)
    if drafted > 0:
        out.update(accepted_tokens=accepted, drafted_tokens=drafted)
    if spec and "per_position_acceptance_rate" in spec[-1]:
        out["per_position_acceptance_rate"] = spec[-1]["per_position_acceptance_rate"]
    return out


@dataclass(frozen=True)
class MeasuredWindow:
    """A measured repeat's window (None when it cannot be placed) and what facts say of it."""

    n: int
    window: Window | None
    detail: dict[str, Any]


def measured_windows(cell_dir: Path, cell: Cell, log: ServerLog) -> list[MeasuredWindow]:
    """Each measured repeat's window on the server's log clock (bench/<n>/exit.json)."""
    out: list[MeasuredWindow] = []
    cell_doc, _ = read_json(cell_dir / CELL_JSON)
    for record in CellRecord(cell_dir).repeats:
        try:
            exit_doc = record.exit
        except OrchError:  # a damaged exit.json: the verdict names it elsewhere
            exit_doc = None
        window, how = placed_window(exit_doc, cell.env, log, cell_doc)
        detail: dict[str, Any] = {"n": record.n, "clock": how}
        if window is not None:  # per repeat whatever the bench (vllm.bench_serve's own too)
            values, counts = window_metrics(log.intervals, window)
            detail.update(start=utc_text(window.start), end=utc_text(window.end), **counts)
            detail.update(values)
        out.append(MeasuredWindow(record.n, window, detail))
    return out


def repeat_log_metrics(repeat_dir: Path, cell: Cell, result: RepeatResult) -> None:
    """Add a measured repeat's log_* metrics from the vllm server's log lines inside its
    window; a window that holds no whole stats interval gives none (and a note)."""
    if cell.server is None or cell.server.adapter != VllmServer.name:
        return
    if not repeat_dir.name.isdigit():
        return  # a warm-up: never compared
    cell_dir = repeat_dir.parent.parent
    log = read_log(cell_dir / SERVER_LOG)
    if log is None:
        result.notes.append("server.log is missing: log_* metrics not read")
        return
    exit_doc, _ = read_json(repeat_dir / EXIT_JSON)
    cell_doc, _ = read_json(cell_dir / CELL_JSON)
    window, how = placed_window(exit_doc, cell.env, log, cell_doc)
    if window is None:
        result.notes.append(f"log_* metrics not read: {how}")
        return
    if not log.intervals:
        result.notes.append("log_* metrics: server.log has no vLLM stats lines (log stats off?)")
        return
    values, detail = window_metrics(log.intervals, window)
    if not detail["intervals"]:
        result.notes.append(
            "log_* metrics: no whole vLLM stats interval inside a repeat's window "
            "(a repeat shorter than about two VLLM_LOG_STATS_INTERVAL)"
        )
    elif "log_gen_throughput" not in values and detail.get("partly_idle"):
        result.notes.append(
            f"log_gen_throughput: the {detail['partly_idle']} stats interval(s) inside the "
            "repeat's window were partly idle (a repeat shorter than about three "
            "VLLM_LOG_STATS_INTERVAL under load)"
        )
    for key, value in values.items():
        result.metrics[key] = value
        result.sources[key] = _REPEAT_LOG


_REPEAT_LOG = "server.log inside the repeat's window"


class VllmBenchServe(BenchAdapter):
    """`vllm bench serve --base-url URL ... --save-result --result-dir . --result-filename F`."""

    name = "vllm.bench_serve"
    seed_flag = "--seed"  # default 0: the datasets' random_seed (docs/FACTS.md)
    renamed: ClassVar[dict[str, str]] = {
        "spec_decode_acceptance_rate": "draft_acceptance_rate (a fraction, no longer a percentage)"
    }

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """bench serve's result fields; percentiles beyond p99 follow --metric-percentiles."""
        return BENCH_CATALOGUE

    def sends(self, spec: BenchSpec) -> str:
        """`N <dataset> prompts` as the client's defaults fill in (1000, random)."""
        return prompts_text(spec.args, "random")

    def knows(self, name: str) -> bool:
        """A catalogue name, or any percentile `--metric-percentiles` may ask for."""
        return super().knows(name) or _ORCH_LATENCY.fullmatch(name) is not None

    def build(self, section: Mapping[str, Any], server: ServerSpec | None) -> BenchSpec:
        """argv with the base URL and result file unless `args` names them itself."""
        args = normalize_args(as_mapping(section.get("args"), "args"))
        argv = _launcher(section, ["bench", "serve"])
        if args.get("base-url") is None and args.get("host") is None and args.get("port") is None:
            argv += ["--base-url", aimed_url(server, "vllm.bench_serve", "args.base-url")]
        argv += flags_to_argv(args)
        if args.get("save-result") is None:
            argv.append("--save-result")
        result_dir = str(args.get("result-dir") or ".")
        if args.get("result-dir") is None:
            argv += ["--result-dir", "."]
        filename = str(args.get("result-filename") or RESULT_FILE)
        if args.get("result-filename") is None:
            argv += ["--result-filename", RESULT_FILE]
        result_file = filename if result_dir in (".", "./") else f"{result_dir}/{filename}"
        return BenchSpec(
            adapter=self.name,
            argv=tuple(argv),
            result_file=result_file,
            args=args,
            **common_bench_fields(section),
        )

    def watch(self, spec: BenchSpec, metric: str) -> Watch | None:
        """A throughput, count or latency of the result JSON (under vLLM's own key), else a
        regex metric; percentages are left to the controller's parse."""
        key = {v: k for k, v in _VLLM_RENAMES.items()}.get(metric, metric)
        key = key.replace("_e2e_latency_ms", "_e2el_ms")  # vLLM's spelling of the latency
        if (key in _VLLM_SCALARS and key not in _PERCENT) or _VLLM_LATENCY.match(key):
            name = spec.result_file or RESULT_FILE
            return Watch(metric=metric, file=name, format="json", key=key)
        return super().watch(spec, metric)

    def parse_repeat_with_sources(self, repeat_dir: Path, cell: Cell) -> RepeatResult:
        """The result JSON's throughputs, latency stats and spec-decode acceptance."""
        result = RepeatResult()
        name = cell.bench.result_file or RESULT_FILE
        data, problem = read_json(repeat_dir / name)
        if not isinstance(data, dict):
            result.notes.append(problem or f"{name} is not a JSON object")
        else:
            for key, value in bench_serve_metrics(data).items():
                result.metrics[key] = value
                result.sources[key] = name
        repeat_log_metrics(repeat_dir, cell, result)
        if cell.bench.metrics:
            regex_metrics_from_file(cell.bench.metrics, repeat_dir / STDOUT, result)
        return result


_VLLM_RENAMES = {
    "total_token_throughput": "total_throughput",
    "spec_decode_acceptance_length": "accept_length",
    "spec_decode_acceptance_rate": "draft_acceptance_rate",
}
_VLLM_SCALARS = (
    "output_throughput",
    "request_throughput",
    "request_goodput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "completed",
    "failed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "spec_decode_acceptance_length",
    "spec_decode_acceptance_rate",
)
_PERCENT = {"spec_decode_acceptance_rate"}  # vLLM writes a percentage; orch keeps fractions
_VLLM_LATENCY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
_ORCH_LATENCY = re.compile(r"(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2e_latency)_ms")
_RESULT = RESULT_FILE


def _bench_catalogue() -> tuple[MetricInfo, ...]:
    infos = [
        MetricInfo("output_throughput", "tok/s", "higher", _RESULT),
        MetricInfo("request_throughput", "req/s", "higher", _RESULT),
        # only with --goodput ttft:MS [tpot:MS] [e2el:MS]: requests within every bound, per s
        MetricInfo("request_goodput", "req/s", "higher", _RESULT + " (with --goodput)"),
        MetricInfo("total_throughput", "tok/s", "higher", _RESULT + " total_token_throughput"),
        MetricInfo("max_output_tokens_per_s", "tok/s", "higher", _RESULT),
        MetricInfo("max_concurrent_requests", "requests", "neither", _RESULT),
        MetricInfo("completed", "requests", "higher", _RESULT),
        MetricInfo("failed", "requests", "lower", _RESULT),
        MetricInfo("duration", "s", "lower", _RESULT),
        MetricInfo("total_input_tokens", "tokens", "neither", _RESULT),
        MetricInfo("total_output_tokens", "tokens", "neither", _RESULT),
        MetricInfo(
            "accept_length", "tokens/step", "higher", _RESULT + " spec_decode_acceptance_length"
        ),
        MetricInfo(
            "draft_acceptance_rate",
            "fraction",
            "higher",
            _RESULT + " spec_decode_acceptance_rate ÷ 100",
        ),
        # per repeat, from a vllm server's log: v0.10.x writes no spec_decode_* keys
        MetricInfo(
            "log_gen_throughput", "tok/s", "higher", _REPEAT_LOG + " (median; server: vllm)"
        ),
        MetricInfo(
            "log_accept_len",
            "tokens/step",
            "higher",
            _REPEAT_LOG + " (SpecDecoding, weighted by drafted tokens; server: vllm)",
        ),
        MetricInfo(
            "log_draft_acceptance_rate",
            "fraction",
            "higher",
            _REPEAT_LOG + " (SpecDecoding accepted/drafted; server: vllm)",
        ),
    ]
    for latency in ("ttft", "tpot", "itl", "e2e_latency"):
        for stat in ("mean", "median", "std", "p99"):
            infos.append(MetricInfo(f"{stat}_{latency}_ms", "ms", "lower", _RESULT))
    return tuple(infos)


BENCH_CATALOGUE = _bench_catalogue()


def bench_serve_metrics(data: Mapping[str, Any]) -> dict[str, float]:
    """orch metrics from a `vllm bench serve` result: names aligned with sglang.bench_serving
    (`total_throughput`, `e2e_latency`, `accept_length`); the acceptance rate is a fraction
    (`draft_acceptance_rate`), as in the server log's."""
    out: dict[str, float] = {}
    for key in _VLLM_SCALARS:
        value = finite_float(data.get(key))
        if value is not None:
            out[_VLLM_RENAMES.get(key, key)] = value / 100 if key in _PERCENT else value
    for key, raw in data.items():
        match = _VLLM_LATENCY.match(str(key))
        value = finite_float(raw)
        if match is None or value is None:
            continue
        latency = "e2e_latency" if match.group(2) == "e2el" else match.group(2)
        out[f"{match.group(1)}_{latency}_ms"] = value
    if out.get("accept_length", 1.0) <= 0:
        del out["accept_length"]
    return out

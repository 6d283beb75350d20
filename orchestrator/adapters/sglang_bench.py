"""SGLang's benchmark clients: `sglang.bench_serving` and `sglang.bench_one_batch_server`.

Both append one JSON object per line to their result file; each run has its own repeat directory
as cwd, so the last line is that run's. Field sets of 2025 and 2026 builds are in docs/FACTS.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.adapters.base import BenchAdapter, MetricInfo, RepeatResult
from orchestrator.adapters.flags import flags_to_argv, normalize_args
from orchestrator.adapters.outputs import (
    finite_float,
    read_json_lines,
    read_last_json_line,
    read_text,
    regex_metrics_from_file,
)
from orchestrator.adapters.sections import (
    aimed_url,
    as_mapping,
    common_bench_fields,
    prompts_text,
)
from orchestrator.adapters.sglang import (
    internal_states,
    launcher_argv,
    load_server_infos,
    server_time_scale,
)
from orchestrator.cell import BenchSpec, Cell, RunInputs, ServerSpec, Watch
from orchestrator.results.layout import STDOUT
from orchestrator.sim.bench import SIMULATED_UNITS_LINE

RESULT_FILE = "result.jsonl"

_LATENCIES = ("ttft", "itl", "tpot", "e2e_latency")
# Client versions by their field sets (docs/FACTS.md): 2025 builds (0.4.x, `orch sim bench`)
# and 2026 builds, which added p90/p95 everywhere, total_throughput and two maxima.
V2025, V2026 = "2025", "2026"
_BOTH = (V2025, V2026)
_STAT_VERSIONS = {"mean": _BOTH, "median": _BOTH, "std": _BOTH, "p90": (V2026,), "p95": (V2026,)}
_STAT_VERSIONS["p99"] = _BOTH
_SERVING_SOURCE = RESULT_FILE
# A client whose retokenized output differs from the server's token count by more than this
# (a fraction) measured other lengths than the server generated: its per-token figures mislead.
RETOKENIZED_TOLERANCE = 0.05


def _serving_catalogue() -> tuple[MetricInfo, ...]:
    src = _SERVING_SOURCE
    infos = [
        MetricInfo("output_throughput", "tok/s", "higher", src, _BOTH),
        MetricInfo("input_throughput", "tok/s", "higher", src, _BOTH),
        MetricInfo("request_throughput", "req/s", "higher", src, _BOTH),
        MetricInfo("total_throughput", "tok/s", "higher", src, (V2026,)),
        MetricInfo("max_output_tokens_per_s", "tok/s", "higher", src, (V2026,)),
        MetricInfo("max_concurrent_requests", "requests", "neither", src, (V2026,)),
        MetricInfo("completed", "requests", "higher", src, _BOTH),
        MetricInfo("duration", "s", "lower", src, _BOTH),
        MetricInfo("total_input_tokens", "tokens", "neither", src, _BOTH),
        MetricInfo("total_output_tokens", "tokens", "neither", src + " (server's count)", _BOTH),
        MetricInfo(
            "total_output_tokens_retokenized", "tokens", "neither", src + " (client's)", _BOTH
        ),
        MetricInfo("concurrency", "requests", "neither", src, _BOTH),
    ]
    for latency in _LATENCIES:
        for stat, versions in _STAT_VERSIONS.items():
            if latency == "itl" and stat == "p95":
                versions = _BOTH  # 2025 builds wrote p95 for ITL only
            infos.append(MetricInfo(f"{stat}_{latency}_ms", "ms", "lower", src, versions))
    infos.append(
        MetricInfo(
            "accept_length",
            "tokens/step",
            "higher",
            "server_info captures around the run, else " + src,
            _BOTH,
        )
    )
    return tuple(infos)


SERVING_CATALOGUE = _serving_catalogue()
_SERVING_NAMES = tuple(info.name for info in SERVING_CATALOGUE if info.name != "accept_length")


def _base_url_for(args: dict[str, Any], server: ServerSpec | None, adapter: str) -> str | None:
    if args.get("base-url") is not None:
        return None  # written by the user: it stays among the flags
    if args.get("host") is not None or args.get("port") is not None:
        return None  # the client builds the URL from --host/--port itself
    return aimed_url(server, adapter, "args.base-url")


def _result_flag(args: dict[str, Any], flag: str) -> tuple[str, list[str]]:
    """(result file relative to the repeat dir, extra argv) for a result-file flag."""
    given = args.get(flag)
    if given is not None:
        return str(given), []
    return RESULT_FILE, [f"--{flag}", RESULT_FILE]


class SglangBenchServing(BenchAdapter):
    """`python -m sglang.bench_serving --backend sglang --base-url URL ... --output-file F`.

    The old module name is kept: 2026 builds moved it to `sglang.benchmark.serving` and left a
    shim, so one name works on both. `launcher` replaces `python -m sglang.bench_serving` (e.g.
    `orch sim bench`).
    """

    name = "sglang.bench_serving"
    seed_flag = "--seed"  # default 1: seeds `random` and `numpy.random` (docs/FACTS.md)

    def run_inputs(self, spec: BenchSpec) -> RunInputs | None:
        """A seed per run, and `--flush-cache`: SGLang empties its radix cache after the
        client's own warm-up request (the run's first prompt), before the measured requests."""
        if spec.cache == "warm":
            return None
        seed = super().run_inputs(spec) or RunInputs()  # a pinned seed: the flush alone
        flags = () if "flush-cache" in spec.args else ("--flush-cache",)
        return seed.model_copy(update={"flags": flags}) if seed.seed_flag or flags else None

    def sends(self, spec: BenchSpec) -> str:
        """`N <dataset> prompts` as the client's defaults fill in (1000, sharegpt)."""
        return prompts_text(spec.args, "sharegpt")

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """bench_serving's result fields, each with the client versions that write it."""
        return SERVING_CATALOGUE

    def build(self, section: Mapping[str, Any], server: ServerSpec | None) -> BenchSpec:
        """argv with backend, base URL and output file unless `args` names them itself."""
        args = normalize_args(as_mapping(section.get("args"), "args"))
        argv = launcher_argv(section, "sglang.bench_serving")
        if args.get("backend") is None:
            argv += ["--backend", "sglang"]
        url = _base_url_for(args, server, self.name)
        if url is not None:
            argv += ["--base-url", url]
        argv += flags_to_argv(args)
        result_file, extra = _result_flag(args, "output-file")
        argv += extra
        return BenchSpec(
            adapter=self.name,
            argv=tuple(argv),
            result_file=result_file,
            args=args,
            **common_bench_fields(section),
        )

    def watch(self, spec: BenchSpec, metric: str) -> Watch | None:
        """A field of the result file's last line (as the client wrote it, before the
        simulator's time scale: settling is relative), else a regex metric."""
        if metric in _SERVING_NAMES:
            name = spec.result_file or RESULT_FILE
            return Watch(metric=metric, file=name, format="jsonl", key=metric)
        return super().watch(spec, metric)

    def parse_repeat_with_sources(self, repeat_dir: Path, cell: Cell) -> RepeatResult:
        """The last JSON line of the result file, plus a per-run accept length where possible."""
        result = RepeatResult()
        name = cell.bench.result_file or RESULT_FILE
        row, problem = read_last_json_line(repeat_dir / name)
        if row is None:
            result.notes.append(problem or f"{name}: no result")
        else:
            for key, value in serving_metrics(row).items():
                result.metrics[key] = value
                result.sources[key] = name
            note = retokenized_mismatch(result.metrics)
            if note is not None:
                result.notes.append(note)
        accept_length(repeat_dir, cell, row or {}, result)
        _stdout_metrics(repeat_dir, cell, result)
        apply_time_scale(repeat_dir, cell, result, _serving_kind)
        return result


def _serving_kind(metric: str) -> str | None:
    if metric.endswith("_ms") or metric == "duration":
        return "time"
    if metric.endswith(("_throughput", "_per_s")):
        return "rate"
    return None


def retokenized_mismatch(metrics: Mapping[str, float]) -> str | None:
    """A flag when the client's retokenized output differs from the server's token count by
    more than `RETOKENIZED_TOLERANCE`: the two disagree on lengths (a server that ignores the
    requested length, another tokenizer), so per-token figures of this run mislead."""
    server = metrics.get("total_output_tokens")
    client = metrics.get("total_output_tokens_retokenized")
    if server is None or client is None or max(server, client) <= 0:
        return None
    off = abs(client - server) / max(server, client)
    if off <= RETOKENIZED_TOLERANCE:
        return None
    return (
        f"flag: retokenized output {client:g} tokens vs the server's {server:g} "
        f"({off:.0%} apart, over {RETOKENIZED_TOLERANCE:.0%}): client and server disagree on "
        "output lengths"
    )


def serving_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """orch metrics from one bench_serving result object (2025 or 2026 field set)."""
    out: dict[str, float] = {}
    for key in _SERVING_NAMES:
        value = finite_float(row.get(key))
        if value is not None:
            out[key] = value
    accept = finite_float(row.get("accept_length"))
    if accept is not None and accept > 0:
        out["accept_length"] = accept
    return out


def _stdout_metrics(repeat_dir: Path, cell: Cell, result: RepeatResult) -> None:
    if not cell.bench.metrics:
        return
    regex_metrics_from_file(cell.bench.metrics, repeat_dir / STDOUT, result)


# --- the simulator's time scale --------------------------------------------------------------

_SIMULATED_UNITS = SIMULATED_UNITS_LINE.split("{", 1)[0]


def apply_time_scale(
    repeat_dir: Path, cell: Cell, result: RepeatResult, kind: Callable[[str], str | None]
) -> None:
    """Put a real client's timings against `orch sim serve` at time scale S in simulated units.

    A real client times the server in real seconds, so its latencies are S times and its
    throughputs 1/S times the simulated ones. `orch sim bench` divides by S itself (it says so
    on stdout) and is left alone. `kind(metric)` is "time", "rate" or None (no unit of time).
    """
    scale = server_time_scale(repeat_dir.parent.parent, cell)
    if scale is None:
        return
    stdout = read_text(repeat_dir / STDOUT) or ""
    if _SIMULATED_UNITS in stdout:
        result.notes.append(f"time scale {scale:g}: the client reported simulated units itself")
        return
    converted = []
    regex = set(cell.bench.metrics)
    for name, value in list(result.metrics.items()):
        unit = kind(name)
        if unit is None or name in regex:
            continue
        result.metrics[name] = value / scale if unit == "time" else value * scale
        result.sources[name] = f"{result.sources.get(name, 'result')} ÷ time scale {scale:g}"
        converted.append(name)
    result.notes.append(
        f"time scale {scale:g}: the server is `orch sim serve`, whose simulated second lasts "
        f"{scale:g} s; {len(converted)} timings of this client were converted to simulated units"
    )
    if regex:
        result.notes.append(
            f"time scale {scale:g}: regex metrics {', '.join(sorted(regex))} are as printed "
            "(their unit is unknown, so they were not converted)"
        )


# --- accept length per run --------------------------------------------------------------------

# Cumulative counters a /server_info rank may carry; SGLang itself exports only the average,
# so these are what a build (or the simulator) that exposes them would call them.
_COUNT_KEYS = (
    "spec_accept_count",
    "cum_spec_accept_count",
    "spec_verify_ct",
    "spec_num_verify_steps",
    "num_verify_steps",
)
_TOKEN_KEYS = (
    "spec_accept_tokens",
    "cum_spec_accept_length",
    "spec_num_accepted_tokens",
    "num_accepted_tokens",
)


def _moments(repeat_dir: Path, cell: Cell) -> tuple[str, str] | None:
    """(capture moment before this run, moment after it) from the repeat dir's name."""
    found = re.fullmatch(r"(warmup-)?(\d+)", repeat_dir.name)
    if found is None:
        return None
    n = int(found.group(2))
    if found.group(1):
        return ("ready" if n == 1 else f"after-warmup-{n - 1}", f"after-warmup-{n}")
    if n > 1:
        return (f"after-{n - 1}", f"after-{n}")
    warmup = cell.bench.warmup
    return ("ready" if warmup == 0 else f"after-warmup-{warmup}", "after-1")


def _counters(state: Mapping[str, Any]) -> tuple[float, float] | None:
    """(accepted tokens, verify steps) of one rank, from explicit counters or avg x count."""
    count = next((finite_float(state.get(k)) for k in _COUNT_KEYS if k in state), None)
    if count is None:
        return None
    tokens = next((finite_float(state.get(k)) for k in _TOKEN_KEYS if k in state), None)
    if tokens is None:
        avg = finite_float(state.get("avg_spec_accept_length"))
        if avg is None:
            return (0.0, count) if count == 0 else None
        tokens = avg * count
    return (tokens, count)


def _cumulative(info: Mapping[str, Any]) -> float | None:
    values = [finite_float(s.get("avg_spec_accept_length")) for s in internal_states(info)]
    good = [v for v in values if v is not None and v > 0]
    return sum(good) / len(good) if good else None


def _delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[float | None, str]:
    """Per-run accept length from two snapshots, or None and why not."""
    ranks_before, ranks_after = internal_states(before), internal_states(after)
    if not ranks_after:
        return None, "no internal_states in the capture after the run"
    if not any(finite_float(s.get("avg_spec_accept_length")) for s in ranks_before) and any(
        finite_float(s.get("avg_spec_accept_length")) for s in ranks_after
    ):
        # No accepts existed before the run: the cumulative value after it is this run's alone.
        value = _cumulative(after)
        return value, "no accepts before this run: the cumulative value is the run's own"
    if len(ranks_before) != len(ranks_after):
        return None, "the two captures have different numbers of ranks"
    tokens = steps = 0.0
    reset = False
    for b, a in zip(ranks_before, ranks_after, strict=True):
        cb, ca = _counters(b), _counters(a)
        if cb is None or ca is None:
            return None, "/server_info has no cumulative accept counters (only the average)"
        if ca[1] < cb[1]:
            reset = True
        tokens += ca[0] - cb[0]
        steps += ca[1] - cb[1]
    if reset:
        value = _cumulative(after)
        return value, "the server's counters were reset during the run: value since the reset"
    if steps <= 0:
        return None, "no verify steps between the two captures"
    return tokens / steps, "difference of cumulative counters before and after the run"


def accept_length(
    repeat_dir: Path, cell: Cell, row: Mapping[str, Any], result: RepeatResult
) -> None:
    """Set `accept_length` from the best source: server_info_delta, bench_result (cumulative
    since server start), or server_info_cumulative; say which in `result.sources`."""
    moments = _moments(repeat_dir, cell)
    infos = dict(load_server_infos(repeat_dir.parent.parent, cell)) if moments else {}
    before = infos.get(moments[0]) if moments else None
    after = infos.get(moments[1]) if moments else None
    why = "no /server_info captures around this run"
    if before is not None and after is not None:
        value, why = _delta(before, after)
        if value is not None and value > 0:
            result.metrics["accept_length"] = value
            result.sources["accept_length"] = "server_info_delta"
            result.notes.append(f"accept_length: {why}")
            return
    elif moments is not None and (before is None) != (after is None):
        missing = moments[0] if before is None else moments[1]
        why = f"capture server_info.{missing}.json is missing"
    if "accept_length" in result.metrics:
        result.sources["accept_length"] = "bench_result"
        result.notes.append(f"accept_length: cumulative since server start ({why})")
        return
    cumulative = _cumulative(after) if after is not None else None
    if cumulative is not None:
        result.metrics["accept_length"] = cumulative
        result.sources["accept_length"] = "server_info_cumulative"
        result.notes.append(f"accept_length: cumulative since server start ({why})")


# --- bench_one_batch_server -------------------------------------------------------------------

_ONE_BATCH_FIELDS = {
    "latency": "latency",
    "input_throughput": "input_throughput",
    "output_throughput": "output_throughput",
    "overall_throughput": "overall_throughput",
    "last_ttft": "last_ttft",
    "last_gen_throughput": "last_gen_throughput",
    "acc_length": "accept_length",
}


_ONE_BATCH_SOURCE = "result.jsonl (last line per batch configuration)"
ONE_BATCH_CATALOGUE = (
    MetricInfo("latency", "s", "lower", _ONE_BATCH_SOURCE),
    MetricInfo("input_throughput", "tok/s", "higher", _ONE_BATCH_SOURCE),
    MetricInfo("output_throughput", "tok/s", "higher", _ONE_BATCH_SOURCE),
    MetricInfo("overall_throughput", "tok/s", "higher", _ONE_BATCH_SOURCE),
    MetricInfo("last_ttft", "s", "lower", _ONE_BATCH_SOURCE),
    MetricInfo("last_gen_throughput", "tok/s", "higher", _ONE_BATCH_SOURCE + ", server's"),
    MetricInfo("accept_length", "tokens/step", "higher", _ONE_BATCH_SOURCE + " acc_length"),
)


def one_batch_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """orch metrics from one bench_one_batch_server line; -1 and null mean "not measured"."""
    out: dict[str, float] = {}
    for key, name in _ONE_BATCH_FIELDS.items():
        value = finite_float(row.get(key))
        if value is not None and value != -1 and not (name == "accept_length" and value <= 0):
            out[name] = value
    return out


class SglangBenchOneBatchServer(BenchAdapter):
    """`python -m sglang.bench_one_batch_server --base-url URL --result-filename F ...`."""

    name = "sglang.bench_one_batch_server"

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """bench_one_batch_server's fields (with several batch configurations each name is
        `<name>.bs<B>_in<I>_out<O>`)."""
        return ONE_BATCH_CATALOGUE

    def knows(self, name: str) -> bool:
        """A catalogue name, alone or with a batch configuration suffix."""
        base, _, suffix = name.partition(".")
        known = any(info.name == base for info in ONE_BATCH_CATALOGUE)
        return known and (not suffix or re.fullmatch(r"bs\w+_in\w+_out\w+", suffix) is not None)

    def build(self, section: Mapping[str, Any], server: ServerSpec | None) -> BenchSpec:
        """argv with the base URL and result file unless `args` names them itself."""
        args = normalize_args(as_mapping(section.get("args"), "args"))
        argv = launcher_argv(section, "sglang.bench_one_batch_server")
        url = _base_url_for(args, server, self.name)
        if url is not None:
            argv += ["--base-url", url]
        result_file, extra = _result_flag(args, "result-filename")
        argv += extra
        argv += flags_to_argv(args)
        return BenchSpec(
            adapter=self.name,
            argv=tuple(argv),
            result_file=result_file,
            args=args,
            **common_bench_fields(section),
        )

    def parse_repeat_with_sources(self, repeat_dir: Path, cell: Cell) -> RepeatResult:
        """One line: plain metric names. Several batch configurations (e.g. `--batch-size 1 8`):
        each metric is named `<metric>.bs<B>_in<I>_out<O>`, last line per configuration."""
        result = RepeatResult()
        name = cell.bench.result_file or RESULT_FILE
        rows, notes = read_json_lines(repeat_dir / name)
        result.notes += notes
        if not rows:
            result.notes.append(f"{name}: no result lines")
        configs: dict[str, dict[str, Any]] = {}
        for row in rows:
            key = "bs{}_in{}_out{}".format(
                row.get("batch_size"), row.get("input_len"), row.get("output_len")
            )
            configs[key] = row
        for key, row in configs.items():
            suffix = "" if len(configs) == 1 else f".{key}"
            for metric, value in one_batch_metrics(row).items():
                result.metrics[metric + suffix] = value
                result.sources[metric + suffix] = name
        _stdout_metrics(repeat_dir, cell, result)
        apply_time_scale(repeat_dir, cell, result, _one_batch_kind)
        return result


def _one_batch_kind(metric: str) -> str | None:
    base = metric.split(".", 1)[0]
    if base in {"latency", "last_ttft"}:
        return "time"
    if base in {"input_throughput", "output_throughput", "overall_throughput"}:
        return "rate"
    return None  # accept_length; last_gen_throughput is the server's own (simulated) figure

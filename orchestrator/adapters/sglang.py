"""The SGLang server adapter: launch flags to argv, readiness, and what the server log says.

Facts used here are in docs/FACTS.md (SGLang section): `/health_generate` and the ready
line for readiness, `/server_info` (falling back to `/get_server_info`) for the server's own view
of its args and its cumulative accept length, and the `Decode batch` log lines of both forms.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.adapters.base import TITLE_ENV_DEFAULTS, MetricInfo, ServerAdapter
from orchestrator.adapters.flags import ListStyle, flags_to_argv, normalize_args
from orchestrator.adapters.nccl import analyze_nccl
from orchestrator.adapters.outputs import finite_float, read_json, read_text
from orchestrator.adapters.sections import (
    as_mapping,
    build_captures,
    build_ready,
    common_server_fields,
    get_port,
    get_str,
    node_of,
    server_url,
    split_command,
)
from orchestrator.cell import Cell, ServerSpec
from orchestrator.errors import InputError
from orchestrator.results.layout import CAPTURES_DIR, SERVER_LOG

DEFAULT_PORT = 30000
DEFAULT_HOST = "127.0.0.1"
READY_LOG = r"The server is fired up and ready to roll!"
READY_PATH = "/health_generate"  # runs a one-token generate; /health and /ping answer too early
READY_TIMEOUT = 1200.0  # loading a large MoE model and capturing CUDA graphs takes minutes
SERVER_INFO_CAPTURE: dict[str, Any] = {
    "name": "server_info",
    "urls": ["/server_info", "/get_server_info"],
}

# SGLang's list flags are argparse nargs ("--cuda-graph-bs 1 2 4"), the default style. A flag
# that needs another style is named here; none of SGLang's launch flags does so far.
LIST_STYLES: dict[str, ListStyle] = {}


def section_vs_args(
    section: Mapping[str, Any], args: dict[str, Any], key: str, default: Any
) -> Any:
    """One setting that may be written as `server.<key>` or `server.args.<key>`; they must agree."""
    in_section = section.get(key)
    in_args = args.get(key)
    if in_section is not None and in_args is not None and str(in_section) != str(in_args):
        raise InputError(
            f"server.{key} is {in_section!r} but args.{key} is {in_args!r}",
            key_path=key,
            hint="write it once",
        )
    if in_args is None and in_section is not None:
        args[key] = in_section
    value = args.get(key)
    return default if value is None else value


def launcher_argv(section: Mapping[str, Any], module: str) -> list[str]:
    """`launcher` split into argv, or `[python, -m, module]`."""
    if section.get("launcher") is not None:
        return split_command(section["launcher"], "launcher")
    python = get_str(section, "python", "python3", "python") or "python3"
    return [python, "-m", module]


class SglangServer(ServerAdapter):
    """`python -m sglang.launch_server` (or `launcher`) with `args` as flags."""

    name = "sglang"

    def catalogue(self) -> tuple[MetricInfo, ...]:
        """What `analyze` reports: the last /server_info capture's accept length."""
        return (
            MetricInfo(
                "server_info_accept_length",
                "tokens/step",
                "higher",
                "captures/server_info.<last>.json (cumulative since start)",
            ),
        )

    def build(self, section: Mapping[str, Any]) -> ServerSpec:
        """Flags from `args`; port/host from args (or server.port/host); SGLang's readiness."""
        args = normalize_args(as_mapping(section.get("args"), "args"))
        port_value = section_vs_args(section, args, "port", DEFAULT_PORT)
        port = get_port({"port": port_value}, "port", DEFAULT_PORT, "args.port")
        assert port is not None
        args["port"] = port  # always passed: readiness and the bench client rely on it
        node = node_of(section)
        if node is not None:
            # SGLang's multi-node form (docs/FACTS.md): the same launch on every node; the
            # head serves HTTP where the other nodes (and their runners) reach it.
            args.setdefault("nnodes", node["nnodes"])
            args.setdefault("node-rank", node["node_rank"])
            args.setdefault("dist-init-addr", f"{node['head_host']}:{node['head_port']}")
            if section.get("host") is None:
                args.setdefault("host", "0.0.0.0")
        host = str(section_vs_args(section, args, "host", DEFAULT_HOST))
        if host == "0.0.0.0":
            host = DEFAULT_HOST  # listening everywhere: readiness and captures ask locally
        if section.get("launcher") is None and not (args.get("model-path") or args.get("model")):
            raise InputError(
                "sglang needs the model to serve",
                key_path="args.model-path",
                hint="add model-path: /path/to/model to server.args",
            )
        argv = launcher_argv(section, "sglang.launch_server")
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
                default_log=READY_LOG,
                default_timeout=READY_TIMEOUT,
            ),
            captures=build_captures(section, host=host, port=port, default=[SERVER_INFO_CAPTURE]),
            args=args,
            env_defaults=dict(TITLE_ENV_DEFAULTS),
            **common_server_fields(section),
        )

    def reset_url(self, spec: ServerSpec) -> str | None:
        """SGLang's cache flush (docs/FACTS.md), POSTed between cells sharing one server."""
        url = server_url(spec)
        return None if url is None else url + "/flush_cache"

    def profile_urls(self, spec: ServerSpec) -> tuple[str, str | None] | None:
        """SGLang's torch-profiler endpoints (docs/FACTS.md): the body names the output folder
        and the decode steps to record."""
        url = server_url(spec)
        return None if url is None else (url + "/start_profile", url + "/stop_profile")

    def analyze(self, cell_dir: Path, cell: Cell) -> dict[str, Any]:
        """Decode-batch and NCCL facts from server.log, the server's view from /server_info."""
        metrics: dict[str, float] = {}
        facts: dict[str, Any] = {}
        checks: list[dict[str, Any]] = []
        log = read_text(cell_dir / SERVER_LOG)
        if log is None:
            facts["server_log"] = "missing"
            log = ""
        decode = parse_decode_lines(log)
        facts["decode"] = summarize_decode(decode)
        metrics.update(decode_metrics(decode))
        facts["nccl"], nccl_checks = analyze_nccl(log, cell.env)
        checks += nccl_checks
        scale = server_time_scale(cell_dir, cell)
        if scale is not None:
            facts["sim_time_scale"] = scale

        infos = load_server_infos(cell_dir, cell)
        if infos:
            facts["server_info"] = {
                moment: {
                    "avg_spec_accept_length": rank_values(info, "avg_spec_accept_length"),
                    "last_gen_throughput": rank_values(info, "last_gen_throughput"),
                }
                for moment, info in infos
            }
            last_accept = accept_length_of(infos[-1][1])
            if last_accept is not None:
                metrics["server_info_accept_length"] = last_accept
            if cell.server is not None:
                checks += check_server_args(cell.server.args, infos[0][1], infos[0][0])
        return {"metrics": metrics, "facts": facts, "checks": checks}


# --- the Decode batch log line ----------------------------------------------------------------

_DECODE = re.compile(r"Decode batch[.,]")
_DECODE_FIELDS: dict[str, tuple[re.Pattern[str], type]] = {
    "running_req": (re.compile(r"#running-req: (\d+)"), int),
    "token": (re.compile(r"#token: (\d+)"), int),
    "token_usage": (re.compile(r"token usage: ([\d.]+)"), float),
    "accept_len": (re.compile(r"accept len: ([\d.]+)"), float),
    "accept_rate": (re.compile(r"accept rate: ([\d.]+)"), float),
    "cuda_graph": (re.compile(r"cuda graph: (True|False)"), bool),
    "gen_throughput": (re.compile(r"gen throughput \(token/s\): ([\d.]+)"), float),
    "queue_req": (re.compile(r"#queue-req: (\d+)"), int),
}


def parse_decode_lines(text: str) -> list[dict[str, Any]]:
    """Every `Decode batch,` / `Decode batch.` line as a dict of the fields it holds."""
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        match = _DECODE.search(line)
        if match is None:
            continue
        rest = line[match.end() :]
        row: dict[str, Any] = {"form": "comma" if match.group(0).endswith(",") else "dot"}
        for key, (pattern, kind) in _DECODE_FIELDS.items():
            found = pattern.search(rest)
            if found is None:
                continue
            text_value = found.group(1)
            try:
                row[key] = text_value == "True" if kind is bool else kind(text_value)
            except ValueError:
                continue
        rows.append(row)
    return rows


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
        "last": values[-1],
        "n": float(len(values)),
    }


def summarize_decode(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Facts about the decode lines: count, forms seen, and stats of each numeric field."""
    out: dict[str, Any] = {"lines": len(rows), "forms": sorted({r["form"] for r in rows})}
    for key in ("gen_throughput", "accept_len", "accept_rate", "token_usage"):
        stats = _stats([float(r[key]) for r in rows if key in r])
        if stats is not None:
            out[key] = stats
    running = [int(r["running_req"]) for r in rows if "running_req" in r]
    if running:
        out["running_req_max"] = max(running)
    graphs = sorted({bool(r["cuda_graph"]) for r in rows if "cuda_graph" in r})
    if graphs:
        out["cuda_graph"] = graphs[0] if len(graphs) == 1 else graphs
    return out


def decode_metrics(rows: list[dict[str, Any]]) -> dict[str, float]:
    """log_gen_throughput (median), log_accept_len and log_accept_rate (means)."""
    out: dict[str, float] = {}
    tput = [float(r["gen_throughput"]) for r in rows if "gen_throughput" in r]
    if tput:
        out["log_gen_throughput"] = statistics.median(tput)
    for key in ("accept_len", "accept_rate"):
        values = [float(r[key]) for r in rows if key in r]
        if values:
            out[f"log_{key}"] = statistics.fmean(values)
    return out


# --- the simulator's time scale --------------------------------------------------------------

# `orch sim serve` runs every simulated second in TIME_SCALE real seconds and says so in its log.
_TIME_SCALE_LOG = re.compile(r"sim: time scale ([0-9][0-9.eE+-]*):")


def server_time_scale(cell_dir: Path, cell: Cell) -> float | None:
    """The simulator's time scale when the server runs at one other than 1, else None.

    From the server's own word first (a /server_info capture's `sim.time_scale`, then its log
    line), then the cell's $ORCH_SIM_TIME_SCALE. A real SGLang server has none of these.
    """
    said: Any = None
    for _, info in load_server_infos(cell_dir, cell):
        sim = info.get("sim")
        if isinstance(sim, Mapping) and sim.get("time_scale") is not None:
            said = sim["time_scale"]
            break
    if said is None:
        match = _TIME_SCALE_LOG.search(read_text(cell_dir / SERVER_LOG) or "")
        said = match.group(1) if match else cell.env.get("ORCH_SIM_TIME_SCALE")
    try:
        scale = float(said) if said is not None else 1.0
    except (TypeError, ValueError):
        return None
    return scale if math.isfinite(scale) and scale > 0 and scale != 1.0 else None


# --- /server_info captures --------------------------------------------------------------------


def moment_order(moment: str) -> tuple[int, int, str]:
    """Sort key: ready, after-warmup-1.., after-1.., anything else last."""
    if moment == "ready":
        return (0, 0, moment)
    found = re.fullmatch(r"after-warmup-(\d+)", moment)
    if found:
        return (1, int(found.group(1)), moment)
    found = re.fullmatch(r"after-(\d+)", moment)
    if found:
        return (2, int(found.group(1)), moment)
    return (3, 0, moment)


def server_info_capture_name(cell: Cell) -> str:
    """The capture that holds /server_info (by URL; `server_info` when none matches)."""
    if cell.server is not None:
        for capture in cell.server.captures:
            if any(u.rstrip("/").endswith("server_info") for u in capture.urls):
                return capture.name
    return "server_info"


def load_server_infos(cell_dir: Path, cell: Cell) -> list[tuple[str, dict[str, Any]]]:
    """Every /server_info capture of the cell as (moment, document), in time order."""
    name = server_info_capture_name(cell)
    found: list[tuple[str, dict[str, Any]]] = []
    captures = cell_dir / CAPTURES_DIR
    if not captures.is_dir():
        return found
    for path in captures.glob(f"{name}.*.json"):
        moment = path.name[len(name) + 1 : -len(".json")]
        data, _ = read_json(path)
        if isinstance(data, dict):
            found.append((moment, data))
    found.sort(key=lambda item: moment_order(item[0]))
    return found


def internal_states(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`internal_states` (one dict per DP rank), tolerating its absence and odd shapes."""
    states = info.get("internal_states")
    if isinstance(states, dict):
        states = [states]
    if not isinstance(states, list):
        return []
    return [s for s in states if isinstance(s, dict)]


def rank_values(info: Mapping[str, Any], key: str) -> list[float]:
    """`key` of every DP rank that has it as a finite number."""
    values = [finite_float(s.get(key)) for s in internal_states(info)]
    return [v for v in values if v is not None]


def accept_length_of(info: Mapping[str, Any]) -> float | None:
    """The server's cumulative average accept length (mean over DP ranks), if it has one."""
    values = [v for v in rank_values(info, "avg_spec_accept_length") if v > 0]
    return statistics.fmean(values) if values else None


# --- declared flags vs the server's own args ----------------------------------------------------

# Values SGLang rewrites on purpose: (flag, declared, reported) that are the same setting.
_BENIGN_REWRITES = {("speculative-algorithm", "NEXTN", "EAGLE")}


def _comparable(declared: Any, reported: Any) -> bool | None:
    """True/False when the two clearly agree/differ, None when they cannot be compared."""
    if isinstance(declared, bool):
        return declared is reported if isinstance(reported, bool) else None
    if isinstance(declared, int | float):
        if isinstance(reported, bool):
            return None
        try:
            return math.isclose(float(declared), float(reported), rel_tol=1e-9)
        except (TypeError, ValueError):
            return False if reported is None else None
    if isinstance(declared, Mapping):
        if isinstance(reported, str):
            try:
                reported = json.loads(reported)
            except json.JSONDecodeError:
                return None
        return dict(declared) == reported if isinstance(reported, dict) else None
    if isinstance(declared, list | tuple):
        if isinstance(reported, list | tuple):
            return [str(x) for x in declared] == [str(x) for x in reported]
        return None
    if isinstance(declared, str):
        if reported is None:
            return False
        if isinstance(reported, str):
            return declared == reported
        if isinstance(reported, int | float) and not isinstance(reported, bool):
            try:
                return math.isclose(float(declared), float(reported), rel_tol=1e-9)
            except ValueError:
                return False
    return None


def check_server_args(
    declared: Mapping[str, Any], info: Mapping[str, Any], moment: str
) -> list[dict[str, Any]]:
    """Declared flags whose value the server reports differently (the server may rewrite them).

    Flags the server does not report (aliases such as `tp`, launcher-only flags) are skipped.
    """
    checks: list[dict[str, Any]] = []
    compared = 0
    for flag, value in declared.items():
        if value is None or value is False:
            continue
        key = flag.replace("-", "_")
        if key not in info:
            continue
        reported = info[key]
        if (flag, str(value), str(reported)) in _BENIGN_REWRITES:
            continue
        same = _comparable(value, reported)
        if same is None:
            continue
        compared += 1
        if not same:
            checks.append(
                {
                    "name": f"server_arg:{flag}",
                    "ok": False,
                    "detail": f"server reports {key}={reported!r} (declared {value!r}) in "
                    f"server_info.{moment}",
                }
            )
    if compared and not checks:
        checks.append(
            {
                "name": "server_args",
                "ok": True,
                "detail": f"{compared} declared flags match server_info.{moment}",
            }
        )
    return checks

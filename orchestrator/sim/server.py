"""`orch sim serve`: an SGLang-shaped server whose speed follows `model.py`.

It takes SGLang's launch flags, starts one worker process per TP rank (each reports the
environment it really has), computes performance from those environments, the repo's model file
and the host state, then serves SGLang's HTTP API and emits tokens at the modelled rate. Every
sleep is multiplied by the time scale (`--time-scale`, default $ORCH_SIM_TIME_SCALE or 1.0).
The scheduler loop is in `engine.py`, the HTTP API in `api.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.sim import model as m
from orchestrator.sim import starts as ss
from orchestrator.sim import state as st
from orchestrator.sim.api import SimHTTPServer, make_handler
from orchestrator.sim.engine import Engine, Request
from orchestrator.sim.log import Logger
from orchestrator.sim.nodes import (
    JOIN_TIMEOUT,
    HeadJoin,
    internode_factor,
    serve_node,
    stop_on_signals,
)
from orchestrator.sim.profiler import Profiler

SIM_VERSION = "0.4.10.post2+sim"
READY_LINE = "The server is fired up and ready to roll!"


def time_scale_default() -> float:
    """$ORCH_SIM_TIME_SCALE, or 1.0."""
    try:
        return float(os.environ.get("ORCH_SIM_TIME_SCALE", "1.0"))
    except ValueError:
        return 1.0


def build_parser() -> argparse.ArgumentParser:
    """SGLang's launch flags that the simulator understands, plus sim-only ones."""
    p = argparse.ArgumentParser(prog="orch sim serve", description=__doc__)
    p.add_argument("--model-path", "--model", dest="model_path", default="sim-model")
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-draft-model-path", default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--mem-fraction-static", type=float, default=0.85)
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--max-running-requests", type=int, default=256)
    p.add_argument("--random-seed", type=int, default=None)
    p.add_argument("--log-level", default="info")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--enable-metrics", action="store_true")  # /metrics is served either way
    # Simulator-only flags.
    p.add_argument("--time-scale", type=float, default=None)
    p.add_argument(
        "--startup-time",
        type=float,
        default=None,
        help="simulated seconds to load weights and capture CUDA graphs (default: the model's "
        "startup_s); scaled by the time scale like every other wait",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--noise", type=float, default=None, help="override the model's noise")
    p.add_argument("--start-sd", type=float, default=None, help=ss.START_SD_HELP)
    p.add_argument("--sim-model", default=None, help="model file (default ./orch_sim_model.json)")
    p.add_argument("--sim-state", default=None, help="host state file (default $ORCH_SIM_STATE)")
    return p


@dataclass
class Worker:
    """A TP worker process and what it reported."""

    rank: int
    proc: subprocess.Popen[bytes]
    report: dict[str, Any] = field(default_factory=dict)


class SimServer:
    """Everything one `sim serve` process holds."""

    def __init__(self, args: argparse.Namespace, log: Logger) -> None:
        self.args = args
        self.log = log
        self.time_scale = args.time_scale if args.time_scale is not None else time_scale_default()
        self.seed = args.seed if args.seed is not None else args.random_seed
        if self.seed is None and os.environ.get("ORCH_SIM_SEED"):
            self.seed = int(os.environ["ORCH_SIM_SEED"])
        self.model_file = Path(args.sim_model) if args.sim_model else Path(m.MODEL_FILE)
        self.params = (
            m.load_params(self.model_file) if self.model_file.exists() else m.model_params()
        )
        self.noise = float(args.noise if args.noise is not None else self.params["noise"])
        startup = args.startup_time if args.startup_time is not None else self.params["startup_s"]
        self.startup_s = max(0.0, float(startup))
        if os.environ.get("ORCH_SIM_NOISE") and args.noise is None:
            self.noise = float(os.environ["ORCH_SIM_NOISE"])
        self.state_path = st.resolve_state_path(args.sim_state)
        self.state = st.read_state(self.state_path)
        # one speed factor for this whole start: its repeats share it
        self.start = ss.begin(args.start_sd, self.params, self.seed, self.state_path)
        self.cfg = m.ServingConfig(
            tp=args.tp_size,
            speculative_algorithm=args.speculative_algorithm,
            num_steps=args.speculative_num_steps or 0,
            eagle_topk=args.speculative_eagle_topk or 1,
            num_draft_tokens=args.speculative_num_draft_tokens
            or ((args.speculative_num_steps or 0) + 1),
            disable_custom_all_reduce=args.disable_custom_all_reduce,
            disable_cuda_graph=args.disable_cuda_graph,
        )
        self.nnodes = max(1, int(args.nnodes))
        self.local_tp = max(1, self.cfg.tp // self.nnodes)  # this node's TP ranks
        self.workers: list[Worker] = []
        self.effective_env: dict[str, str] = {}
        self.clock = m.clock_factor(self.state, self.cfg.tp)
        self.step = m.step_cost(self.params, self.cfg, {}, self.clock)
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.profiler = Profiler()
        self.engine = Engine(self)
        self.started = time.time()

    # -- workers ----------------------------------------------------------------------------

    def start_workers(self) -> None:
        """Start one process per TP rank and read the environment each really has."""
        bugs = self.params.get("bugs") or {}
        drop = [str(v) for v in bugs.get("drop_env") or []]
        drop_ranks = bugs.get("drop_env_ranks")
        first = self.args.node_rank * self.local_tp
        for rank in range(first, first + self.local_tp):
            env = dict(os.environ)
            if drop and (drop_ranks is None or rank in drop_ranks):
                # The injected bug: this rank is started with a "clean" environment.
                for name in drop:
                    env.pop(name, None)
            argv = [sys.executable, "-m", "orchestrator.sim", "worker", "--rank", str(rank)]
            argv += ["--tp", str(self.cfg.tp), "--nccl-version", str(self.state["nccl_version"])]
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True
            )
            self.workers.append(Worker(rank, proc))
        for worker in self.workers:
            assert worker.proc.stdout is not None
            line = worker.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"TP{worker.rank} worker exited during start-up")
            worker.report = json.loads(line)
        envs = [w.report.get("env", {}) for w in self.workers]
        self.effective_env = m.common_env(envs)
        self.step = m.step_cost(self.params, self.cfg, self.effective_env, self.clock)
        used = int(self.state["memory_total_mib"] * self.args.mem_fraction_static)
        for worker in self.workers:
            gpu = worker.rank - first  # this node's own GPU index
            st.register_app(self.state_path, worker.proc.pid, gpu, used, "python")
        self.loaded_at = time.time()  # a throttle episode `after_load` counts from here
        threading.Thread(target=self._watch_workers, daemon=True, name="watch").start()

    def _watch_workers(self) -> None:
        while not self.stopping.is_set():
            for worker in self.workers:
                rc = worker.proc.poll()
                if rc is not None and not self.stopping.is_set():
                    self.log(f"TP{worker.rank} scheduler process exited with code {rc}", "")
                    self.log(
                        "Received sigquit from a child process. It usually means the child failed."
                    )
                    self.fatal = True
                    self.stopping.set()
                    return
            self.stopping.wait(0.2)

    fatal = False
    loaded_at: float | None = None

    def join_nodes(self, join: HeadJoin) -> None:
        """Every node joined: the model sees all workers' envs and charges the link."""
        local = [w.report.get("env", {}) for w in self.workers]
        per_node = [local] + [join.envs[r] for r in sorted(join.envs)]
        self.effective_env = m.common_env([e for envs in per_node for e in envs])
        self.internode = internode_factor(per_node)
        self.step = m.step_cost(
            self.params, self.cfg, self.effective_env, self.clock / self.internode
        )

        def lost(rank: int) -> None:
            if not self.stopping.is_set():
                self.log(f"node rank {rank} went away: NCCL communicator aborted", "TP0")
                self.fatal = True
                self.stopping.set()

        join.watch(lost)

    internode = 1.0

    def throttle_slowdown(self, now: float) -> float:
        """How much longer a step takes now than at start: throttle episodes lower GPU clocks
        (nvidia-smi shows them), contention episodes slow the host's CPUs (it cannot); see
        `model.throttle_slowdown` and `model.contention_slowdown`."""
        scale = max(self.time_scale, 1e-9)  # simulated seconds since load, as the episodes say
        since = None if self.loaded_at is None else (now - self.loaded_at) / scale
        busy = m.contention_slowdown(self.state, self.requests, since)
        return busy * m.throttle_slowdown(self.state, self.cfg.tp, now, self.loaded_at)

    requests = 0  # generate requests so far (their number places a contention episode)

    def stop_workers(self) -> None:
        """Close the workers' stdin (their signal to exit), then make sure they are gone."""
        for worker in self.workers:
            st.unregister_app(self.state_path, worker.proc.pid)
            with contextlib.suppress(OSError):
                if worker.proc.stdin:
                    worker.proc.stdin.close()
        deadline = time.monotonic() + 5
        for worker in self.workers:
            try:
                worker.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()

    # -- reporting --------------------------------------------------------------------------

    def token_capacity(self) -> int:
        """KV cache tokens (a plausible number, from the memory fraction)."""
        return int(self.kv_gb() * 1024**3 / (70 * 1024))

    def weight_gb(self) -> float:
        """Weights per GPU: a 600 GB model split over tp ranks (capped: the sim never OOMs)."""
        total = float(self.state["memory_total_mib"]) / 1024
        return min(600.0 / max(1, self.cfg.tp), 0.6 * total)

    def kv_gb(self) -> float:
        """What the static memory fraction leaves for the KV cache."""
        total = float(self.state["memory_total_mib"]) / 1024
        return max(1.0, total * float(self.args.mem_fraction_static) - self.weight_gb())

    def token_usage(self, reqs: list[Request]) -> float:
        """KV usage fraction of the running requests."""
        used = sum(r.prompt_tokens + r.generated for r in reqs)
        return used / max(1, self.token_capacity())

    def server_args(self) -> dict[str, Any]:
        """The server args as SGLang reports them."""
        a = self.args
        nodes = {}
        if self.nnodes > 1:  # SGLang reports them on every server; kept out of one-node output
            nodes = {
                "nnodes": a.nnodes,
                "node_rank": a.node_rank,
                "dist_init_addr": a.dist_init_addr,
            }
        return {
            **nodes,
            "model_path": a.model_path,
            "tokenizer_path": a.tokenizer_path or a.model_path,
            "served_model_name": a.served_model_name or a.model_path,
            "host": a.host,
            "port": a.port,
            "tp_size": a.tp_size,
            "dp_size": a.dp_size,
            "mem_fraction_static": a.mem_fraction_static,
            "max_running_requests": a.max_running_requests,
            "random_seed": self.seed,
            "speculative_algorithm": a.speculative_algorithm,
            "speculative_draft_model_path": a.speculative_draft_model_path,
            "speculative_num_steps": a.speculative_num_steps,
            "speculative_eagle_topk": a.speculative_eagle_topk,
            "speculative_num_draft_tokens": a.speculative_num_draft_tokens,
            "disable_custom_all_reduce": a.disable_custom_all_reduce,
            "disable_cuda_graph": a.disable_cuda_graph,
            "decode_log_interval": a.decode_log_interval,
            "log_level": a.log_level,
            "trust_remote_code": a.trust_remote_code,
        }

    def server_info(self) -> dict[str, Any]:
        """`/server_info`: args, internal states (one DP rank), version, and a `sim` block."""
        internal: dict[str, Any] = {
            "last_gen_throughput": self.engine.last_gen_throughput,
            "memory_usage": {
                "weight": round(self.weight_gb(), 2),
                "kvcache": round(self.kv_gb(), 2),
                "token_capacity": self.token_capacity(),
                "graph": 0.0 if self.cfg.disable_cuda_graph else 2.1,
            },
        }
        accept = self.engine.avg_accept_length()
        if self.cfg.speculating and accept is not None:
            internal["avg_spec_accept_length"] = accept
            # Cumulative counters (SGLang keeps them internally) let a client difference two
            # snapshots into a per-run accept length.
            internal["spec_verify_ct"] = self.engine.spec_forwards
            internal["spec_num_accepted_tokens"] = self.engine.spec_tokens
        return {
            **self.server_args(),
            "version": SIM_VERSION,
            "internal_states": [internal],
            "sim": {
                "time_scale": self.time_scale,
                "startup_s": self.startup_s,
                "model_file": str(self.model_file.resolve()) if self.model_file.exists() else None,
                "state_file": str(self.state_path) if self.state_path else None,
                "worker_pids": [w.proc.pid for w in self.workers],
                "clock_factor": self.clock,
                "internode_factor": self.internode,
                "step_ms": self.step.step_ms,
                "expected_accept_len": self.step.accept_len,
                "expected_decode_tok_s": self.step.tok_s,
                "noise": self.noise,
                **self.start.info(),
            },
        }

    # -- generation ---------------------------------------------------------------------------

    def generate(self, prompt_tokens: int, max_new_tokens: int) -> tuple[Request, Iterator[int]]:
        """Submit a request; iterate the token counts of each chunk as the engine emits them."""
        req = Request(uuid.uuid4().hex, prompt_tokens, max_new_tokens)
        self.requests += 1
        self.engine.submit(req)

        def chunks() -> Iterator[int]:
            while True:
                n = req.events.get()
                if n is None:
                    return
                yield n

        return req, chunks()


def serve(args: argparse.Namespace, log: Logger) -> int:
    """Start workers, load, serve until SIGTERM/SIGINT; returns the exit status."""
    srv = SimServer(args, log)
    if srv.time_scale != 1.0:
        # A client other than `orch sim bench` times the server in real seconds: say so loudly.
        log(
            f"WARNING: sim: time scale {srv.time_scale:g}: every simulated second takes "
            f"{srv.time_scale:g} s; /server_info reports sim.time_scale, and a client that does "
            "not divide its timings by it reports scaled, not simulated, numbers"
        )
    log(f"server_args=ServerArgs({', '.join(f'{k}={v!r}' for k, v in srv.server_args().items())})")
    log(srv.start.log_line())
    if not srv.model_file.exists():
        log(f"WARNING: sim: no {srv.model_file} here; using the built-in performance model")
    gpus = int(srv.state["gpu_count"])
    if srv.local_tp > gpus:
        log(
            f"RuntimeError: CUDA error: invalid device ordinal (tp-size {srv.cfg.tp} over "
            f"{srv.nnodes} node(s) needs {srv.local_tp} GPUs per node, this host has {gpus})",
            "TP0",
        )
        return 1
    if srv.nnodes > 1 and not args.dist_init_addr:
        log("ValueError: --nnodes > 1 needs --dist-init-addr HEAD:PORT", "TP0")
        return 1
    if srv.nnodes > 1 and args.node_rank > 0:
        return serve_node(srv, args, log)
    crash = (srv.params.get("bugs") or {}).get("crash_on_start")
    if crash:
        log(f"Scheduler hit an exception: {crash}", "TP0")
        return 1
    try:
        httpd = SimHTTPServer((args.host, args.port), make_handler(srv))
    except OSError as exc:
        log(
            f"ERROR: [Errno {exc.errno}] error while attempting to bind on address "
            f"('{args.host}', {args.port}): {exc.strerror}"
        )
        return 1
    # shutdown() waits for the serve loop's next poll: 0.5 s by default, paid at every stop
    http_thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name="http"
    )
    http_thread.start()
    join: HeadJoin | None = None
    if srv.nnodes > 1:
        try:
            join = HeadJoin(str(args.dist_init_addr), srv.nnodes, log)
        except OSError as exc:
            log(f"ERROR: cannot listen on the dist-init address {args.dist_init_addr}: {exc}")
            httpd.server_close()
            return 1

    stop_on_signals(srv.stopping)
    rc = 0
    try:
        srv.start_workers()
        if join is not None:
            log(f"waiting for {srv.nnodes - 1} more node(s) on {args.dist_init_addr}", "TP0")
            if not join.wait_all(srv.stopping, JOIN_TIMEOUT):
                log(f"RuntimeError: not every node joined within {JOIN_TIMEOUT:g} s", "TP0")
                return 1
            srv.join_nodes(join)
        # Simulated seconds: weights load for 60% of the start-up, CUDA graph capture for 40%.
        startup = srv.startup_s * srv.time_scale
        log(f"Load weight begin. avail mem={srv.state['memory_total_mib'] / 1024:.2f} GB", "TP0")
        if srv.stopping.wait(startup * 0.6):
            return 0
        log(
            f"Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
            f"avail mem={srv.state['memory_total_mib'] / 1024 - srv.weight_gb():.2f} GB, "
            f"mem usage={srv.weight_gb():.2f} GB.",
            "TP0",
        )
        log(
            f"KV Cache is allocated. #tokens: {srv.token_capacity()}, "
            f"K size: {srv.kv_gb() / 2:.2f} GB, V size: {srv.kv_gb() / 2:.2f} GB",
            "TP0",
        )
        if not srv.cfg.disable_cuda_graph:
            log("Capture cuda graph begin. This can take up to several minutes.", "TP0")
        if srv.stopping.wait(startup * 0.4):
            return 0
        if not srv.cfg.disable_cuda_graph:
            log(
                f"Capture cuda graph end. Time elapsed: {srv.startup_s * 0.4:.2f} s. "
                "mem usage=2.10 GB.",
                "TP0",
            )
        log(
            f"max_total_num_tokens={srv.token_capacity()}, chunked_prefill_size=8192, "
            f"max_prefill_tokens=16384, max_running_requests={args.max_running_requests}, "
            f"context_len=131072",
            "TP0",
        )
        log(
            f"sim: clock factor {srv.clock:.3f}, step {srv.step.step_ms:.3f} ms, expected "
            f"accept len {srv.step.accept_len:.3f}, decode {srv.step.tok_s:.2f} tok/s"
        )
        srv.engine.start()
        log(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
        _, warm = srv.generate(8, 8)  # SGLang warms up with one small generate request
        for _ in warm:
            pass
        log('127.0.0.1:0 - "POST /generate HTTP/1.1" 200 OK')
        srv.ready.set()
        log(READY_LINE)
        srv.stopping.wait()
        rc = 1 if srv.fatal else 0
    except Exception as exc:
        log(f"Scheduler hit an exception: {type(exc).__name__}: {exc}", "TP0")
        rc = 1
    finally:
        srv.stopping.set()
        srv.engine.stop()
        httpd.shutdown()
        httpd.server_close()
        if join is not None:
            join.close()
        srv.stop_workers()
        log("Server stopped.")
    return rc


def main(argv: list[str]) -> int:
    """Entry point for `orch sim serve` / `python -m orchestrator.sim serve`."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    log = Logger(sys.stderr)
    if unknown:
        log(f"WARNING: sim: ignoring arguments the simulator does not model: {' '.join(unknown)}")
    return serve(args, log)

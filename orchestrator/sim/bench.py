"""`orch sim bench`: a real benchmark client shaped like `python -m sglang.bench_serving`.

SGLang 0.4.10's result line to `--output-file`, timings divided by the server's time scale.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# Printed on stdout so that a reader of the run (the sglang.bench_serving adapter) knows these
# numbers are already in simulated units, whatever the server's time scale.
SIMULATED_UNITS_LINE = "sim bench: timings divided by the server's time scale {scale:g}"
SGLANG_NATIVE_BACKENDS = frozenset({"sglang", "sglang-native"})

_WORDS = ["hello", "world", "serving", "benchmark", "tokens", "prompt", "random", "ids", "model"]


def build_parser() -> argparse.ArgumentParser:
    """The sglang.bench_serving flags the simulator's client honours."""
    p = argparse.ArgumentParser(prog="orch sim bench", description=__doc__)
    p.add_argument("--backend", default="sglang")
    p.add_argument("--base-url", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--dataset-name", default="sharegpt")
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=1024)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--output-file", default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup-requests", type=int, default=1)
    p.add_argument("--flush-cache", action="store_true")
    p.add_argument("--disable-stream", action="store_true")
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--sharegpt-output-len", type=int, default=None)
    p.add_argument("--timeout", type=float, default=6 * 3600.0, help="per request, seconds")
    p.add_argument("--time-scale", type=float, default=None, help="sim: default from the server")
    return p


@dataclass
class Result:
    """What one request measured, in real seconds."""

    success: bool = False
    prompt_len: int = 0
    output_len: int = 0
    retokenized: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    error: str = ""


def _get_json(url: str, timeout: float = 30.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        data = json.loads(resp.read())
    return data if isinstance(data, dict) else {}


def server_info(base_url: str) -> dict[str, Any]:
    """`/server_info`, falling back to `/get_server_info`; {} when neither answers."""
    for path in ("/server_info", "/get_server_info"):
        try:
            return _get_json(base_url + path)
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return {}


@dataclass(frozen=True)
class Chunk:
    """One streamed chunk that carried text, as the client saw it."""

    at: float  # seconds since the request was sent
    tokens: int  # completion tokens so far, as the server counts them (meta_info)


def stream_timings(backend: str, chunks: list[Chunk]) -> tuple[float, list[float]]:
    """(TTFT, ITLs) in seconds from a request's chunks, as SGLang 0.4.10's bench_serving has it.

    `sglang`/`sglang-native`: a chunk's gap is spread evenly over the new tokens it carries (a
    chunk with no new token is skipped and its time is not a new reference point). OpenAI-style
    backends: one ITL per chunk, whatever it carries.
    """
    if not chunks:
        return 0.0, []
    first = chunks[0]
    itl: list[float] = []
    last_at, last_tokens = first.at, first.tokens
    for chunk in chunks[1:]:
        if backend in SGLANG_NATIVE_BACKENDS:
            new = chunk.tokens - last_tokens
            if new <= 0:
                continue
            itl.extend([(chunk.at - last_at) / new] * new)
        else:
            itl.append(chunk.at - last_at)
        last_at, last_tokens = chunk.at, chunk.tokens
    return first.at, itl


def _request(
    base_url: str,
    backend: str,
    prompt: str,
    prompt_len: int,
    output_len: int,
    stream: bool,
    model: str,
    timeout: float,
) -> Result:
    openai = backend not in SGLANG_NATIVE_BACKENDS
    if openai:
        url = base_url + "/v1/completions"
        payload: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": output_len,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": stream,
        }
    else:
        url = base_url + "/generate"
        payload = {
            "text": prompt,
            "stream": stream,
            "sampling_params": {
                "temperature": 0.0,
                "max_new_tokens": output_len,
                "ignore_eos": True,
            },
        }
    out = Result(prompt_len=prompt_len)
    req = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    text = ""
    chunks: list[Chunk] = []
    # As the real client: the length asked for, unless the server says otherwise.
    out.output_len = output_len
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            if not stream:
                data = json.loads(resp.read())
                text = data["text"] if not openai else data["choices"][0]["text"]
                counted = (data.get("meta_info") or data.get("usage") or {}).get(
                    "completion_tokens"
                )
                out.output_len = int(counted) if counted is not None else output_len
                out.ttft = time.perf_counter() - start
            for raw in resp if stream else ():
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                body = line[5:].strip()
                if body == "[DONE]":
                    break
                data = json.loads(body)
                now = time.perf_counter()
                if openai:
                    delta = data["choices"][0]["text"]
                    if not delta:
                        continue  # the real client ignores chunks without text
                    text += delta
                    usage = data.get("usage") or {}
                    out.output_len = int(usage.get("completion_tokens", out.output_len))
                else:
                    if not data.get("text"):
                        continue
                    text = data["text"]
                    out.output_len = int(data["meta_info"]["completion_tokens"])
                chunks.append(Chunk(now - start, out.output_len))
        out.latency = time.perf_counter() - start
        if stream:
            out.ttft, out.itl = stream_timings(backend, chunks)
        out.retokenized = len(text.split())
        out.success = True
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    return out


def _percentile(values: list[float], q: float) -> float:
    """numpy's default (linear) percentile."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _stats(values: list[float]) -> tuple[float, float, float]:
    if not values:
        return 0.0, 0.0, 0.0
    return statistics.fmean(values), statistics.median(values), statistics.pstdev(values)


def make_prompts(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(prompt text, prompt tokens, output tokens) per request, as bench_serving's random sets."""
    rng = random.Random(args.seed)
    low_in = max(int(args.random_input_len * args.random_range_ratio), 1)
    # As bench_serving: an input has at least one token, an output may be asked for none.
    low_out = int(args.random_output_len * args.random_range_ratio)
    prompts = []
    for _ in range(args.num_prompts):
        n_in = rng.randint(low_in, max(low_in, args.random_input_len))
        n_out = rng.randint(low_out, max(low_out, args.random_output_len))
        words = [_WORDS[rng.randrange(len(_WORDS))] for _ in range(n_in)]
        prompts.append((" ".join(words), n_in, n_out))
    return prompts


def compute_record(
    args: argparse.Namespace,
    results: list[Result],
    duration_s: float,
    scale: float,
    accept_length: float | None,
) -> dict[str, Any]:
    """The bench_serving JSON line (2025 field set) from the measured requests."""
    ok = [r for r in results if r.success]
    duration = duration_s / scale
    ms = 1000.0 / scale
    e2e = [r.latency * ms for r in ok]
    ttft = [r.ttft * ms for r in ok]
    tpot = [(r.latency - r.ttft) * ms / (r.output_len - 1) for r in ok if r.output_len > 1]
    itl = [x * ms for r in ok for x in r.itl]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_len for r in ok)
    record: dict[str, Any] = {
        "backend": args.backend,
        "dataset_name": args.dataset_name,
        "request_rate": args.request_rate,
        "max_concurrency": args.max_concurrency,
        "sharegpt_output_len": args.sharegpt_output_len,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "duration": duration,
        "completed": len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "total_output_tokens_retokenized": sum(r.retokenized for r in ok),
        "request_throughput": len(ok) / duration,
        "input_throughput": total_in / duration,
        "output_throughput": total_out / duration,
    }
    for name, values in (("e2e_latency", e2e), ("ttft", ttft), ("tpot", tpot), ("itl", itl)):
        mean, median, std = _stats(values)
        record[f"mean_{name}_ms"] = mean
        record[f"median_{name}_ms"] = median
        record[f"std_{name}_ms"] = std
        if name == "itl":
            record["p95_itl_ms"] = _percentile(values, 95)
        record[f"p99_{name}_ms"] = _percentile(values, 99)
    record["concurrency"] = sum(e2e) / 1000.0 / duration if duration else 0.0
    record["accept_length"] = accept_length
    return record


def summary(record: dict[str, Any], itl_max: float) -> str:
    """bench_serving's human-readable result block."""

    def row(label: str, value: Any) -> str:
        text = f"{value:<10.2f}" if isinstance(value, float) else f"{value!s:<10}"
        return f"{label:<40} {text}"

    r = record
    lines = [
        "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
        row("Backend:", r["backend"]),
        row("Traffic request rate:", r["request_rate"]),
        row("Max request concurrency:", r["max_concurrency"] or "not set"),
        row("Successful requests:", r["completed"]),
        row("Benchmark duration (s):", r["duration"]),
        row("Total input tokens:", r["total_input_tokens"]),
        row("Total generated tokens:", r["total_output_tokens"]),
        row("Total generated tokens (retokenized):", r["total_output_tokens_retokenized"]),
        row("Request throughput (req/s):", r["request_throughput"]),
        row("Input token throughput (tok/s):", r["input_throughput"]),
        row("Output token throughput (tok/s):", r["output_throughput"]),
        row("Total token throughput (tok/s):", r["input_throughput"] + r["output_throughput"]),
        row("Concurrency:", r["concurrency"]),
    ]
    if r["accept_length"] is not None:
        lines.append(row("Accept length:", r["accept_length"]))
    lines += [
        "{s:{c}^{n}}".format(s="End-to-End Latency", n=50, c="-"),
        row("Mean E2E Latency (ms):", r["mean_e2e_latency_ms"]),
        row("Median E2E Latency (ms):", r["median_e2e_latency_ms"]),
        "{s:{c}^{n}}".format(s="Time to First Token", n=50, c="-"),
        row("Mean TTFT (ms):", r["mean_ttft_ms"]),
        row("Median TTFT (ms):", r["median_ttft_ms"]),
        row("P99 TTFT (ms):", r["p99_ttft_ms"]),
        "{s:{c}^{n}}".format(s="Inter-Token Latency", n=50, c="-"),
        row("Mean ITL (ms):", r["mean_itl_ms"]),
        row("Median ITL (ms):", r["median_itl_ms"]),
        row("P95 ITL (ms):", r["p95_itl_ms"]),
        row("P99 ITL (ms):", r["p99_itl_ms"]),
        row("Max ITL (ms):", itl_max),
        "=" * 50,
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Benchmark the server; returns 0 when at least one request completed."""
    port = args.port or (8000 if args.backend.startswith("vllm") else 30000)
    base_url = (args.base_url or f"http://{args.host}:{port}").rstrip("/")
    if args.dataset_name not in {"random", "random-ids"}:
        print(
            f"sim bench: dataset {args.dataset_name!r} needs a download; using random-ids",
            file=sys.stderr,
        )
    print(f"Namespace({', '.join(f'{k}={v!r}' for k, v in vars(args).items())})")
    info = server_info(base_url)
    if not info:
        print(f"sim bench: no server info at {base_url} (is the server up?)", file=sys.stderr)
    scale = args.time_scale or float((info.get("sim") or {}).get("time_scale") or 1.0)
    print(SIMULATED_UNITS_LINE.format(scale=scale))
    model = args.model or info.get("served_model_name") or info.get("model_path") or "default"
    prompts = make_prompts(args)
    stream = not args.disable_stream
    print(f"#Input tokens: {sum(p[1] for p in prompts)}")
    print(f"#Output tokens: {sum(p[2] for p in prompts)}")
    if prompts and args.warmup_requests > 0:
        print(f"Starting warmup with {args.warmup_requests} sequences...")
        text, n_in, n_out = prompts[0]
        for _ in range(args.warmup_requests):
            warm = _request(base_url, args.backend, text, n_in, n_out, stream, model, args.timeout)
            if not warm.success:
                print(f"Warmup failed: {warm.error}", file=sys.stderr)
                return 1
        print("Warmup completed. Starting main benchmark run...")
    if args.flush_cache:  # as bench_serving: after the warm-up request, before the measured ones
        try:
            urllib.request.urlopen(
                urllib.request.Request(base_url + "/flush_cache", data=b""), timeout=30
            ).read()
        except (urllib.error.URLError, OSError) as exc:
            print(f"flush_cache failed: {exc}", file=sys.stderr)
    workers = args.max_concurrency or max(1, min(len(prompts), 512))
    gate = threading.Semaphore(workers)
    rng = random.Random(args.seed)

    def one(item: tuple[str, int, int]) -> Result:
        try:
            return _request(
                base_url, args.backend, item[0], item[1], item[2], stream, model, args.timeout
            )
        finally:
            gate.release()

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = []
        for item in prompts:
            gate.acquire()
            futures.append(pool.submit(one, item))
            if math.isfinite(args.request_rate) and args.request_rate > 0:
                time.sleep(rng.expovariate(args.request_rate) * scale)
        results = [f.result() for f in futures]
    duration = time.perf_counter() - start
    errors = [r.error for r in results if not r.success]
    for err in errors[:5]:
        print(f"request failed: {err}", file=sys.stderr)
    if len(errors) == len(results):
        print("sim bench: every request failed", file=sys.stderr)
        return 1
    accept = None
    after = server_info(base_url)
    if after.get("speculative_algorithm"):
        accept = (after.get("internal_states") or [{}])[0].get("avg_spec_accept_length")
    record = compute_record(args, results, duration, scale, accept)
    itl_max = max((x * 1000.0 / scale for r in results for x in r.itl), default=0.0)
    print(summary(record, itl_max))
    out_file = args.output_file or (
        f"{args.backend}_{datetime.now().strftime('%m%d')}_{args.num_prompts}_"
        f"{args.random_input_len}_{args.random_output_len}.jsonl"
    )
    with open(out_file, "a") as fh:
        fh.write(json.dumps(record) + "\n")
    return 0


def main(argv: list[str]) -> int:
    """Entry point for `orch sim bench` / `python -m orchestrator.sim bench`."""
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        print(f"sim bench: ignoring arguments: {' '.join(unknown)}", file=sys.stderr)
    return run(args)

"""SGLang's HTTP API over one simulated server: generate (native and OpenAI), health, info.

Output lengths are honoured as asked, 0 included (absent: SGLang's defaults, 128 native and 16
OpenAI); generation answers 503 while the server starts or stops.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from orchestrator.sim import model as m
from orchestrator.sim.engine import Engine, Request, token_text
from orchestrator.sim.outputs import answer
from orchestrator.sim.profiler import Profiler
from orchestrator.sim.prometheus import exposition


class ServedServer(Protocol):
    """What the HTTP API reads of the server it fronts (sim/server.py's SimServer)."""

    @property
    def args(self) -> argparse.Namespace: ...
    @property
    def cfg(self) -> m.ServingConfig: ...
    @property
    def log(self) -> Callable[..., object]: ...  # (message, tag="")
    @property
    def ready(self) -> threading.Event: ...
    @property
    def stopping(self) -> threading.Event: ...
    @property
    def started(self) -> float: ...
    @property
    def time_scale(self) -> float: ...
    @property
    def profiler(self) -> Profiler: ...
    @property
    def engine(self) -> Engine: ...  # its prefix_cache
    @property
    def params(self) -> dict[str, Any]: ...  # the repo's model file (its bugs)

    def server_info(self) -> dict[str, Any]: ...
    def token_usage(self, reqs: list[Request]) -> float: ...
    def generate(
        self, prompt_tokens: int, max_new_tokens: int
    ) -> tuple[Request, Iterator[int]]: ...


def _prompt_tokens(body: dict[str, Any], key: str) -> list[str]:
    """The prompt's tokens: its input ids, else its words."""
    value = body.get("input_ids") if body.get("input_ids") is not None else body.get(key)
    if isinstance(value, list):
        if value and isinstance(value[0], list):
            value = value[0]
        if value and isinstance(value[0], str):
            value = value[0]
    if isinstance(value, list):
        return [str(v) for v in value]
    return str(value or "").split()


def _length(value: Any, default: int) -> int | None:
    """A requested output length: the default when absent, 0 honoured, None when invalid."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _bad_length(key: str) -> dict[str, Any]:
    return {"error": {"message": f"{key} must be a non-negative integer", "code": 400}}


def make_handler(srv: ServedServer) -> type[BaseHTTPRequestHandler]:
    """The HTTP handler class bound to one server."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            pass  # SGLang's access log is quiet by default; errors are logged by the app

        def _json(self, data: Any, status: int = 200) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _text(self, text: str, status: int = 200) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            data = json.loads(raw or b"{}")
            if not isinstance(data, dict):
                raise ValueError("request body must be a JSON object")
            return data

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._text("")
            elif path == "/ping":
                self._text("pong")
            elif path == "/metrics":
                model = srv.args.served_model_name or srv.args.model_path
                self._text(exposition(srv.engine, srv, str(model)))
            elif path == "/health_generate":
                if not srv.ready.is_set() or srv.stopping.is_set():
                    self._text("server is starting", HTTPStatus.SERVICE_UNAVAILABLE)
                    return
                _, chunks = srv.generate(1, 1)
                for _ in chunks:
                    pass
                self._text("")
            elif path in {"/server_info", "/get_server_info"}:
                if path == "/get_server_info":
                    srv.log(
                        "WARNING: Endpoint '/get_server_info' is deprecated and will be "
                        "removed in a future version. Please use '/server_info' instead."
                    )
                info = srv.server_info()
                for state in info.get("internal_states") or ():  # the cache's counters
                    state.update(srv.engine.prefix_cache.stats())
                self._json(info)
            elif path == "/get_model_info":
                self._json(
                    {
                        "model_path": srv.args.model_path,
                        "is_generation": True,
                        "tokenizer_path": srv.args.tokenizer_path or srv.args.model_path,
                    }
                )
            elif path == "/v1/models":
                name = srv.args.served_model_name or srv.args.model_path
                self._json(
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": name,
                                "object": "model",
                                "created": int(srv.started),
                                "owned_by": "sglang",
                                "root": name,
                                "max_model_len": 131072,
                            }
                        ],
                    }
                )
            else:
                self._json({"detail": "Not Found"}, HTTPStatus.NOT_FOUND)

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            try:
                body = self._body()
            except ValueError as exc:
                self._json({"error": {"message": str(exc)}}, HTTPStatus.BAD_REQUEST)
                return
            if path == "/flush_cache":
                self._text(
                    "Cache flushed.\nPlease check backend logs for more details. (When "
                    "there are running or waiting requests, the operation will not be "
                    "performed.)\n"
                )
                srv.engine.prefix_cache.flush()
                srv.log("Cache flushed successfully!", "TP0")
            elif path == "/start_profile":
                status, text = srv.profiler.start(body)
                self._text(text, status)
            elif path == "/stop_profile":
                status, text = srv.profiler.stop()
                self._text(text, status)
            elif path == "/generate":
                self._generate(body)
            elif path == "/v1/completions":
                self._completions(body)
            else:
                self._json({"detail": "Not Found"}, HTTPStatus.NOT_FOUND)

        def _not_ready(self) -> bool:
            if srv.stopping.is_set():
                self._json({"error": {"message": "server is shutting down"}}, 503)
                return True
            if not srv.ready.is_set():
                self._json({"error": {"message": "server is starting"}}, 503)
                return True
            return False

        def _stream_start(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()

        def _event(self, data: Any) -> None:
            text = data if isinstance(data, str) else json.dumps(data)
            self.wfile.write(f"data: {text}\n\n".encode())
            self.wfile.flush()

        def _generate(self, body: dict[str, Any]) -> None:
            if self._not_ready():
                return
            params = body.get("sampling_params") or {}
            max_new = _length(params.get("max_new_tokens"), 128)
            if max_new is None:
                self._json(_bad_length("max_new_tokens"), HTTPStatus.BAD_REQUEST)
                return
            tokens = _prompt_tokens(body, "text")
            prompt = len(tokens)
            cached = srv.engine.prefix_cache.lookup(tokens)
            req, chunks = srv.generate(prompt, max_new)
            start = time.monotonic()

            def meta(done: bool) -> dict[str, Any]:
                info: dict[str, Any] = {
                    "id": req.rid,
                    "finish_reason": {"type": "length", "length": req.generated} if done else None,
                    "prompt_tokens": prompt,
                    "completion_tokens": req.generated,
                    "cached_tokens": cached,
                    "e2e_latency": (time.monotonic() - start) / srv.time_scale,
                }
                if srv.cfg.speculating:
                    info["spec_verify_ct"] = max(0, req.spec_steps)
                return info

            text = ""
            if body.get("stream"):
                self._stream_start()
                try:
                    for n in chunks:
                        text += token_text(req.rid, len(text.split()), n)
                        self._event({"text": text, "meta_info": meta(req.done)})
                    if not req.generated:  # nothing was generated: still say it finished
                        self._event({"text": "", "meta_info": meta(True)})
                    self._event("[DONE]")
                except (BrokenPipeError, ConnectionResetError):
                    return
            else:
                for n in chunks:
                    text += token_text(req.rid, len(text.split()), n)
                self._json({"text": text, "meta_info": meta(True)})

        def _completions(self, body: dict[str, Any]) -> None:
            if self._not_ready():
                return
            max_new = _length(body.get("max_tokens"), 16)
            if max_new is None:
                self._json(_bad_length("max_tokens"), HTTPStatus.BAD_REQUEST)
                return
            tokens = _prompt_tokens(body, "prompt")
            prompt = len(tokens)
            srv.engine.prefix_cache.lookup(tokens)
            req, chunks = srv.generate(prompt, max_new)
            name = body.get("model") or srv.args.served_model_name or srv.args.model_path
            base = {
                "id": req.rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": name,
            }
            if body.get("stream"):
                self._stream_start()
                try:
                    done = 0
                    for n in chunks:
                        delta = token_text(req.rid, done, n)
                        done += n
                        finish = "length" if req.done else None
                        self._event(
                            {
                                **base,
                                "choices": [
                                    {
                                        "index": 0,
                                        "text": delta,
                                        "logprobs": None,
                                        "finish_reason": finish,
                                    }
                                ],
                            }
                        )
                    if not req.generated:  # nothing was generated: still say it finished
                        self._event(
                            {
                                **base,
                                "choices": [
                                    {
                                        "index": 0,
                                        "text": "",
                                        "logprobs": None,
                                        "finish_reason": "length",
                                    }
                                ],
                            }
                        )
                    self._event("[DONE]")
                except (BrokenPipeError, ConnectionResetError):
                    return
            else:
                total = sum(chunks)
                # the answer a greedy model gives: fixed by model, prompt and the repo's code
                text, ids = answer(str(name), " ".join(tokens), srv.params, total)
                self._json(
                    {
                        **base,
                        "choices": [
                            {
                                "index": 0,
                                "text": text,
                                "logprobs": None,
                                "finish_reason": "length",
                                **({"token_ids": ids} if body.get("return_token_ids") else {}),
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt,
                            "completion_tokens": total,
                            "total_tokens": prompt + total,
                        },
                    }
                )

    return Handler


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 overflows on a burst of clients, and each dropped SYN
    # costs the client a 1 s retry: uvicorn listens with 2048, so does the simulator.
    request_queue_size = 2048

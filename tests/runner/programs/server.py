"""A tiny HTTP server whose behaviour the runner tests choose by flags.

GET /health: 503 until --ready-delay has passed (always 503 with --mode never), then 200.
GET /info: {"requests": n}; GET /env: the server's own environment; GET /work: a small answer.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STARTED = time.monotonic()
DEATH = "ERROR EngineCore died unexpectedly: head size 16 is not supported"
EXIT_NOISE = "WARNING leaked shared_memory objects to clean up at shutdown"
# What setproctitle does to make room for a long title, unless SPT_NOENV is set: the memory
# /proc/PID/environ reads (env_start..env_end of /proc/self/stat) is overwritten with NULs.
# vLLM's EngineCore kept the variables its parent added last: the area's end is left as it was.
RETITLE = (
    "import ctypes,os,sys\n"
    "if not os.environ.get('SPT_NOENV'):\n"
    "    f=open('/proc/self/stat').read(); w=f[f.rfind(')')+2:].split()\n"
    "    start, end = int(w[47]), int(w[48])\n"
    "    keep = ctypes.string_at(start, end - start).rstrip(b'\\0').rsplit(b'\\0', 1)[-1]\n"
    "    ctypes.memset(start, 0, end - start - len(keep) - 1)\n"
    "print('retitled', flush=True)\n"
)
COUNT = {"requests": 0}


def daemonize(pidfile: str) -> None:
    """Leave a grandchild in its own session that sleeps and writes its pid to `pidfile`."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            with open(pidfile + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(pidfile + ".tmp", pidfile)
            time.sleep(600)
        os._exit(0)
    os.wait()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["ok", "exit", "never"], default="ok")
    parser.add_argument("--exit-rc", type=int, default=3)
    parser.add_argument("--ready-delay", type=float, default=0.0)
    parser.add_argument(
        "--child", choices=["none", "inherit", "scrub", "retitle", "bytes"], default="none"
    )
    parser.add_argument("--print-env", action="append", default=[])
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--die-after", type=float, default=0.0)
    parser.add_argument("--term-delay", type=float, default=0.0)  # a slow, graceful shutdown
    parser.add_argument("--api-key", default=None)  # a secret passed on the command line
    # Double-fork with setsid: a daemon that leaves the server's tree, group and session.
    parser.add_argument("--daemon-pidfile", default=None)
    parser.add_argument("--print-all-env", action="store_true")
    # POST /v1/completions: answer one choice, or die on it as an engine that cannot run the
    # model does after /health already said 200
    parser.add_argument("--generate", choices=["ok", "die"], default="ok")
    args = parser.parse_args()

    if args.api_key is not None:
        print(f"using api key {args.api_key}", flush=True)
    for name in args.print_env:
        print(f"{name}={os.environ.get(name)}", flush=True)
    if args.print_all_env:
        for name, value in sorted(os.environ.items()):
            print(f"{name}={value}", flush=True)
    if args.daemon_pidfile:
        daemonize(args.daemon_pidfile)
    if args.mode == "exit":
        print("boom: this server refuses to start", flush=True)
        return int(args.exit_rc)

    if args.child != "none":
        # Like an engine spawning workers; "scrub" drops the environment it was given,
        # "retitle" zeroes its environ area as setproctitle does (vLLM's, SGLang's workers).
        env = dict(os.environ) if args.child != "scrub" else {"PATH": os.environ["PATH"]}
        if args.child == "bytes":  # a worker whose NCCL_ALGO is not UTF-8: b"R\xffng"
            env = {k: v for k, v in os.environb.items() if k != b"NCCL_ALGO"}
            env[b"NCCL_ALGO"] = b"R\xffng"
        code = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_DFL); time.sleep(600)"
        if args.child == "retitle":
            code = RETITLE + code
            # ready only once the worker has re-titled, as an engine's workers have by then
            child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
            assert child.stdout is not None
            child.stdout.readline()
        else:
            subprocess.Popen([sys.executable, "-c", code], env=env)

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            COUNT["requests"] += 1
            ready = args.mode == "ok" and time.monotonic() - STARTED >= args.ready_delay
            if self.path == "/health":
                self._send(200 if ready else 503, {"ready": ready})
            elif self.path == "/info":
                self._send(200, {"requests": COUNT["requests"], "pid": os.getpid()})
            elif self.path == "/env":
                self._send(200, dict(os.environ))
            elif self.path == "/work":
                self._send(200, {"ok": True})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self._send(404, {"error": "not found"})
            elif args.generate == "die":
                print(
                    "ERROR EngineCore died unexpectedly: head size 16 is not supported", flush=True
                )
                for _ in range(30):
                    print(
                        "WARNING leaked shared_memory objects to clean up at shutdown", flush=True
                    )
                os._exit(1)
            else:
                self._send(200, {"choices": [{"index": 0, "text": "x"}]})

        def log_message(self, format: str, *a: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)

    def on_term(signum: int, frame: Any) -> None:
        if args.ignore_term:
            print("ignoring SIGTERM", flush=True)
            return

        def stop() -> None:
            time.sleep(args.term_delay)
            httpd.shutdown()

        threading.Thread(target=stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)

    def announce() -> None:
        time.sleep(args.ready_delay)
        if args.mode == "ok":
            print("The server is fired up and ready to roll!", flush=True)

    threading.Thread(target=announce, daemon=True).start()

    def die() -> None:
        time.sleep(args.die_after)
        print("crashing on purpose", flush=True)
        os._exit(9)

    if args.die_after:
        threading.Thread(target=die, daemon=True).start()
    print(f"listening on 127.0.0.1:{args.port}", flush=True)
    httpd.serve_forever(poll_interval=0.05)
    print("server stopped cleanly", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A small real HTTP server for the end-to-end apply tests.

Records its argv and environment in `<record_dir>/<ORCH_CELL_ID>.server.json`, serves
`GET /health` (200 once ready) and `GET /work` (a small JSON answer the bench measures).
`--mode`: ok, exit (dies during startup), never (never ready), scrub (re-execs a worker child
with a scrubbed environment, like an engine that drops what it was given).
`--marker` is ignored: it only makes this server's argv findable with pgrep.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record-dir", required=True)
    parser.add_argument("--mode", choices=["ok", "exit", "never", "scrub"], default="ok")
    parser.add_argument("--marker", default="")
    parser.add_argument("--label", action="append", default=[])
    args = parser.parse_args()

    cell = os.environ.get("ORCH_CELL_ID", "unknown")
    record = {"argv": sys.argv, "env": dict(os.environ), "pid": os.getpid()}
    Path(args.record_dir, f"{cell}.server.json").write_text(json.dumps(record))
    if args.mode == "exit":
        print("fatal: this server refuses to start (mode exit)", flush=True)
        return 4
    if args.mode == "scrub":
        code = "import time; time.sleep(600)"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        subprocess.Popen([sys.executable, "-c", code, "--marker", args.marker], env=env)

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                ok = args.mode != "never"
                self._send(200 if ok else 503, {"ready": ok})
            elif self.path == "/work":
                self._send(200, {"ok": True, "msg": os.environ.get("MSG")})
            else:
                self._send(404, {"error": "not found"})

        def log_message(self, format: str, *a: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)

    def on_term(signum: int, frame: Any) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    print(f"listening on 127.0.0.1:{args.port}", flush=True)
    httpd.serve_forever(poll_interval=0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())

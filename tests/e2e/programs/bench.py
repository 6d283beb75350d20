"""A real benchmark client for the end-to-end apply tests.

Sends `--requests` GETs to `<url>/work`, sleeps `--sleep` seconds (to be caught mid-bench),
writes `result.json` ({"req_per_s", "mean_ms"}) in its cwd (the repeat directory), records its
argv in `<record_dir>/<ORCH_CELL_ID>.bench.json` and appends one line per run to
`<record_dir>/<ORCH_CELL_ID>.count`, so a test can prove which cells ran how often.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--record-dir", required=True)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--label", action="append", default=[])
    args = parser.parse_args()

    cell = os.environ.get("ORCH_CELL_ID", "unknown")
    record_dir = Path(args.record_dir)
    (record_dir / f"{cell}.bench.json").write_text(json.dumps({"argv": sys.argv}))
    started = time.perf_counter()
    for _ in range(args.requests):
        with urllib.request.urlopen(f"{args.url}/work", timeout=5) as response:
            json.loads(response.read())
    elapsed = time.perf_counter() - started
    time.sleep(args.sleep)
    result = {"req_per_s": args.requests / elapsed, "mean_ms": 1000 * elapsed / args.requests}
    Path("result.json").write_text(json.dumps(result))
    print(json.dumps(result), flush=True)
    with open(record_dir / f"{cell}.count", "a") as counter:
        counter.write(f"{time.time()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

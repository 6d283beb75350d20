"""A tiny bench client: GETs <url>/work n times, prints and writes its measurements as JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--rc", type=int, default=0)
    parser.add_argument("--print-env", action="append", default=[])
    parser.add_argument("--out", default="result.json")
    parser.add_argument("--symlink", action="append", default=[])  # NAME=TARGET, left behind
    parser.add_argument("--print-all-env", action="store_true")
    args = parser.parse_args()

    for name in args.print_env:
        print(f"{name}={os.environ.get(name)}", flush=True)
    if args.print_all_env:
        for name, value in sorted(os.environ.items()):
            print(f"{name}={value}", file=sys.stderr, flush=True)
    for link in args.symlink:
        name, _, target = link.partition("=")
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        os.symlink(target, name)
    start = time.perf_counter()
    for _ in range(args.n):
        with urllib.request.urlopen(args.url + "/work", timeout=5) as resp:
            resp.read()
    seconds = time.perf_counter() - start
    time.sleep(args.sleep)
    result = {
        "requests": args.n,
        "seconds": seconds,
        "requests_per_s": args.n / seconds if seconds else 0.0,
        "repeat": os.environ.get("ORCH_REPEAT"),
        "kind": os.environ.get("ORCH_REPEAT_KIND"),
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh)
    print(json.dumps(result), flush=True)
    if args.rc:
        print(f"bench failing on purpose with rc {args.rc}", file=sys.stderr, flush=True)
    return int(args.rc)


if __name__ == "__main__":
    sys.exit(main())

"""Step 9, bench: the warmup and measured runs, each in bench/<n>/ with its exit.json; the
server's captures are taken after each run. Step 10, profile: one more, unmeasured run while
the engine's profiler records (runner/profile.py).

Each run sends prompts of its own where the cell says how (`run_inputs`: the client's seed flag
with a seed derived from the workload and the run, `derive_seed`): a repeat that sent the
warm-up's prompts again would be served from the engine's prefix cache (docs/FACTS.md).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from orchestrator.runner.container_steps import engine_env
from orchestrator.runner.engine_metrics import start_scraper
from orchestrator.runner.guard import GUARD
from orchestrator.runner.layout import (
    BENCH_DIR,
    EXIT_JSON,
    OUTPUTS_JSON,
    PROFILE_DIR,
    PROFILE_JSON,
    REPEATS_JSON,
    STDERR,
    STDOUT,
)
from orchestrator.runner.outputs import take_outputs
from orchestrator.runner.profile import summarize, wait_for_traces
from orchestrator.runner.protocol import (
    Interrupted,
    StepFailed,
    now,
    tail_lines,
    with_tail,
    write_json,
)
from orchestrator.runner.repeat_rule import decide, summary, values_so_far, watched_value
from orchestrator.runner.server import ServerSteps, http_post
from orchestrator.runner.slo_rule import decide_slo
from orchestrator.runner.starts import runs_over_starts

START_ANSWER_WAIT = 10.0  # seconds a profiler start may take to answer before the run goes on


class BenchStep(ServerSteps):
    """Runs the bench command; a server that dies meanwhile fails the cell."""

    # step 9: bench
    def do_bench(self) -> Dict[str, Any]:
        bench = self.bench
        argv = [str(a) for a in bench["argv"]]
        timeout = float(bench.get("timeout", 3600.0))
        starts = int(bench.get("starts", 1)) if self.proc is not None else 1
        runs = runs_over_starts(int(bench.get("warmup", 0)), int(bench.get("repeats", 1)), starts)
        restarts: List[Dict[str, Any]] = []
        # repeats: {min, max, until}: stop once the deciding medians are known (repeat_rule.py)
        rule = (
            dict(bench["settle"], max=int(bench.get("repeats", 1))) if bench.get("settle") else None
        )
        inputs = self.cell.get("run_inputs") or {}
        watched: Dict[str, List[float]] = {}
        stopped: Optional[Dict[str, Any]] = None
        seconds_all = []
        image = self.bench_container_record()  # `bench.container`: pulled once, run per repeat
        for kind, n, server_start in runs:
            self.check()
            if server_start > len(restarts) + 1:  # `bench.starts`: the next group, a new start
                restarts.append(self.restart_server(server_start))
            name = "warmup-%d" % n if kind == "warmup" else str(n)
            rdir = self.path(BENCH_DIR, name)
            os.makedirs(rdir, exist_ok=True)
            seed = derive_seed(seed_key(inputs, argv), kind, n)
            run_argv = argv + run_flags(inputs, seed)
            env = self.base_env(
                {"ORCH_REPEAT_KIND": kind, "ORCH_REPEAT": str(n), "ORCH_BENCH_SEED": str(seed)}
            )
            started, watch = run_argv, None
            if image is not None:
                started = self.bench_container_argv(image, run_argv, os.path.abspath(rdir), name)
                env, watch = engine_env(image, env), self.bench_container_watch(image, name)
            # the engine's /metrics while a measured repeat runs (engine_metrics.py)
            scraper = (
                start_scraper(self.cell.get("engine_metrics"), rdir) if kind == "measure" else None
            )
            try:
                rc, timed_out, start, end, server_gone = self.run_bench_once(
                    started, rdir, env, timeout, watch
                )
            finally:
                scraped = scraper.stop() if scraper is not None else None
            if watch is not None and (timed_out or rc != 0):
                self.bench_container_stop(watch)  # a client killed on timeout leaves it to conmon
            seconds = end - start
            result_file = bench.get("result_file")
            seen = (
                {str(w["metric"]): watched_value(rdir, w) for w in rule["watch"]}
                if rule is not None and kind == "measure" and rc == 0 and not timed_out
                else None
            )
            write_json(
                os.path.join(rdir, EXIT_JSON),
                {
                    "rc": rc,
                    "seconds": round(seconds, 3),
                    # epoch seconds on the clock telemetry samples are stamped with
                    "start": round(start, 3),
                    "end": round(end, 3),
                    # the host's local-time offsets then: server logs stamp local wall time
                    "utc_offset_s": utc_offset(start),
                    "utc_offset_end_s": utc_offset(end),
                    "argv": run_argv,
                    "timed_out": timed_out,
                    "kind": kind,
                    "n": n,
                    # the run's seed, and whether its client got it (None: $ORCH_BENCH_SEED only)
                    "seed": seed,
                    "seed_flag": inputs.get("seed_flag"),
                    "result_file_present": (
                        os.path.exists(os.path.join(rdir, str(result_file)))
                        if result_file
                        else None
                    ),
                    **({"watched": seen} if seen is not None else {}),
                    **({"engine_metrics": scraped} if scraped is not None else {}),
                    **({"server_start": server_start} if starts > 1 else {}),
                    **({"container": dict(image, argv=started)} if image is not None else {}),
                },
            )
            self.emit(
                {
                    "event": "repeat",
                    "kind": kind,
                    "n": n,
                    "rc": rc,
                    "seconds": round(seconds, 3),
                    "timed_out": timed_out,
                }
            )
            label = "warmup %d" % n if kind == "warmup" else "repeat %d" % n
            if server_gone is not None:
                raise StepFailed(self.server_exit_reason(server_gone, "during bench %s" % label))
            if timed_out or rc != 0:
                why = "timed out after %gs" % timeout if timed_out else "rc %s" % rc
                raise StepFailed(
                    with_tail(
                        "bench %s failed (%s)" % (label, why),
                        tail_lines(os.path.join(rdir, STDERR)),
                        "%s/%s/%s" % (BENCH_DIR, name, STDERR),
                    )
                )
            if kind == "measure":
                seconds_all.append(round(seconds, 3))
            self.capture("after-warmup-%d" % n if kind == "warmup" else "after-%d" % n)
            if self.proc is not None and self.proc.poll() is not None:
                raise StepFailed(self.server_exit_reason(self.proc.returncode, "during bench"))
            if rule is not None and seen is not None:
                values_so_far(watched, seen)
                # an SLO search's level stops once its SLO is decided (slo_rule.py)
                reason, judged = (decide_slo if rule.get("slo") else decide)(watched, rule, n)
                if reason is not None:
                    stopped = summary(rule, n, reason, judged)
                    write_json(self.path(REPEATS_JSON), stopped)
                    self.emit({"event": "repeats", "ran": n, "stopped": reason})
                    break
        more: Dict[str, Any] = {"server_starts": restarts} if restarts else {}
        # after the measured repeats, within the same server start: never inside a timing
        outputs = take_outputs(bench, self.path(OUTPUTS_JSON))
        if outputs is not None:
            more["outputs"] = outputs
        if image is not None:
            more["container"] = image
        if stopped is not None:
            return {
                "seconds": seconds_all,
                "repeats": stopped["ran"],
                "stopped": stopped["stopped"],
                **more,
            }
        return {"seconds": seconds_all, **more}

    def restart_server(self, start: int) -> Dict[str, Any]:
        """Stop the server and start it again for start number `start` (runner/cell.py)."""
        raise NotImplementedError

    # step 10: profile
    def do_profile(self) -> Dict[str, Any]:
        """Start the engine's profiler, drive it with one unmeasured bench run, stop it and
        summarize its trace. A profile that cannot be taken is said, never a failed cell: the
        measured repeats are already in."""
        spec = self.cell.get("profile") or {}
        folder = self.path(PROFILE_DIR)
        os.makedirs(folder, exist_ok=True)
        asked = int(spec.get("num_steps", 20))
        body = {
            "output_dir": os.path.abspath(folder),
            "num_steps": asked,
            "activities": list(spec.get("activities") or ["CPU", "GPU"]),
        }
        # An older SGLang answers a start with num_steps only once its trace is saved: after
        # the steps the bench drives. So the answer is awaited a moment, then the run goes on.
        answer: List[Dict[str, Any]] = []
        asking = threading.Thread(
            target=lambda: answer.append(http_post(str(spec["start_url"]), 600.0, body)),
            daemon=True,
        )
        asking.start()
        asking.join(START_ANSWER_WAIT)
        started = answer[0] if answer else {"status": 200, "pending": True}
        if started.get("status") != 200:
            why = started.get("error") or "HTTP %s: %s" % (
                started.get("status"),
                started.get("body"),
            )
            return {"ok": False, "error": "start_profile: %s" % str(why).strip()}
        rdir = self.path(BENCH_DIR, "profile")
        os.makedirs(rdir, exist_ok=True)
        argv = [str(a) for a in self.bench["argv"]]
        seed = derive_seed(seed_key(self.cell.get("run_inputs") or {}, argv), "profile", 1)
        env = self.base_env(
            {"ORCH_REPEAT_KIND": "profile", "ORCH_REPEAT": "profile", "ORCH_BENCH_SEED": str(seed)}
        )
        argv += run_flags(self.cell.get("run_inputs") or {}, seed)
        image, watch = self.bench_container_record(), None
        if image is not None:  # the profile's drive runs where the measured repeats ran
            argv = self.bench_container_argv(image, argv, os.path.abspath(rdir), "profile")
            env, watch = engine_env(image, env), self.bench_container_watch(image, "profile")
        rc, timed_out, _s, _e, gone = self.run_bench_once(
            argv, rdir, env, float(self.bench.get("timeout", 3600.0)), watch
        )
        stopped = None
        if not wait_for_traces(folder, 2.0) and spec.get("stop_url"):
            stopped = http_post(str(spec["stop_url"]), 60.0, {})  # fewer steps than asked
        names = wait_for_traces(folder, float(spec.get("wait", 30.0)))
        detail: Dict[str, Any] = {"ok": bool(names), "files": names, "bench_rc": rc}
        if started.get("pending"):
            asking.join(1.0)
            detail["start"] = answer[0] if answer else "no answer yet (an older SGLang)"
        if timed_out or gone is not None:
            detail["bench"] = "timed out" if timed_out else "the server died"
        if stopped is not None:
            detail["stop"] = stopped.get("status", stopped.get("error"))
        if not names:
            detail["error"] = "no trace file in %s/ after the run" % PROFILE_DIR
            return detail
        try:
            summary = summarize(os.path.join(folder, names[0]), asked)
        except (OSError, ValueError) as exc:
            detail.update(ok=False, error="cannot read %s: %s" % (names[0], exc))
            return detail
        summary["files"] = names
        write_json(self.path(PROFILE_JSON), summary)
        detail["steps"] = summary["steps"]
        return detail

    def run_bench_once(
        self,
        argv: List[str],
        rdir: str,
        env: Dict[str, str],
        timeout: float,
        watch: Optional[Tuple[str, str, Optional[str]]] = None,
    ) -> Tuple[Optional[int], bool, float, float, Optional[int]]:
        """One bench run: (rc, timed_out, start, end, server rc when the server died meanwhile);
        start and end are epoch seconds on the runner's clock (`protocol.now`). `watch`: the
        run's container (runtime, name, conf), stopped by the guard if the runner dies."""
        start = now()
        gone: List[int] = []

        def server_died() -> Optional[str]:
            if self.proc is not None:
                rc = self.proc.poll()
                if rc is not None:
                    gone.append(rc)
                    return "server died"
            return None

        out = open(os.path.join(rdir, STDOUT), "wb")  # noqa: SIM115
        err = open(os.path.join(rdir, STDERR), "wb")  # noqa: SIM115
        try:
            proc = self.spawn(
                argv,
                cwd=rdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        except OSError as exc:
            err.write(("cannot start bench %r: %s\n" % (argv[0], exc)).encode())
            return 127, False, start, now(), None
        finally:
            # The child holds its own copies of the descriptors.
            out.close()
            err.close()
        if watch is not None:
            GUARD.watch_container(proc.pid, *watch)
        try:
            rc, timed_out, _why = self.wait_proc(proc, timeout, server_died)
        except Interrupted:
            end = now()
            write_json(
                os.path.join(rdir, EXIT_JSON),
                {
                    "rc": proc.returncode,
                    "seconds": round(end - start, 3),
                    "start": round(start, 3),
                    "end": round(end, 3),
                    "argv": argv,
                    "timed_out": False,
                    "interrupted": True,
                },
            )
            raise
        return rc, timed_out, start, now(), (gone[0] if gone else None)


def seed_key(inputs: Dict[str, Any], argv: List[str]) -> str:
    """What a cell's seeds are derived from: the planner's workload key (the bench's adapter
    and args, not where the server listens), else the bench argv."""
    return str(inputs.get("seed_key") or "\0".join(argv))


def derive_seed(key: str, kind: str, n: int) -> int:
    """The seed of one run: a hash of the workload (`seed_key`), the kind of run (warmup,
    measure, profile) and its number, below 2**31 (numpy's seeds are 32-bit).

    The same workload gets the same prompts in its n-th repeat wherever it runs (cells that
    differ in the server, the env or the commit compare like with like); each run of a cell
    gets prompts of its own, so no run is served from what an earlier one left in the cache.
    """
    text = "%s\0%s\0%d" % (key, kind, n)
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) % 2**31


def run_flags(inputs: Dict[str, Any], seed: int) -> List[str]:
    """What a run adds to the bench argv (cell.py RunInputs): flags, then the seed flag."""
    extra = [str(f) for f in inputs.get("flags") or ()]
    if inputs.get("seed_flag"):
        extra += [str(inputs["seed_flag"]), str(seed)]
    return extra


def utc_offset(epoch: float) -> int:
    """Seconds east of UTC of this host's local time at `epoch` (DST included)."""
    return int(time.localtime(epoch).tm_gmtoff)

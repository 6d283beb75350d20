"""Step 10, profile: a short profile of the server after the measured repeats, through the
engine's own profiler endpoints (`profile:`), summarized on the host as time per phase per
decode step.

SGLang's protocol (docs/FACTS.md): POST /start_profile with {"output_dir", "num_steps",
"activities"}; the engine records that many forward steps and writes one torch-profiler Chrome
trace per TP rank into output_dir (`<id>-TP-<rank>.trace.json.gz`), stopping by itself; POST
/stop_profile stops one started without `num_steps`. One unmeasured bench run drives the
engine meanwhile (bench/profile/), so the measured repeats never carry the profiler's cost.

The summary (profile.json) reads rank 0's trace: `gpu_user_annotation` events by name (the
phases an engine annotates), else `user_annotation` ones, and `kernel` events by family (GEMM,
attention, communication, other), each as milliseconds per decode step, steps counted from the
trace's "decode step" events where it has them, else the steps asked for.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import time
from typing import Any, Dict, List, Optional

STEP_EVENT = "decode step"
# Kernel families by name: what a per-step table of a CUDA trace can be read by.
KERNEL_FAMILIES = (
    ("communication", re.compile(r"nccl|all_?reduce|allgather|reduce_?scatter|cross_device", re.I)),
    ("attention", re.compile(r"flash|attn|attention|fmha|mla|paged", re.I)),
    ("gemm", re.compile(r"gemm|matmul|cutlass|xmma|cublas|sm\d+_|wgmma", re.I)),
)
TRACE_SUFFIXES = (".trace.json.gz", ".trace.json", ".pt.trace.json.gz", ".pt.trace.json")


def trace_files(folder: str) -> List[str]:
    """The trace files in `folder`, rank 0 first (names sort by rank within one profile)."""
    if not os.path.isdir(folder):
        return []
    names = [n for n in os.listdir(folder) if n.endswith(TRACE_SUFFIXES)]
    return sorted(names, key=lambda n: (_rank(n), n))


def _rank(name: str) -> int:
    found = re.search(r"TP-(\d+)", name)
    return int(found.group(1)) if found else 0


def wait_for_traces(folder: str, seconds: float) -> List[str]:
    """The trace files once some exist and their sizes hold still for a moment (the engine
    writes them after the last step), or whatever is there after `seconds`."""
    deadline = time.monotonic() + seconds
    last: Optional[List[Any]] = None
    while True:
        names = trace_files(folder)
        sizes = [os.path.getsize(os.path.join(folder, n)) for n in names]
        now = [names, sizes]
        if names and now == last:
            return names
        if time.monotonic() >= deadline:
            return names
        last = now
        time.sleep(0.5)


def _events(path: str) -> List[Dict[str, Any]]:
    if path.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
    else:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return [e for e in events or [] if isinstance(e, dict) and e.get("ph") == "X"]


def _family(name: str) -> str:
    for family, pattern in KERNEL_FAMILIES:
        if pattern.search(name):
            return family
    return "other"


def summarize(path: str, steps_asked: int) -> Dict[str, Any]:
    """One trace as milliseconds per decode step: phases (annotations) and kernel families."""
    events = _events(path)
    steps = sum(1 for e in events if e.get("name") == STEP_EVENT)
    per = steps or max(1, steps_asked)
    phases: Dict[str, float] = {}
    kernels: Dict[str, float] = {}
    annotated = [e for e in events if e.get("cat") == "gpu_user_annotation"] or [
        e for e in events if e.get("cat") == "user_annotation" and e.get("name") != STEP_EVENT
    ]
    for e in annotated:
        name = str(e.get("name"))
        phases[name] = phases.get(name, 0.0) + float(e.get("dur") or 0.0)
    for e in events:
        if e.get("cat") == "kernel":
            family = _family(str(e.get("name", "")))
            kernels[family] = kernels.get(family, 0.0) + float(e.get("dur") or 0.0)
    return {
        "trace": os.path.basename(path),
        "steps": per,
        "steps_from": "trace" if steps else "asked",
        "phases_ms_per_step": {k: round(v / 1000.0 / per, 4) for k, v in phases.items()},
        "kernels_ms_per_step": {k: round(v / 1000.0 / per, 4) for k, v in kernels.items()},
        "events": len(events),
    }

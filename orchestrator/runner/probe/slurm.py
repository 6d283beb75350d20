"""The Slurm job a snapshot was taken in: its id, partition, nodes, time limit and the GPUs Slurm
granted, from the `SLURM_*` variables Slurm set and `scontrol show job -o -d <id>`.

Host-side code (Python 3.8, standard library only). The probe's `env` item keeps only the
variables that shape serving, so this item is the one place the job's facts are recorded: the
whole `SLURM_*` environment (secret-named values redacted), the GPU variables as Slurm set them,
and scontrol's line as it printed it (URL credentials masked; the runner's redaction of every
cell file hides the run's secret values in it too).
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any, Dict, List, Mapping, Optional, Tuple

from orchestrator.runner.redaction import REDACTED, is_secret_name, mask_url_credentials

ENV_PREFIXES = ("SLURM_", "SLURMD_")
# the GPUs Slurm handed the job and its step, as each variable spells them
GPU_VARIABLES = (
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "SLURM_GPUS_ON_NODE",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
)
# `scontrol show job -d` lists each node's allocation as `Nodes=... CPU_IDs=... GRES=...`
_NODE_GRES = re.compile(r"(?:^|\s)Nodes=(\S+)\s.*?\sGRES=(\S*)")
_UNSET = ("", "(null)", "N/A", "None")
SCONTROL_TIMEOUT = 15.0  # slurmctld answers in milliseconds; a hung one must not hold a cell


def slurm_item(environ: Mapping[str, str]) -> Dict[str, Any]:
    """The snapshot's `slurm` item: the job's facts, or `{"absent": why}` outside a job."""
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return {"absent": "not in a Slurm job (no SLURM_JOB_ID)"}
    return slurm_facts(environ, scontrol_job(job_id))


def scontrol_job(job_id: str) -> Any:
    """`scontrol show job -o -d <id>`'s text, or `{"absent": why}`."""
    argv = scontrol_command(job_id)
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, LC_ALL="C"),
            timeout=SCONTROL_TIMEOUT,
        )
    except FileNotFoundError:
        return {"absent": "scontrol not found on PATH"}
    except subprocess.TimeoutExpired:
        return {"absent": "scontrol timed out after %gs" % SCONTROL_TIMEOUT}
    except OSError as exc:
        return {"absent": "cannot run scontrol: %s" % exc}
    if done.returncode != 0:
        why = (done.stderr or done.stdout).decode("utf-8", "replace").strip()[-300:]
        return {"absent": "scontrol rc %d: %s" % (done.returncode, why)}
    return done.stdout.decode("utf-8", "replace")


def scontrol_command(job_id: str) -> List[str]:
    """The argv that shows the job in one line, with each node's GRES (the IDX granted)."""
    return ["scontrol", "show", "job", "-o", "-d", job_id]


def parse_scontrol_job(text: str) -> Tuple[Dict[str, str], Dict[str, str]]:
    """scontrol's one-line job as ({field: value}, {nodes: GRES granted there}).

    A field is `Key=value` up to the next space; the per-node `Nodes=`/`GRES=` pairs of `-d`
    go to the second mapping (the first mapping keeps the job's own `NodeList=`).
    """
    line = text.strip().splitlines()[0] if text.strip() else ""
    fields = {}  # type: Dict[str, str]
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    by_node = {}  # type: Dict[str, str]
    for nodes, gres in _NODE_GRES.findall(line):
        by_node[nodes] = gres
    return fields, by_node


def _set(value: Optional[str]) -> Optional[str]:
    return None if value is None or value.strip() in _UNSET else value


def _gres_requested(fields: Mapping[str, str]) -> Optional[str]:
    """`TresPerNode=gres:gpu:2` (or Slurm 23's `gres/gpu:2`) as `gpu:2`."""
    value = _set(fields.get("TresPerNode"))
    if value is None:
        return None
    return re.sub(r"(^|,)gres[:/]", r"\1", value)


def slurm_facts(environ: Mapping[str, str], scontrol: Any) -> Dict[str, Any]:
    """The job's facts from Slurm's variables and `scontrol`'s output (text, or an item
    `{"absent": reason}` when it could not run). The caller makes sure SLURM_JOB_ID is set."""
    env = {}  # type: Dict[str, str]
    for name in sorted(environ):
        if name.startswith(ENV_PREFIXES):
            env[name] = REDACTED if is_secret_name(name) else environ[name]
    fields = {}  # type: Dict[str, str]
    by_node = {}  # type: Dict[str, str]
    if isinstance(scontrol, str):
        scontrol, _ = mask_url_credentials(scontrol.strip())
        fields, by_node = parse_scontrol_job(scontrol)
    nodes = environ.get("SLURM_JOB_NODELIST") or _set(fields.get("NodeList"))
    count = environ.get("SLURM_JOB_NUM_NODES") or fields.get("NumNodes")
    return {
        "job_id": environ.get("SLURM_JOB_ID"),
        "job_name": environ.get("SLURM_JOB_NAME") or _set(fields.get("JobName")),
        "partition": environ.get("SLURM_JOB_PARTITION") or _set(fields.get("Partition")),
        "account": environ.get("SLURM_JOB_ACCOUNT") or _set(fields.get("Account")),
        "qos": environ.get("SLURM_JOB_QOS") or _set(fields.get("QOS")),
        "nodes": nodes,
        "node_count": int(count) if count and count.isdigit() else None,
        "node_id": environ.get("SLURM_NODEID"),  # this node's rank in the job
        "node_name": environ.get("SLURMD_NODENAME"),
        "step_id": environ.get("SLURM_STEP_ID"),
        "time_limit": _set(fields.get("TimeLimit")),
        "gres": _gres_requested(fields),  # per node, as requested
        "gres_granted": _set(fields.get("JOB_GRES")),  # the whole job's
        "gres_by_node": by_node,  # nodes -> `gpu:2(IDX:0-1)`: which devices each node gave
        "gpus": {name: environ[name] for name in GPU_VARIABLES if name in environ},
        "env": env,
        "scontrol": scontrol,
    }

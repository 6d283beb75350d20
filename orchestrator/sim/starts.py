"""The simulator's start-to-start level of noise: one speed factor per server start.

Repeats against one start share its memory placement, clocks, CUDA-graph capture and
autotuning; a real GPU's starts differ by 1-2 %. Each `sim serve` counts itself a start of its
host (`state.next_start`) and draws its factor from the seed and that number
(`model.start_factor`), so a seeded run is reproducible and its starts still differ.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.sim import model as m
from orchestrator.sim import state as st

START_SD_ENV = "ORCH_SIM_START_SD"
START_SD_HELP = (
    "sd of the speed factor drawn once per server start (default $ORCH_SIM_START_SD, else the "
    "model's start_sd)"
)


def start_sd(flag: float | None, params: Mapping[str, Any]) -> float:
    """The start-to-start sd: --start-sd, else $ORCH_SIM_START_SD, else the model's."""
    if flag is not None:
        return max(0.0, float(flag))
    env = os.environ.get(START_SD_ENV)
    if env:
        return max(0.0, float(env))
    return max(0.0, float(params.get("start_sd", 0.0)))


@dataclass(frozen=True)
class ServerStart:
    """This server start: its number on the host, its speed factor (>1 is slower), the sd."""

    index: int
    factor: float
    sd: float

    def info(self) -> dict[str, Any]:
        """The `sim` block's part of /server_info, so tests and bundles can see the factor."""
        return {"start_sd": self.sd, "start_index": self.index, "start_factor": self.factor}

    def log_line(self) -> str:
        """What the server log says about it at start-up."""
        return (
            f"sim: server start {self.index} on this host: speed factor {self.factor:.4f} "
            f"(start-to-start sd {self.sd:g})"
        )


def begin(
    flag: float | None, params: Mapping[str, Any], seed: int | None, state: Path | None
) -> ServerStart:
    """Count this start on the host and draw its factor."""
    sd = start_sd(flag, params)
    index = st.next_start(state)
    return ServerStart(index, m.start_factor(seed, index, sd), sd)

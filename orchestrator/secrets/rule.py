"""Which names are secret and how long a value must be to be found by value: one rule, the
runner's (runner/redaction.py), re-exported for the controller side."""

from __future__ import annotations

from orchestrator.runner.redaction import MIN_SECRET_LENGTH as MIN_SECRET_LENGTH
from orchestrator.runner.redaction import REDACTED as REDACTED
from orchestrator.runner.redaction import is_secret_name as is_secret_name

# What the controller scrubs by value from its own JSON (plan.json, run.json, progress): values
# this short are secret only by name in text the host writes (MIN_SECRET_LENGTH), but the
# controller's own fields hold whole values, where a 4-character token is still worth hiding.
MIN_VALUE_LENGTH = 4

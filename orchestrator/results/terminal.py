"""Text from a bundle made safe for a terminal: no escape sequences, no control characters.

A bundle may come from anyone (`orch show their-run.tar.gz`): an OSC or CSI sequence in a
reason or an axis value could retitle the window, hide lines or fake output. Newlines and tabs
stay; everything else below space, DEL and the C1 range go, whole sequences first.
"""

from __future__ import annotations

import re

# ESC-introduced sequences (7-bit) and their 8-bit C1 forms: OSC/DCS/PM/APC/SOS strings up to
# their terminator (BEL or ST), CSI up to its final byte, then any other two-byte escape.
_SEQUENCE = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\|\x9c|$)"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -/]*[0-~]?",
    re.DOTALL,
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` without terminal escape sequences and control characters (newline and tab kept)."""
    return _CONTROL.sub("", _SEQUENCE.sub("", text))

"""A tag's digest as its registry names it now, asked from this host (`runner.pyz
resolve-image`): what a run pins a `server.container.image` to. Stdlib only."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Optional, Tuple

from orchestrator.runner.image import DIGEST, ImageRefError, parse_image


def registry_digest(
    image: str, tls_verify: bool = True, conf: Optional[str] = None, timeout: float = 120.0
) -> Tuple[Optional[str], str, bool]:
    """(digest, "", True) for `image`'s manifest in its registry now; (None, why, found):
    `found` False when the registry answered that it has no such tag (an input error), True
    when it could not be asked (skopeo missing, registry unreachable)."""
    try:
        ref = parse_image(image)
    except ImageRefError as exc:
        return None, str(exc), False
    if ref.digest:
        return ref.digest, "", True
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        return None, "skopeo is not installed on this host (it asks the registry)", True
    argv = [skopeo, "inspect", "--format", "{{.Digest}}"]
    if not tls_verify:
        argv.append("--tls-verify=false")
    argv.append("docker://" + ref.text())
    env = dict(os.environ)
    if conf:
        env["CONTAINERS_CONF"] = conf
    try:
        done = subprocess.run(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "skopeo inspect: %s" % exc, True
    out = done.stdout.decode("utf-8", "replace").strip()
    if done.returncode == 0 and DIGEST.fullmatch(out):
        return out, "", True
    err = done.stderr.decode("utf-8", "replace").strip()[-400:]
    # The registry's own answer for a name or tag it does not hold (distribution spec codes).
    unknown = any(w in err for w in ("manifest unknown", "MANIFEST_UNKNOWN", "NAME_UNKNOWN"))
    return None, "skopeo inspect (rc %d): %s" % (done.returncode, err or out), not unknown

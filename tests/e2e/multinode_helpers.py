"""What the multi-node e2e tests share: a cable between two namespaced test hosts, the processes
a test started (found by its tag), and a generic server over several nodes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sshhosts import SSHTestHost


def link(a: SSHTestHost, b: SSHTestHost) -> str | None:
    """A cable between two namespaced hosts (each reaches the other's address over it), as the
    nodes of a cluster reach each other; None in loopback mode, where they share one network.
    Deleting `mn-a` in the returned namespace removes it."""
    if a.namespace is None or b.namespace is None:
        return None

    def ip(*argv: str) -> None:
        subprocess.run(["ip", *argv], check=True, capture_output=True)

    ip("-n", a.namespace, "link", "add", "mn-a", "type", "veth", "peer", "name", "mn-b")
    ip("-n", a.namespace, "link", "set", "mn-b", "netns", b.namespace)
    ip("-n", a.namespace, "link", "set", "mn-a", "up")
    ip("-n", b.namespace, "link", "set", "mn-b", "up")
    ip("-n", a.namespace, "route", "add", f"{b.address}/32", "dev", "mn-a")
    ip("-n", b.namespace, "route", "add", f"{a.address}/32", "dev", "mn-b")
    return a.namespace


def unlink(namespace: str | None) -> None:
    """Remove the cable `link` made (nothing in loopback mode)."""
    if namespace is not None:
        subprocess.run(["ip", "-n", namespace, "link", "del", "mn-a"], check=False)


def processes(tag: str) -> dict[int, bytes]:
    """pid -> command line of the processes carrying a test's MN_TEST=<tag>."""
    out = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"MN_TEST={tag}".encode() in env:
                out[int(pid)] = cmd
    return out


# A generic server over several nodes, as SGLang's launch is: the same command on every node.
# argv: rank nnodes head_host head_port http_port bind mode. The other nodes join the head's
# dist port over the network; the head serves HTTP on `bind` once they all joined (`join-first`,
# as SGLang does) or at once (`serve-first`). A node's part ends when the head's does.
MULTINODE_SERVER = r"""
import socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, HTTPServer
rank, nnodes, head, dist, port, bind, mode = sys.argv[1:8]
rank, nnodes, dist, port = int(rank), int(nnodes), int(dist), int(port)
if rank:
    deadline = time.time() + 60
    while True:
        try:
            conn = socket.create_connection((head, dist), timeout=2)
            break
        except OSError:
            if time.time() > deadline:
                sys.exit("node rank %d never reached the head at %s:%d" % (rank, head, dist))
            time.sleep(0.1)
    print("node rank %d joined the head" % rank, flush=True)
    conn.settimeout(None)
    conn.recv(1)
    sys.exit(0)
joined = []
listener = socket.create_server(("0.0.0.0", dist))
def accept():
    while len(joined) < nnodes - 1:
        joined.append(listener.accept()[0])
        print("node joined (%d of %d)" % (len(joined), nnodes - 1), flush=True)
if mode == "join-first":
    accept()
else:
    threading.Thread(target=accept, daemon=True).start()
class Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
print("serving on %s:%d" % (bind, port), flush=True)
HTTPServer((bind, port), Ok).serve_forever()
"""

"""The in-sandbox runner's protocol, shared by evaluators.execution.batch (one sandbox per program) and
evaluators.execution.pool (warm sandboxes): the runner's program text, one program's request to it and
the result frames it sends back. Runs in the harness only.

A request is 8 bytes of length (big-endian), then JSON {"tests": [...], "stop": bool}. A frame is
one JSON header line ({"rc", "killed", "wall", "n": [sizes]}, or {"done": true} after a
program's last test), then the stdout, stderr and channel bytes whose sizes `n` gives.
"""

from __future__ import annotations

import json

from evaluators.execution.sandboxed import source

# evaluators/execution/sandboxed/runner.py as text: the sandbox runs it as its main script
RUNNER = source("runner")


def request(specs: list[dict], stop: bool) -> bytes:
    """One program's request to RUNNER: its length (8 bytes, big-endian), then its JSON."""
    body = json.dumps({"tests": specs, "stop": stop}).encode()
    return len(body).to_bytes(8, "big") + body


def next_frame(data, pos: int = 0):
    """The RUNNER frame starting at `data[pos:]`: (header, [stdout, stderr, channel bytes], the
    position after it), or None while it is incomplete."""
    end = data.find(b"\n", pos)
    if end < 0:
        return None
    head = json.loads(data[pos:end])
    pos = end + 1
    if pos + sum(head["n"]) > len(data):
        return None
    parts = []
    for size in head["n"]:
        parts.append(bytes(data[pos : pos + size]))
        pos += size
    return head, parts, pos


def parse_frames(data: bytes, n: int) -> list[tuple[dict, list[bytes]]]:
    """The complete (header, parts) frames at the start of `data`, up to the "done" one."""
    out, pos = [], 0
    while len(out) < n:
        frame = next_frame(data, pos)
        if frame is None or frame[0].get("done"):
            break
        out.append(frame[:2])
        pos = frame[2]
    return out

"""A real vla-server for the Python tests (client, openpi front end, lerobot plugin): the
binary, started on free loopback ports, its output kept.

The binary: $VLA_SERVER_BIN, else the newer of target/{debug,release}/vla-server of this
checkout (`cargo build -p vla-server` builds it; scripts/test.sh runs cargo first)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def server_binary() -> pathlib.Path:
    env = os.environ.get("VLA_SERVER_BIN")
    if env:
        return pathlib.Path(env)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    found = [p for p in (target / "debug" / "vla-server", target / "release" / "vla-server") if p.exists()]
    if not found:
        pytest.fail(f"no vla-server binary under {target}: run `cargo build -p vla-server` or set VLA_SERVER_BIN")
    return max(found, key=lambda p: p.stat().st_mtime)


class Served:
    """`vla-server *args --bind tcp://127.0.0.1:*`, once it listens: `zmq` (its address),
    `ws` (the openpi endpoint, when `args` ask for one), `lines` (its output so far)."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [str(server_binary()), *args, "--bind", "tcp://127.0.0.1:*"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.zmq = self.ws = None
        timer = threading.Timer(120, self.proc.kill)  # a server that never says it listens
        timer.start()
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.strip().startswith("openpi "):
                self.ws = line.split()[1]
            if line.startswith("listening on "):
                self.zmq = line.split()[2].replace("0.0.0.0", "127.0.0.1")
                break
        timer.cancel()
        if self.zmq is None:
            self.proc.kill()
            pytest.fail("vla-server did not start:\n" + "".join(self.lines))
        # Keep draining its output so it never blocks on a full pipe.
        threading.Thread(target=lambda: [self.lines.append(x) for x in self.proc.stdout], daemon=True).start()

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

"""Starts a real vla-server (the built-in demo model) for the client tests.

The binary: $VLA_SERVER_BIN, else target/{debug,release}/vla-server of this checkout
(`cargo build -p vla-server` builds it; scripts/test.sh runs cargo first)."""

import os
import pathlib
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "eval"))


def server_binary() -> pathlib.Path:
    env = os.environ.get("VLA_SERVER_BIN")
    if env:
        return pathlib.Path(env)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    found = [p for p in (target / "debug" / "vla-server", target / "release" / "vla-server") if p.exists()]
    if not found:
        pytest.fail(f"no vla-server binary under {target}: run `cargo build -p vla-server` or set VLA_SERVER_BIN")
    return max(found, key=lambda p: p.stat().st_mtime)


@pytest.fixture(scope="session")
def server():
    """(address, process) of a demo server on a free loopback port."""
    proc = subprocess.Popen(
        [str(server_binary()), "--demo", "--bind", "tcp://127.0.0.1:*", "--log-level", "warn"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    addr = None
    timer = threading.Timer(120, proc.kill)  # a server that never says it listens
    timer.start()
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("listening on "):
            addr = line.split()[2]
            break
    timer.cancel()
    if addr is None:
        proc.kill()
        pytest.fail("vla-server did not start:\n" + "".join(lines))
    # Keep draining its output so it never blocks on a full pipe.
    threading.Thread(target=lambda: [lines.append(l) for l in proc.stdout], daemon=True).start()
    yield addr.replace("0.0.0.0", "127.0.0.1"), proc, lines
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise

"""Helpers and fixtures of the vla_rs plugin tests: a real vla-server on a free loopback port,
and skipping without lerobot. (No conftest.py here: clients/python/tests imports its own
`conftest` by that name, which a second conftest.py in the same pytest session would shadow;
the test modules import the fixture from this module instead.)

The binary: $VLA_SERVER_BIN, else the newer of target/{debug,release}/vla-server of this
checkout (`cargo build -p vla-server` builds it). Without lerobot every test skips, saying so.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
# Run from the checkout without installing: the client and the plugin's sources.
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "clients" / "lerobot" / "src"))


def lerobot_or_skip():
    try:
        import lerobot  # noqa: F401
        from lerobot.policies.factory import make_policy  # noqa: F401
    except Exception as e:  # ImportError, or a broken install (torch, av, ...)
        pytest.skip(
            f"SKIPPED: lerobot is not importable ({type(e).__name__}: {e}); "
            "install it with `pip install lerobot==0.4.4 ./clients/python ./clients/lerobot`",
            allow_module_level=True,
        )


def server_binary() -> pathlib.Path:
    env = os.environ.get("VLA_SERVER_BIN")
    if env:
        return pathlib.Path(env)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    found = [p for p in (target / "debug" / "vla-server", target / "release" / "vla-server") if p.exists()]
    if not found:
        pytest.fail(f"no vla-server binary under {target}: run `cargo build -p vla-server` or set VLA_SERVER_BIN")
    return max(found, key=lambda p: p.stat().st_mtime)


def start_server(*args: str):
    """(address, process, log lines) of a vla-server started with `args` on a free port."""
    proc = subprocess.Popen(
        [str(server_binary()), *args, "--bind", "tcp://127.0.0.1:*", "--log-level", "warn"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
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
    threading.Thread(target=lambda: [lines.append(l) for l in proc.stdout], daemon=True).start()
    return addr.replace("0.0.0.0", "127.0.0.1"), proc, lines


def stop_server(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def demo_server():
    """(address, INFO) of `vla-server --demo` (SmolVLA-shaped, random weights)."""
    lerobot_or_skip()
    addr, proc, _ = start_server("--demo")
    from vla_client import VlaClient

    with VlaClient(addr, timeout_ms=60_000) as c:
        info = c.info()
    yield addr, info
    stop_server(proc)

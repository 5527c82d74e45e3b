"""Helpers and fixtures of the vla_rs plugin tests: a real vla-server on a free loopback port,
and skipping without lerobot. (No conftest.py here: clients/python/tests imports its own
`conftest` by that name, which a second conftest.py in the same pytest session would shadow;
the test modules import the fixture from this module instead.)

The binary: as clients/python/tests/vla_server_proc.py finds it. Without lerobot every test
skips, saying so.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
# Run from the checkout without installing: the client and the plugin's sources.
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "clients" / "lerobot" / "src"))
# The server-starting helper the client's tests use.
sys.path.insert(0, str(ROOT / "clients" / "python" / "tests"))

from vla_server_proc import Served, server_binary  # noqa: E402,F401 (server_binary: for the tests)


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


def start_server(*args: str):
    """(address, process, log lines) of a vla-server started with `args` on a free port."""
    served = Served(*args, "--log-level", "warn")
    return served.zmq, served.proc, served.lines


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

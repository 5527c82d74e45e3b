"""Starts a real vla-server (the built-in demo model) for the client tests (vla_server_proc)."""

import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "eval"))
sys.path.insert(0, str(ROOT / "clients" / "python" / "tests"))

from vla_server_proc import Served, server_binary  # noqa: E402,F401 (server_binary: for the tests)


@pytest.fixture(scope="session")
def server():
    """(address, process, output lines) of a demo server on a free loopback port."""
    served = Served("--demo", "--log-level", "warn")
    yield served.zmq, served.proc, served.lines
    served.close()

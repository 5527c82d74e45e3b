"""Addresses, the fast "no server" error and wait_for_server. All but the last test need no
vla-server binary (a pyzmq ROUTER stands in for a server where one is needed)."""

import pathlib
import socket
import threading
import time

import pytest
import zmq

from vla_client import NoServerError, PredictRequest, PredictResponse, VlaClient, VlaError, wait_for_server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("call", [VlaClient, wait_for_server])
def test_an_address_without_scheme_names_the_tcp_form(call):
    with pytest.raises(ValueError, match=r"'127\.0\.0\.1:5611' has no scheme.*tcp://HOST:PORT.*tcp://127\.0\.0\.1:5611"):
        call("127.0.0.1:5611")


def test_bad_addresses_say_what_to_write():
    with pytest.raises(ValueError, match=r"unknown scheme 'http'.*tcp://HOST:PORT.*tcp://gpu-box:5555"):
        VlaClient("http://gpu-box:5555")
    with pytest.raises(ValueError, match=r"tcp://HOST:PORT"):
        VlaClient("tcp://localhost")
    with pytest.raises(ValueError, match=r"bind address.*tcp://127\.0\.0\.1:5555"):
        VlaClient("tcp://*:5555")


def test_no_server_is_reported_at_once():
    addr = f"tcp://127.0.0.1:{free_port()}"
    c = VlaClient(addr, timeout_ms=30_000)  # creating a client before its server is fine
    t0 = time.monotonic()
    with pytest.raises(NoServerError) as e:
        c.ping()
    assert time.monotonic() - t0 < 2
    assert e.value.code == "NO_SERVER" and isinstance(e.value, VlaError) and isinstance(e.value, ConnectionError)
    assert f"no server at {addr} (is vla-server running? start it with `vla-server MODEL.gguf --bind {addr}`)" in str(e.value)
    c.close()


def test_no_ipc_socket_file_is_reported_at_once(tmp_path):
    addr = f"ipc://{tmp_path}/vla.sock"
    with pytest.raises(NoServerError, match=f"no server at {addr}.*no socket file"):
        VlaClient(addr, timeout_ms=30_000).info()


def test_wait_for_server_without_a_server_fails_naming_the_address():
    addr = f"tcp://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(NoServerError, match=f"no server answered at {addr} within 1 s"):
        wait_for_server(addr, timeout=1)
    assert time.monotonic() - t0 < 2


def test_wait_for_server_on_a_silent_port_fails_naming_the_address():
    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    t0 = time.monotonic()
    with pytest.raises(NoServerError, match=f"tcp://127.0.0.1:{port} within 0.5 s.*no reply"):
        wait_for_server(f"tcp://127.0.0.1:{port}", timeout=0.5, context=ctx)
    assert time.monotonic() - t0 < 2
    silent.close(linger=0)
    ctx.term()


def test_wait_for_server_returns_once_a_late_server_answers():
    """A stand-in server that binds 0.5 s late and answers one request."""
    ctx = zmq.Context()
    port = free_port()

    def serve():
        time.sleep(0.5)
        s = ctx.socket(zmq.ROUTER)
        s.bind(f"tcp://127.0.0.1:{port}")
        if s.poll(10_000):
            *envelope, body = s.recv_multipart()
            s.send_multipart([*envelope, PredictResponse(request_id=PredictRequest.FromString(body).request_id).SerializeToString()])
        s.close(linger=1000)

    t = threading.Thread(target=serve)
    t.start()
    t0 = time.monotonic()
    wait_for_server(f"tcp://127.0.0.1:{port}", timeout=10, context=ctx)
    assert 0.4 < time.monotonic() - t0 < 5
    t.join()
    ctx.term()


def test_wait_for_server_against_vla_server(server):
    addr, _, _ = server
    wait_for_server(addr, timeout=60)
    with VlaClient(addr, timeout_ms=60_000) as c:
        assert c.ping() >= 0


def test_package_version_is_the_module_version():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    import vla_client

    meta = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert meta["version"] == vla_client.__version__
    assert {d.split(">")[0].split("=")[0] for d in meta["dependencies"]} == {"numpy", "pyzmq", "protobuf"}

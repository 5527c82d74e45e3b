"""The Python client against a real vla-server running the demo model."""

import re
import pathlib
import signal

import numpy as np
import pytest
import zmq

import vla_client
from vla_client import VlaClient, VlaError, VlaWarning

ROOT = pathlib.Path(__file__).resolve().parents[3]


def observation(seed=0):
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), rng.integers(0, 256, (64, 40, 3), dtype=np.uint8)]
    state = rng.standard_normal(6).astype(np.float32)
    noise = rng.standard_normal((50, 32)).astype(np.float32)
    return images, state, noise


def test_info_and_ping(server):
    addr, _, _ = server
    with VlaClient(addr, timeout_ms=60_000) as c:
        info = c.info()
        assert info["arch"] == "smolvla"
        assert info["n_images"] == 2 and info["chunk_size"] == 50 and info["action_dim"] == 6
        assert c.ping() >= 0


def test_predict_is_deterministic_given_noise_and_depends_on_input(server):
    addr, _, _ = server
    images, state, noise = observation(1)
    with VlaClient(addr, timeout_ms=60_000) as c:
        a, resp = c.predict(images, state, tokens=[5, 17, 42], noise=noise, return_response=True)
        b = c.predict(images, state, tokens=[5, 17, 42], noise=noise)
        other = c.predict(images, state + 1.0, tokens=[5, 17, 42], noise=noise)
    assert a.shape == (50, 6) and a.dtype == np.float32
    assert np.isfinite(a).all()
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - other).max() > 1e-4, "the chunk must depend on the state"
    assert resp.latency_ms_total >= resp.latency_ms_inference > 0


def test_text_prompts_are_tokenized_by_the_server(server):
    addr, _, _ = server
    images, state, noise = observation(4)
    with VlaClient(addr, timeout_ms=60_000) as c:
        a = c.predict(images, state, prompt="pick up the red cube", noise=noise)
        b = c.predict(images, state, prompt="pick up the red cube\n", noise=noise)
        other = c.predict(images, state, prompt="open the drawer", noise=noise)
        with pytest.raises(VlaError) as e:
            c.predict(images, state, prompt="x", tokens=[1], noise=noise)
        assert "not both" in e.value.message
    np.testing.assert_array_equal(a, b)  # the server appends the newline lerobot appends
    assert np.abs(a - other).max() > 1e-4, "the chunk must depend on the instruction"


def test_a_prompt_cut_as_the_reference_cuts_it_warns(server):
    addr, _, _ = server
    images, state, noise = observation(4)
    long = "pick up the red cube and then the blue one " * 20  # past the demo's 16 tokens
    with VlaClient(addr, timeout_ms=60_000) as c:
        with pytest.warns(VlaWarning, match=r"cut to the first 16 \(tokenizer_max_length\)"):
            c.predict(images, state, prompt=long, noise=noise)
        chunk, resp = c.predict(images, state, tokens=[5, 17], noise=noise, return_response=True)
        assert list(resp.warnings) == []
        with pytest.raises(VlaError) as e:
            c.predict(images, state, tokens=[1] * 17, noise=noise)
        assert e.value.code == "BAD_REQUEST" and "bound of 16" in e.value.message


def test_float_images_match_uint8_images(server):
    addr, _, _ = server
    images, state, noise = observation(2)
    with VlaClient(addr, timeout_ms=60_000) as c:
        a = c.predict(images, state, tokens=[7, 8], noise=noise)
        b = c.predict([i.astype(np.float32) / 255.0 for i in images], state, tokens=[7, 8], noise=noise)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_errors_raise_vla_error_and_server_keeps_serving(server):
    addr, _, _ = server
    images, state, noise = observation(3)
    with VlaClient(addr, timeout_ms=60_000) as c:
        with pytest.raises(VlaError) as e:
            c.predict(images[:1], state, tokens=[5])
        assert e.value.code == "BAD_REQUEST" and "takes 2" in e.value.message
        with pytest.raises(VlaError) as e:
            c.predict(images, state[:4], tokens=[5])
        assert "state" in e.value.message
        with pytest.raises(VlaError) as e:
            c.predict(images, state, tokens=[5], noise=noise[:3])
        assert "noise" in e.value.message
        # Raw garbage: answered, not fatal.
        c._socket.send_multipart([b"", b"\xff\xff\xff\x0f"])
        assert c._socket.poll(60_000)
        resp = vla_client.PredictResponse.FromString(c._socket.recv_multipart()[-1])
        assert "malformed" in resp.error
        assert c.predict(images, state, tokens=[5], noise=noise).shape == (50, 6)


def test_timeout_raises_and_client_recovers():
    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    with VlaClient(f"tcp://127.0.0.1:{port}", timeout_ms=200, context=ctx) as c:
        with pytest.raises(VlaError) as e:
            c.ping()
        assert e.value.code == "TIMEOUT"
    silent.close()
    ctx.term()


def test_a_req_socket_works_too(server):
    addr, _, _ = server
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.RCVTIMEO, 60_000)
    s.connect(addr)
    s.send(vla_client.PredictRequest(control=vla_client.PredictRequest.INFO, request_id=9).SerializeToString())
    resp = vla_client.PredictResponse.FromString(s.recv())
    assert resp.request_id == 9 and '"arch":"smolvla"' in resp.info_json
    s.close()
    ctx.term()


def test_descriptor_matches_proto_file():
    """Every `name = N;` of proto/vla.proto, in order, is in the client's descriptor."""
    text = (ROOT / "proto" / "vla.proto").read_text()
    want = [(m.group(1), int(m.group(2))) for m in re.finditer(r"(\w+) = (\d+);", re.sub(r"//.*", "", text))]
    got = []
    for msg in vla_client._file_descriptor().message_type:
        for enum in msg.enum_type:
            got += [(v.name, v.number) for v in enum.value]
        got += [(f.name, f.number) for f in msg.field]
    assert sorted(got) == sorted(want)


def test_startup_banner_and_graceful_shutdown(server):
    _, proc, lines = server
    banner = "".join(lines)
    for key in ("arch      smolvla", "params", "backend   cpu", "memory", "listening on tcp://127.0.0.1:"):
        assert key in banner, banner
    assert proc.poll() is None


def test_sigterm_stops_the_server_cleanly():
    import subprocess
    from conftest import server_binary

    proc = subprocess.Popen(
        [str(server_binary()), "--demo", "--bind", "tcp://127.0.0.1:*"], stdout=subprocess.PIPE, text=True
    )
    for line in proc.stdout:
        if line.startswith("listening on "):
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "stopped: 0 chunks served" in out


def test_settings_errors_are_clear():
    import subprocess
    from conftest import server_binary

    def run(*args, env=None):
        import os

        e = dict(os.environ, **(env or {}))
        return subprocess.run([str(server_binary()), *args], capture_output=True, text=True, timeout=60, env=e)

    r = run("--demo", env={"VLA_NUM_STEPS": "3"})
    assert r.returncode != 0 and "VLA_NUM_STEPS" in r.stderr and "--steps" in r.stderr
    r = run("--demo", "--act-dtype", "f8")
    assert r.returncode != 0 and "act_dtype" in r.stderr and "bf16" in r.stderr
    # 16-bit activations run on the wgpu backends; the cpu backend says so
    r = run("--demo", "--act-dtype", "bf16")
    assert r.returncode != 0 and "16-bit activations run on the wgpu backends" in r.stderr
    r = run("/nonexistent/model.gguf")
    assert r.returncode != 0 and "/nonexistent/model.gguf" in r.stderr
    r = run()
    assert r.returncode != 0 and "MODEL" in r.stderr
    r = run("--help")
    assert r.returncode == 0 and "--demo" in r.stdout and "--config" in r.stdout

"""openpi's websocket protocol against vla-server (`--openpi-bind`), with openpi's own client
(`openpi_client.WebsocketClientPolicy`, the PyPI package openpi-client 0.1.2): the chunk is
bit-identical to the ZeroMQ client's for the same images, state, prompt and noise; the metadata
map carries INFO; a refused observation is a text error and the connection goes on; hostile
frames, idle connections and 8 concurrent clients leave it serving exact chunks."""

import json
import pathlib
import random
import subprocess
import threading

import numpy as np
import pytest
import vla_server_proc
from conftest import ROOT, server_binary

openpi = pytest.importorskip("openpi_client.websocket_client_policy",
                             reason="openpi-client is not installed (scripts/test.sh installs it)")
websockets_sync = pytest.importorskip("websockets.sync.client")
from openpi_client import msgpack_numpy  # noqa: E402
from vla_client import VlaClient  # noqa: E402


class Served(vla_server_proc.Served):
    """vla-server with the openpi front end on free ports."""

    def __init__(self, *args):
        super().__init__(*args, "--openpi-bind", "127.0.0.1:0", "--log-level", "warn")
        assert self.ws, "".join(self.lines)
        self.host, self.port = self.ws.removeprefix("ws://").rsplit(":", 1)

    def client(self):
        return openpi.WebsocketClientPolicy(self.host, int(self.port))

    def rss_kib(self):
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


def observation(rng, keys, chunk, max_action_dim, state_dim=6, chw=False):
    """An openpi observation under `keys` (camera keys, state key) and the same request's
    arguments for the ZeroMQ client."""
    cams, state_key = keys
    images = [rng.integers(0, 256, (48 + 8 * i, 64, 3), dtype=np.uint8) for i in range(len(cams))]
    state = rng.standard_normal(state_dim)  # float64, as openpi's clients send it
    noise = rng.standard_normal((chunk, max_action_dim)).astype(np.float32)
    obs = {"prompt": "pick up the red cube", "noise": noise, state_key: state}
    for key, img in zip(cams, images):
        arr = np.ascontiguousarray(img.transpose(2, 0, 1)) if chw else img
        node = obs
        *parents, leaf = key.split("/") if key.startswith("images/") else [key]
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = arr
    zmq_args = dict(images=images, state=state.astype(np.float32), prompt="pick up the red cube", noise=noise.ravel())
    return obs, zmq_args


LIBERO = (["observation/image", "observation/wrist_image"], "observation/state")


def check_same_chunks(served, keys, chw=False):
    policy = served.client()
    meta = policy.get_server_metadata()
    rng = np.random.default_rng(7)
    zmq = VlaClient(served.zmq)
    for _ in range(2):
        obs, args = observation(rng, keys, meta["chunk_size"], meta["max_action_dim"], meta["state_dim"], chw)
        out = policy.infer(obs)
        want = np.asarray(zmq.predict(**args))
        assert out["actions"].dtype == np.float32 and out["actions"].shape == want.shape
        assert np.array_equal(out["actions"], want)
        assert out["server_timing"]["infer_ms"] > 0 and out["policy_timing"]["infer_ms"] > 0
    return meta


def test_libero_layout_gives_the_zeromq_chunk():
    served = Served("--demo", "--openpi-keys", "libero")
    try:
        meta = check_same_chunks(served, LIBERO)
        assert meta["arch"] == "smolvla" and meta["n_images"] == 2
        check_same_chunks(served, LIBERO, chw=True)  # CHW images, as some openpi clients send
    finally:
        served.close()


def test_nested_aloha_style_keys_from_a_file(tmp_path):
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"images": ["images/cam_high", "images/cam_left_wrist"], "state": ["state"]}))
    served = Served("--demo", "--openpi-keys", str(keys))
    try:
        check_same_chunks(served, (["images/cam_high", "images/cam_left_wrist"], "state"))
    finally:
        served.close()


def test_a_pi05_model_converted_from_its_lerobot_checkpoint(tmp_path):
    bin_dir = server_binary().parent
    gguf = tmp_path / "pi05.gguf"
    ckpt = ROOT / "tests" / "fixtures" / "pi05-tiny"
    subprocess.run([str(bin_dir / "vla-convert"), "auto", "--ckpt", str(ckpt), "--out", str(gguf),
                    "--sizes", str(ckpt / "arch.json")], check=True, capture_output=True)
    served = Served(str(gguf), "--openpi-keys", "libero")
    try:
        meta = check_same_chunks(served, LIBERO)
        assert meta["arch"] == "pi05"
        # The converted file keeps lerobot's camera names; ZeroMQ requests may name their
        # images in any order (vla_client: a dict), names not the model's are refused.
        names = ["observation.images.cam0", "observation.images.cam1"]
        assert meta["camera_names"] == names
        rng = np.random.default_rng(2)
        _, args = observation(rng, LIBERO, meta["chunk_size"], meta["max_action_dim"], meta["state_dim"])
        zmq = VlaClient(served.zmq)
        want = np.asarray(zmq.predict(**args))
        a, b = args["images"]
        assert np.array_equal(np.asarray(zmq.predict(**{**args, "images": {"cam1": b, names[0]: a}})), want)
        from vla_client import VlaError
        with pytest.raises(VlaError, match="are not this model's cameras"):
            zmq.predict(**{**args, "images": {"top": a, "wrist": b}})
    finally:
        served.close()


def test_the_aloha_preset_on_a_two_camera_model_is_refused_at_start():
    proc = subprocess.run([str(server_binary()), "--demo", "--openpi-bind", "127.0.0.1:0", "--openpi-keys", "aloha"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "names 3 camera(s)" in proc.stderr and "this model takes 2" in proc.stderr, proc.stderr


def test_errors_are_text_and_the_connection_goes_on():
    served = Served("--demo", "--openpi-keys", "libero")
    try:
        policy = served.client()
        meta = policy.get_server_metadata()
        rng = np.random.default_rng(1)
        obs, args = observation(rng, LIBERO, meta["chunk_size"], meta["max_action_dim"])
        bad = [
            ({k: v for k, v in obs.items() if k != "observation/wrist_image"}, 'no "observation/wrist_image"'),
            ({**obs, "observation/state": np.zeros(7)}, "state: 7 values"),
            ({**obs, "observation/image": np.zeros((4, 4), np.uint8)}, "expected [H, W, 3] or [3, H, W]"),
            ({**obs, "noise": np.zeros(3, np.float32)}, "noise: 3 values"),
            ({**obs, "prompt": 5}, "not text"),
        ]
        for o, message in bad:
            with pytest.raises(RuntimeError, match="Error in inference server") as e:
                policy.infer(o)
            assert message in str(e.value), str(e.value)
            out = policy.infer(obs)
            assert np.array_equal(out["actions"], np.asarray(VlaClient(served.zmq).predict(**args)))
    finally:
        served.close()


def test_api_key_is_checked():
    served = Served("--demo", "--openpi-keys", "libero", "--openpi-api-key", "s3cret")
    try:
        with pytest.raises(Exception, match="401"):
            served.client()
        policy = openpi.WebsocketClientPolicy(served.host, int(served.port), api_key="s3cret")
        assert policy.get_server_metadata()["arch"] == "smolvla"
    finally:
        served.close()


def test_hostile_frames_idle_and_concurrent_clients():
    served = Served("--demo", "--openpi-keys", "libero")
    try:
        meta = served.client().get_server_metadata()
        rng = np.random.default_rng(3)
        obs, args = observation(rng, LIBERO, meta["chunk_size"], meta["max_action_dim"])
        want = np.asarray(VlaClient(served.zmq).predict(**args))
        frame = msgpack_numpy.packb(obs)
        # A client that connects and never finishes its handshake holds no one up.
        import socket
        idle = socket.create_connection((served.host, int(served.port)))
        conn = websockets_sync.connect(served.ws, compression=None, max_size=None)
        conn.recv()  # metadata
        fuzz = random.Random(5)
        rss0 = None
        for i in range(300):
            data = bytearray(frame)
            kind = i % 4
            if kind == 0:  # flipped bytes
                for _ in range(8):
                    data[fuzz.randrange(len(data))] = fuzz.randrange(256)
            elif kind == 1:  # truncated
                data = data[: fuzz.randrange(len(data))]
            elif kind == 2:  # huge declared sizes: array32 / bin32 / map32 markers of 4 G entries
                data = bytes([fuzz.choice([0xdd, 0xdf, 0xc6, 0xdb])]) + b"\xff\xff\xff\xff" + bytes(data[:64])
            else:  # random bytes
                data = bytes(fuzz.randrange(256) for _ in range(fuzz.randrange(1, 200)))
            conn.send(bytes(data))
            reply = conn.recv(timeout=60)
            if isinstance(reply, bytes):
                assert msgpack_numpy.unpackb(reply)["actions"].shape == want.shape
            if i == 50:
                rss0 = served.rss_kib()
        conn.send(frame)
        assert np.array_equal(msgpack_numpy.unpackb(conn.recv(timeout=60))["actions"], want)
        grown = served.rss_kib() - rss0
        assert grown < 64 * 1024, f"RSS grew by {grown} KiB over 250 hostile frames"

        results = []

        def client():
            p = served.client()
            for _ in range(3):
                results.append(np.array_equal(p.infer(obs)["actions"], want))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert results == [True] * 24
        idle.close()
        assert served.proc.poll() is None, "".join(served.lines)
    finally:
        served.close()

"""The vla_rs policy built through lerobot's own factories, against a real vla-server --demo
(SmolVLA-shaped: 2 cameras, state 6, action 6, chunks of 50)."""

from __future__ import annotations

import importlib.metadata
import pathlib
import os
import subprocess
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest

from vla_rs_helpers import demo_server, lerobot_or_skip  # noqa: F401 (a fixture)

lerobot_or_skip()

import torch  # noqa: E402
from lerobot.configs.types import FeatureType, PolicyFeature  # noqa: E402
from lerobot.envs.configs import EnvConfig  # noqa: E402
from lerobot.envs.utils import preprocess_observation  # noqa: E402
from lerobot.policies.factory import make_policy, make_policy_config, make_pre_post_processors  # noqa: E402

from lerobot_policy_vla_rs import VlaRsConfig, VlaRsMismatchError, VlaRsPolicy  # noqa: E402

H = W = 48  # any size: the server resizes to its model's input


@dataclass
class FakeEnv(EnvConfig):
    """Only the features: what make_policy reads of an env config (no simulator needed).
    `cams` images under pixels/<name> (-> observation.images.<name>), agent_pos of
    `state` values, actions of `action` values."""

    cams: tuple = ("top", "wrist")
    state: int = 6
    action: int = 6

    def __post_init__(self):
        self.features = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(self.action,))}
        self.features_map = {"action": "action", "agent_pos": "observation.state"}
        if self.state:
            self.features["agent_pos"] = PolicyFeature(type=FeatureType.STATE, shape=(self.state,))
        for c in self.cams:
            self.features[f"pixels/{c}"] = PolicyFeature(type=FeatureType.VISUAL, shape=(H, W, 3))
            self.features_map[f"pixels/{c}"] = f"observation.images.{c}"

    @property
    def gym_kwargs(self) -> dict:
        return {}

    def observation(self, batch: int = 1, seed: int = 0) -> dict:
        """A raw vector-env observation, as a gym env of these features returns it."""
        rng = np.random.default_rng(seed)
        obs = {"pixels": {c: rng.integers(0, 256, (batch, H, W, 3), dtype=np.uint8) for c in self.cams}}
        if self.state:
            obs["agent_pos"] = rng.standard_normal((batch, self.state)).astype(np.float64)
        return obs


def build(addr: str, env: EnvConfig | None = None, **kw):
    """(policy, preprocessor, postprocessor) through lerobot's factories, as lerobot-eval does."""
    cfg = make_policy_config("vla_rs", server=addr, **kw)
    policy = make_policy(cfg, env_cfg=env or FakeEnv())
    pre, post = make_pre_post_processors(cfg, pretrained_path=None)
    return policy, pre, post


def step(policy, pre, post, raw: dict, task: list[str] | None = None):
    """One step of lerobot-eval's rollout: env obs -> lerobot batch -> action [B, action_dim]."""
    obs = preprocess_observation(raw)
    b = next(iter(obs.values())).shape[0]
    obs["task"] = task if task is not None else ["pick up the cube"] * b
    with torch.inference_mode():
        return post(policy.select_action(pre(obs)))


def test_plugin_is_discovered_by_lerobot():
    """register_third_party_plugins() (what lerobot-eval/-record call first) finds the installed
    distribution lerobot_policy_vla_rs and so the type vla_rs; run in a fresh interpreter."""
    try:
        importlib.metadata.distribution("lerobot_policy_vla_rs")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("SKIPPED: lerobot_policy_vla_rs is not installed (pip install ./clients/lerobot); "
                    "lerobot discovers plugins among installed distributions only")
    code = (
        "from lerobot.utils.import_utils import register_third_party_plugins\n"
        "from lerobot.configs.policies import PreTrainedConfig\n"
        "assert 'vla_rs' not in PreTrainedConfig.get_known_choices()\n"
        "register_third_party_plugins()\n"
        "from lerobot.policies.factory import get_policy_class, make_policy_config\n"
        "print(get_policy_class('vla_rs').__module__, type(make_policy_config('vla_rs')).__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["lerobot_policy_vla_rs.modeling_vla_rs", "VlaRsConfig"]


def test_make_policy_select_action_shape(demo_server):
    addr, info = demo_server
    policy, pre, post = build(addr)
    assert isinstance(policy, VlaRsPolicy) and isinstance(policy.config, VlaRsConfig)
    assert policy.config.camera_features == ["observation.images.top", "observation.images.wrist"]
    raw = FakeEnv().observation(batch=2)
    action = step(policy, pre, post, raw)
    assert action.shape == (2, info["action_dim"]) and action.dtype == torch.float32
    assert torch.isfinite(action).all()
    assert policy.server_calls == 2  # one request a batch element

    chunk = policy.predict_action_chunk(pre({**preprocess_observation(raw), "task": ["a", "b"]}))
    assert chunk.shape == (2, info["action_rows"], info["action_dim"])


def test_n_action_steps_queue(demo_server):
    """One server call every n_action_steps steps; the steps are the chunk's first rows, in order."""
    addr, info = demo_server
    n = 5
    policy, pre, post = build(addr, n_action_steps=n)
    env = FakeEnv()
    raw = env.observation()
    noise = torch.randn(1, info["chunk_size"], info["max_action_dim"], generator=torch.Generator().manual_seed(0))

    batch = pre({**preprocess_observation(raw), "task": ["pick up the cube"]})
    expected = policy.predict_action_chunk(batch, noise=noise)[0]  # the server is deterministic given noise
    policy.server_calls = 0

    got = []
    for t in range(12):
        b = pre({**preprocess_observation(raw), "task": ["pick up the cube"]})
        got.append(policy.select_action(b, noise=noise)[0])
        assert policy.server_calls == t // n + 1, f"step {t}: {policy.server_calls} server calls"
    for t, a in enumerate(got):
        torch.testing.assert_close(a, expected[t % n], rtol=1e-5, atol=1e-5)

    policy.reset()  # a new episode: the queue is dropped, the next step asks the server
    policy.select_action(batch, noise=noise)
    assert policy.server_calls == 4


def test_whole_chunk_by_default(demo_server):
    addr, info = demo_server
    policy, pre, post = build(addr)
    raw = FakeEnv().observation()
    for _ in range(info["action_rows"] + 1):
        step(policy, pre, post, raw)
    assert policy.server_calls == 2


def test_camera_mismatch_is_a_clear_error(demo_server):
    addr, info = demo_server
    policy, pre, post = build(addr, env=FakeEnv(cams=("top",)))
    with pytest.raises(VlaRsMismatchError) as e:
        step(policy, pre, post, FakeEnv(cams=("top",)).observation())
    msg = str(e.value)
    print(msg)
    assert f"vla-server at {addr} serves smolvla" in msg
    assert f"takes {info['n_images']} camera view(s), the policy would send 1: ['observation.images.top']" in msg
    assert "--policy.cameras" in msg
    assert "state:" not in msg and "actions:" not in msg  # those match
    assert policy.server_calls == 0


def test_pusht_shaped_env_names_every_mismatch(demo_server):
    """PushT's features (one image, state 2, action 2) against the demo (2 cameras, 6, 6)."""
    addr, _ = demo_server
    env = FakeEnv(cams=("top",), state=2, action=2)
    policy, pre, post = build(addr, env=env)
    with pytest.raises(VlaRsMismatchError) as e:
        step(policy, pre, post, env.observation())
    msg = str(e.value)
    print(msg)
    assert "camera view(s), the policy would send 1" in msg
    assert "state: the server's model takes 6 values, the environment's / dataset's 'observation.state' has 2" in msg
    assert "actions: the server's model returns 6 values an action, the environment's / dataset's 'action' has 2" in msg


def test_cameras_option_and_adapters(demo_server):
    """--policy.cameras may name one view twice; pad_state / truncate_actions bridge the dims."""
    addr, _ = demo_server
    env = FakeEnv(cams=("top",), state=2, action=2)
    policy, pre, post = build(
        addr, env=env, cameras=["observation.images.top", "observation.images.top"],
        pad_state=True, truncate_actions=True, n_action_steps=4,
    )
    action = step(policy, pre, post, env.observation(batch=3), task=["push the T"] * 3)
    assert action.shape == (3, 2)


def test_cameras_naming_an_unknown_feature():
    with pytest.raises(ValueError, match=r"observation.images.side.*not image features"):
        build("tcp://127.0.0.1:9", cameras=["observation.images.top", "observation.images.side"])


def test_n_action_steps_past_the_chunk(demo_server):
    addr, info = demo_server
    policy, pre, post = build(addr, n_action_steps=info["action_rows"] + 1)
    with pytest.raises(VlaRsMismatchError, match="n_action_steps: 51, more than the 50 actions"):
        step(policy, pre, post, FakeEnv().observation())


def test_float_image_encoding(demo_server):
    addr, info = demo_server
    policy, pre, post = build(addr, image_encoding="float")
    assert step(policy, pre, post, FakeEnv().observation()).shape == (1, info["action_dim"])


def test_no_server_is_a_clear_error():
    from vla_client import NoServerError

    policy, pre, post = build("tcp://127.0.0.1:9")
    with pytest.raises(NoServerError, match="no server at tcp://127.0.0.1:9"):
        step(policy, pre, post, FakeEnv().observation())


def test_inference_only():
    policy, _, _ = build("tcp://127.0.0.1:9")
    with pytest.raises(NotImplementedError, match="inference-only"):
        policy.forward({})
    with pytest.raises(NotImplementedError, match="inference-only"):
        policy.config.get_optimizer_preset()
    with pytest.raises(NotImplementedError, match="inference-only"):
        policy.get_optim_params()


def test_record_path_with_dataset_features(demo_server, tmp_path):
    """lerobot-record's path: make_policy from a dataset's metadata, then the very function the
    record loop calls each frame (control_utils.predict_action) on a robot-style observation
    (HxWx3 uint8 frames, a task string)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata
    from lerobot.utils.control_utils import predict_action

    addr, info = demo_server
    joints = [f"j{i}.pos" for i in range(6)]
    image = {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]}
    meta = LeRobotDatasetMetadata.create(
        repo_id="local/vla_rs_record_test",
        fps=30,
        root=tmp_path / "dataset",
        robot_type="so100_follower",
        features={
            "observation.images.front": image,
            "observation.images.wrist": image,
            "observation.state": {"dtype": "float32", "shape": (6,), "names": joints},
            "action": {"dtype": "float32", "shape": (6,), "names": joints},
        },
    )
    cfg = make_policy_config("vla_rs", server=addr, n_action_steps=3)
    policy = make_policy(cfg, ds_meta=meta)
    pre, post = make_pre_post_processors(cfg, pretrained_path=None, dataset_stats=meta.stats)
    assert policy.config.camera_features == ["observation.images.front", "observation.images.wrist"]

    rng = np.random.default_rng(0)
    for t in range(4):
        frame = {
            "observation.images.front": rng.integers(0, 256, (H, W, 3), dtype=np.uint8),
            "observation.images.wrist": rng.integers(0, 256, (H, W, 3), dtype=np.uint8),
            "observation.state": rng.standard_normal(6).astype(np.float32),
        }
        action = predict_action(frame, policy, torch.device("cpu"), pre, post, use_amp=False,
                                task="pick up the cube", robot_type="so100_follower")
        assert action.shape == (1, info["action_dim"])
    assert policy.server_calls == 2  # steps 0 and 3


def test_cameras_go_by_name_where_the_model_keeps_names(tmp_path):
    """A converted model keeps lerobot's camera names: the env's cameras go by name (any
    order), and cameras that are not the model's are refused naming both lists."""
    from vla_rs_helpers import start_server, stop_server, server_binary

    ckpt = pathlib.Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "smolvla-tiny"
    gguf = tmp_path / "smolvla.gguf"
    subprocess.run([str(server_binary().parent / "vla-convert"), "auto", "--ckpt", str(ckpt), "--out", str(gguf),
                    "--vit-positions", "shifted"], check=True, capture_output=True)
    addr, proc, _ = start_server(str(gguf))
    try:
        from vla_client import VlaClient

        with VlaClient(addr, timeout_ms=60_000) as c:
            info = c.info()
        assert info["camera_names"] == ["observation.images.cam0", "observation.images.cam1"]
        dims = dict(state=info["state_dim"], action=info["action_dim"])
        env = FakeEnv(cams=("cam1", "cam0"), **dims)
        policy, pre, post = build(addr, env)
        assert step(policy, pre, post, env.observation()).shape == (1, info["action_dim"])
        env = FakeEnv(cams=("cam0", "top"), **dims)
        policy, pre, post = build(addr, env)
        with pytest.raises(Exception, match="are not this model's cameras"):
            step(policy, pre, post, env.observation())
    finally:
        stop_server(proc)


def test_temporal_ensembling_matches_lerobots(demo_server):
    """temporal_ensemble_coeff: a server call every step, and the actions lerobot's own
    ACTTemporalEnsembler makes of the same chunks; reset starts over."""
    from lerobot.policies.act.modeling_act import ACTTemporalEnsembler

    addr, info = demo_server
    policy, pre, post = build(addr, temporal_ensemble_coeff=0.01)
    chunks = []
    ask = policy.predict_action_chunk

    def recorded(batch, noise=None):
        chunks.append(ask(batch, noise=noise))
        return chunks[-1]

    policy.predict_action_chunk = recorded
    env = FakeEnv()
    got = []
    for t in range(6):
        b = pre({**preprocess_observation(env.observation(seed=t)), "task": ["pick up the cube"]})
        got.append(policy.select_action(b))
    assert policy.server_calls == 6
    ref = ACTTemporalEnsembler(0.01, info["action_rows"])
    for t, chunk in enumerate(chunks):
        torch.testing.assert_close(got[t], ref.update(chunk), rtol=1e-5, atol=1e-5)
    policy.reset()  # a new episode: the first action is the new chunk's first row
    first = policy.select_action(b)
    torch.testing.assert_close(first, chunks[-1][:, 0])
    with pytest.raises(ValueError, match="n_action_steps must be 1"):
        VlaRsConfig(server=addr, temporal_ensemble_coeff=0.01, n_action_steps=5)


def test_act_model_takes_no_instruction_and_its_own_steps(tmp_path):
    """An ACT file: no instruction goes to the server (no warning comes back), and without
    --policy.n_action_steps the model's own n_action_steps (INFO) sets the queue."""
    import warnings

    from vla_rs_helpers import start_server, stop_server, server_binary

    gguf = tmp_path / "act.gguf"
    subprocess.run([str(server_binary().parent / "vla-gguf"), "demo", "--arch", "act", str(gguf)],
                   check=True, capture_output=True)
    addr, proc, _ = start_server(str(gguf))
    try:
        from vla_client import VlaClient

        with VlaClient(addr, timeout_ms=60_000) as c:
            info = c.info()
        assert not info["reads_instruction"] and info["n_action_steps"] < info["action_rows"]
        env = FakeEnv(state=info["state_dim"], action=info["action_dim"])
        policy, pre, post = build(addr, env)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a reply warning (VlaWarning) would fail here
            for _ in range(info["n_action_steps"] + 1):
                step(policy, pre, post, env.observation())
        assert policy.server_calls == 2
    finally:
        stop_server(proc)


def test_act_model_without_a_state(tmp_path):
    """An ACT trained without observation.state (INFO state_dim 0): no state goes to the
    server, whether the environment has one or not."""
    from vla_rs_helpers import start_server, stop_server, server_binary

    ckpt = pathlib.Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "act-tiny-nostate"
    gguf = tmp_path / "act.gguf"
    subprocess.run([str(server_binary().parent / "vla-convert"), "act", "--ckpt", str(ckpt), "--out", str(gguf)],
                   check=True, capture_output=True)
    addr, proc, _ = start_server(str(gguf))
    try:
        from vla_client import VlaClient

        with VlaClient(addr, timeout_ms=60_000) as c:
            info = c.info()
        assert info["state_dim"] == 0
        for state in (0, 6):
            env = FakeEnv(state=state, action=info["action_dim"])
            policy, pre, post = build(addr, env)
            assert step(policy, pre, post, env.observation()).shape == (1, info["action_dim"])
    finally:
        stop_server(proc)

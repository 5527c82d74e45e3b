"""Request building of eval/libero_client.py on synthetic LIBERO observations."""

import math

import numpy as np
import pytest

import libero_client
import vla_client


def fake_obs():
    rng = np.random.default_rng(0)
    return {
        "agentview_image": rng.integers(0, 256, (8, 6, 3), dtype=np.uint8),
        "robot0_eye_in_hand_image": rng.integers(0, 256, (8, 6, 3), dtype=np.uint8),
        "robot0_eef_pos": np.array([0.1, -0.2, 0.3]),
        # 90 degrees about z: (x, y, z, w) = (0, 0, sin 45, cos 45)
        "robot0_eef_quat": np.array([0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4)]),
        "robot0_gripper_qpos": np.array([0.04, -0.04]),
    }


def test_quat_to_axis_angle():
    np.testing.assert_allclose(libero_client.quat_to_axis_angle([0, 0, 0, 1]), [0, 0, 0])
    np.testing.assert_allclose(
        libero_client.quat_to_axis_angle([0, 0, math.sin(math.pi / 4), math.cos(math.pi / 4)]), [0, 0, math.pi / 2],
        rtol=1e-6,
    )
    s = math.sin(0.3) / math.sqrt(3)
    np.testing.assert_allclose(libero_client.quat_to_axis_angle([s, s, s, math.cos(0.3)]), [0.6 / math.sqrt(3)] * 3, rtol=1e-6)


def test_observation_to_request():
    obs = fake_obs()
    images, state = libero_client.observation_to_inputs(obs)
    assert state.dtype == np.float32 and state.shape == (8,)
    np.testing.assert_allclose(state, [0.1, -0.2, 0.3, 0, 0, math.pi / 2, 0.04, -0.04], rtol=1e-6, atol=1e-7)
    # Rotated by 180 degrees: the last pixel comes first.
    np.testing.assert_array_equal(images[0][0, 0], obs["agentview_image"][-1, -1])
    np.testing.assert_array_equal(images[1], obs["robot0_eye_in_hand_image"][::-1, ::-1])
    req = vla_client.build_request(images, state, prompt="put the bowl on the plate")
    assert [(i.height, i.width, i.encoding) for i in req.images] == [(8, 6, vla_client.Image.RGB_U8)] * 2
    assert req.images[0].data == images[0].tobytes()
    assert req.prompt == "put the bowl on the plate" and list(req.lang_tokens) == []
    np.testing.assert_array_equal(np.array(req.state, np.float32), state)


def info(**kw):
    base = {"arch": "pi05", "n_images": 2, "image_height": 224, "image_width": 224, "state_dim": 8,
            "max_state_dim": 32, "chunk_size": 10, "action_rows": 10, "action_dim": 7, "max_action_dim": 32}
    base.update(kw)
    return base


def test_policy_io_state_and_cameras():
    obs = fake_obs()
    images, state = libero_client.PolicyIO(info(state_dim=32)).inputs(obs)
    assert len(images) == 2 and state.shape == (32,) and not state[8:].any()
    np.testing.assert_array_equal(state[:8], libero_client.observation_to_inputs(obs)[1])
    io = libero_client.PolicyIO(info(state_dim=6, n_images=1))
    images, state = io.inputs(obs)
    assert len(images) == 1 and state.shape == (6,)
    assert any("state_dim 6" in w for w in io.warnings)
    with pytest.raises(ValueError, match="3 cameras"):
        libero_client.PolicyIO(info(n_images=3))


def test_policy_io_actions_per_arch():
    chunk = np.tile(np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 9.0], np.float32), (16, 1))
    # pi0.5: 5 of the chunk's rows, continuous gripper, the 8th column dropped.
    acts = libero_client.PolicyIO(info(action_dim=8)).env_actions(chunk)
    assert len(acts) == 5 and len(acts[0]) == 7
    np.testing.assert_allclose(acts[0], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], rtol=1e-6)
    # Evo-1: the whole chunk, gripper -1 if > 0.5 else 1.
    io = libero_client.PolicyIO(info(arch="evo1", action_rows=10))
    acts = io.env_actions(chunk[:10, :7])
    assert len(acts) == 10 and acts[0][6] == -1.0
    assert io.env_actions(np.full((10, 7), 0.2))[0][6] == 1.0
    # GR00T N1.5: action 0 of each chunk, sign(2a - 1); N1.7: 8 of 16, -sign(2a - 1).
    acts = libero_client.PolicyIO(info(arch="gr00t_n1_5", action_rows=16)).env_actions(chunk[:, :7])
    assert len(acts) == 1 and acts[0][6] == 1.0
    acts = libero_client.PolicyIO(info(arch="gr00t_n1_7", action_rows=16)).env_actions(chunk[:, :7])
    assert len(acts) == 8 and acts[0][6] == -1.0
    # Flags win over the arch's defaults; a 6-D model gets the no-op's gripper (-1).
    io = libero_client.PolicyIO(info(arch="smolvla", action_dim=6, action_rows=50), replan=3, gripper="binarize01")
    acts = io.env_actions(np.ones((50, 6)))
    assert len(acts) == 3 and acts[0] == [1.0] * 6 + [-1.0]
    assert any("action_dim 6" in w for w in io.warnings)
    with pytest.raises(ValueError, match="actions per chunk"):
        libero_client.PolicyIO(info(), replan=11)
    assert libero_client.PolicyIO(info()).predict_kwargs("x") == {"prompt": "x"}
    assert libero_client.PolicyIO(info(), prompt_tokens=[1, 2]).predict_kwargs("x") == {"tokens": [1, 2]}


class FakeEnv:
    """Succeeds at step `succeed_at` (1-based) if given; records the actions."""

    def __init__(self, succeed_at=None):
        self.succeed_at, self.actions, self.t = succeed_at, [], 0

    def reset(self):
        self.t = 0

    def set_init_state(self, _state):
        return fake_obs()

    def step(self, action):
        self.actions.append(action)
        if action == libero_client.NOOP_ACTION and len(self.actions) <= libero_client.SETTLE_STEPS:
            return fake_obs(), 0.0, False, {}
        self.t += 1
        return fake_obs(), 0.0, self.t == self.succeed_at, {}


class FakeClient:
    def __init__(self, rows=10, dim=7):
        self.rows, self.dim, self.requests = rows, dim, []

    def predict(self, images, state, prompt=None, tokens=None, return_response=True):
        self.requests.append((images, state, prompt, tokens))
        resp = vla_client.PredictResponse(latency_ms_total=5.0, latency_ms_inference=4.0, latency_ms_denoise=3.0)
        return np.zeros((self.rows, self.dim), np.float32), resp


def test_run_episode_loop():
    io = libero_client.PolicyIO(info())  # pi0.5: 5 actions per chunk
    client, env = FakeClient(), FakeEnv()
    rec = libero_client.run_episode(client, env, None, "put the bowl on the plate", io, max_steps=12)
    assert rec["end"] == "step_limit" and not rec["success"] and rec["steps"] == 12
    assert rec["predicts"] == 3 and len(client.requests) == 3  # steps 0, 5, 10
    assert len(env.actions) == libero_client.SETTLE_STEPS + 12
    assert client.requests[0][2] == "put the bowl on the plate" and client.requests[0][1].shape == (8,)
    assert rec["server"]["inference"] == [4.0] * 3 and len(rec["predict_ms"]) == 3
    rec = libero_client.run_episode(FakeClient(), FakeEnv(succeed_at=7), None, "x", io, max_steps=220)
    assert rec["success"] and rec["end"] == "success" and rec["steps"] == 7 and rec["predicts"] == 2


def test_results_summary_and_markdown():
    import run_libero

    io = libero_client.PolicyIO(info())
    rec = libero_client.run_episode(FakeClient(), FakeEnv(succeed_at=7), None, "x", io, max_steps=220)
    rec.update(task_id=0, episode=0)
    skipped = {"task_id": 1, "episode": 0, "skipped": True, "success": False, "steps": 0, "end": "skipped",
               "error": "env build failed: boom"}
    s = run_libero.summarize([rec, skipped])
    assert s["episodes"] == 1 and s["successes"] == 1 and s["skipped"] == 1 and s["steps"] == 7
    assert s["predict_ms_server"]["total"]["median"] == 5.0 and s["control_loop_hz"] > 0
    res = {"summary": s, "episodes": [rec, skipped], "warnings": ["w"], "started": "now",
           "config": {"suite": "libero_spatial", "model": "m.gguf", "episodes_per_task": 1, "seed": 7,
                      "max_steps": 220, "smoke": False},
           "mapping": io.describe(), "server_info": info(backend="cpu"), "machine": {"cpu": "cpu", "cores": 2},
           "tasks": [{"task_id": 0, "instruction": "x", "episodes": 1, "successes": 1,
                      "steps": run_libero.stats([7])},
                     {"task_id": 1, "instruction": "y", "episodes": 0, "successes": 0, "steps": None}]}
    md = run_libero.markdown(res)
    assert "| all | | 1/1 (100.0%) |" in md and "task 1 episode 0: skipped (env build failed: boom)" in md

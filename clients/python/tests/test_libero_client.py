"""Request building of eval/libero_client.py on synthetic LIBERO observations."""

import math

import numpy as np

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

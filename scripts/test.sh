#!/usr/bin/env bash
# Run all tests: ./scripts/test.sh [extra cargo test args...]
#
# Sets up what the tests need on Debian 12 (bookworm), then runs
# `cargo test --workspace`. Every install step is skipped when already
# satisfied, so a second run costs only the cargo step.
#
#   system packages  cmake, libclang-dev (ggml -sys build: cmake + bindgen),
#                    libvulkan1, vulkan-tools, mesa-vulkan-drivers (lavapipe,
#                    a CPU Vulkan driver, so wgpu finds an adapter without a GPU).
#                    Mesa comes from bookworm-backports (Mesa 25: lavapipe ~6x
#                    faster than bookworm's 22.3) when reachable, otherwise from
#                    bookworm with a note.
#   python           gguf (gguf-py, pinned) + numpy, used by interop tests;
#                    pyzmq, protobuf, pytest, openpi-client (+ msgpack, websockets)
#                    for the Python client's and the openpi front end's tests, which run
#                    after cargo against the vla-server binary cargo built (and
#                    eval/tests, the LIBERO smoke run: skipped without its venv).
#
# Knobs (environment):
#   VLA_SKIP_INSTALL=1    skip all package installs (no root needed)
#   VLA_TEST_SKIP_CARGO=1 do everything except the final cargo test
#   VLA_MESA=system       do not use bookworm-backports for Mesa
#
# GPU tests FAIL when no wgpu adapter opens (lavapipe is installed above), so a
# broken driver cannot silently drop GPU coverage; VLA_ALLOW_NO_GPU=1 makes them
# warn loudly instead, for a machine without any Vulkan driver.
#
# Extra args go to cargo test: ./scripts/test.sh -p vla -- --nocapture
# With none, `-- --show-output` is passed so the log shows the op harness table
# (which adapter it ran on, NMSE per op), the Python client tests run too
# (clients/python/tests, pytest), then the docs' commands (scripts/doc-test.sh), and
# formatting is checked first (cargo fmt --check).
set -euo pipefail

cd "$(dirname "$0")/.."

# gguf-py version the interop tests were written against (latest on PyPI
# as of 2026-12). Bump deliberately.
GGUF_PIP_SPEC="gguf==0.19.0"
# openpi's websocket client (openpi_client.WebsocketClientPolicy) the openpi front end is
# tested with: the PyPI package's latest as of 2026-12.
OPENPI_CLIENT_VERSION="0.1.2"

log() { printf '==> %s\n' "$*"; }
note() { printf '==> NOTE: %s\n' "$*" >&2; }

tmp_dir="$(mktemp -d "${TMPDIR:-/tmp}/vla-test.XXXXXX")"
trap 'rm -rf "$tmp_dir"' EXIT

# ---------------------------------------------------------------- privileges
SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        SUDO=(false-no-root) # only used if something actually needs installing
    fi
fi
as_root() {
    if [[ "${SUDO[0]:-}" == false-no-root ]]; then
        echo "error: need root (or sudo) to run: $*" >&2
        echo "       install it yourself or set VLA_SKIP_INSTALL=1" >&2
        return 1
    fi
    "${SUDO[@]}" "$@"
}

# ---------------------------------------------------------------- apt
APT_OPTS=(-o DPkg::Lock::Timeout=300 -o APT::Get::Assume-Yes=true)

pkg_installed() { # pkg_installed NAME -> 0 if dpkg has it fully installed
    [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == "ii " ]]
}

# apt-get update does not honour DPkg::Lock::Timeout for the lists lock:
# retry while another apt holds it (up to ~5 min), fail on anything else.
apt_update() {
    local i
    for ((i = 0; i < 60; i++)); do
        if as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get "${APT_OPTS[@]}" -q update >"$tmp_dir/apt-update.log" 2>&1; then
            return 0
        fi
        if grep -qiE 'could not get lock|unable to lock' "$tmp_dir/apt-update.log"; then
            sleep 5
            continue
        fi
        cat "$tmp_dir/apt-update.log" >&2
        return 1
    done
    cat "$tmp_dir/apt-update.log" >&2
    return 1
}

apt_install() {
    if ! as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get "${APT_OPTS[@]}" -q install --no-install-recommends "$@" \
        >"$tmp_dir/apt-install.log" 2>&1; then
        cat "$tmp_dir/apt-install.log" >&2
        return 1
    fi
}

# The Debian archive URI this machine already uses for bookworm (deb822 or
# one-line format). Backports lives under the same URI (also on
# snapshot.debian.org mirrors), so no new host is ever introduced.
debian_archive_uri() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r "$f" ]] || continue
        uri="$(awk '
            /^[[:space:]]*$/ { if (u != "" && s) { print u; done = 1; exit } u = ""; s = 0; next }
            /^URIs:/ { u = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") s = 1 }
            END { if (!done && u != "" && s) print u }' "$f")"
        [[ -n "$uri" ]] && { echo "$uri"; return; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r "$f" ]] || continue
        uri="$(awk '$1 == "deb" {
            i = 2
            if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
            if ($(i + 1) == "bookworm") { print $i; exit } }' "$f")"
        [[ -n "$uri" ]] && { echo "$uri"; return; }
    done
    echo "http://deb.debian.org/debian"
}

BPO_SOURCE=/etc/apt/sources.list.d/vla-bookworm-backports.sources
backports_configured() {
    grep -rqsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/
}
backports_has_mesa() {
    # (no `| grep -q`: with pipefail, grep exiting early SIGPIPEs apt-cache)
    local m
    m="$(apt-cache madison mesa-vulkan-drivers 2>/dev/null || true)"
    [[ "$m" == *bookworm-backports* ]]
}

# Remember a failed backports attempt so later runs skip it (no network wait).
mark_no_backports() {
    if mkdir -p "$(dirname "$1")" 2>/dev/null; then : >"$1" 2>/dev/null || true; fi
}

install_system_packages() {
    local codename="" want_bpo=0 need_mesa=0 pkgs=() p v
    # shellcheck source=/dev/null
    codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
    if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
        note "not a Debian-like system: skipping system packages"
        return 0
    fi
    local stamp="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/vla-rs/mesa-backports-unavailable"
    if [[ "$codename" == bookworm && "${VLA_MESA:-}" != system && ! -e "$stamp" ]]; then
        want_bpo=1
    fi

    for p in cmake libclang-dev libvulkan1 vulkan-tools; do
        pkg_installed "$p" || pkgs+=("$p")
    done
    command -v c++ >/dev/null 2>&1 || pkgs+=(g++)
    command -v make >/dev/null 2>&1 || pkgs+=(make)
    if command -v python3 >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; then
        pkgs+=(python3-pip)
    fi
    if ! pkg_installed mesa-vulkan-drivers; then
        need_mesa=1
    elif ((want_bpo)); then
        v="$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers)"
        dpkg --compare-versions "$v" ge 24 || need_mesa=1
    fi

    if ((${#pkgs[@]} == 0 && need_mesa == 0)); then
        log "system packages: ok (mesa-vulkan-drivers $(dpkg-query -W -f='${Version}' mesa-vulkan-drivers))"
        return 0
    fi

    local t0=$SECONDS
    if ((need_mesa && want_bpo)) && ! backports_configured; then
        local uri
        uri="$(debian_archive_uri)"
        log "adding bookworm-backports ($uri) for Mesa 25"
        printf '%s\n' \
            "# Added by vla-rs scripts/test.sh: Mesa 25 (faster lavapipe) from backports." \
            "# Backports are pinned at priority 100: nothing else is taken from here" \
            "# unless asked for explicitly (pkg/bookworm-backports)." \
            "Types: deb" \
            "URIs: $uri" \
            "Suites: bookworm-backports" \
            "Components: main" \
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" |
            as_root tee "$BPO_SOURCE" >/dev/null
    fi

    log "apt-get update"
    if ! apt_update; then
        if [[ -e "$BPO_SOURCE" ]]; then
            note "apt-get update failed; retrying without bookworm-backports"
            as_root rm -f "$BPO_SOURCE"
            apt_update
        else
            return 1
        fi
    fi

    local mesa_spec=()
    if ((need_mesa)); then
        mesa_spec=(mesa-vulkan-drivers)
        if ((want_bpo)); then
            if backports_has_mesa; then
                # pkg/release: only mesa-vulkan-drivers (and the libdrm it needs)
                # come from backports; everything else stays on bookworm.
                mesa_spec=(mesa-vulkan-drivers/bookworm-backports)
            else
                note "no Mesa from bookworm-backports (unreachable?): using bookworm's Mesa 22 (lavapipe ~6x slower)"
                [[ -e "$BPO_SOURCE" ]] && as_root rm -f "$BPO_SOURCE"
                mark_no_backports "$stamp"
            fi
        fi
    fi

    local all=("${pkgs[@]}" "${mesa_spec[@]}")
    log "installing ${all[*]}"
    if ! apt_install "${pkgs[@]}" "${mesa_spec[@]}"; then
        if [[ "${mesa_spec[0]:-}" == mesa-vulkan-drivers/bookworm-backports ]]; then
            note "Mesa from bookworm-backports failed to install: falling back to bookworm's Mesa 22 (lavapipe ~6x slower); rm $stamp to retry"
            mark_no_backports "$stamp"
            mesa_spec=()
            pkg_installed mesa-vulkan-drivers || mesa_spec=(mesa-vulkan-drivers)
            apt_install "${pkgs[@]}" "${mesa_spec[@]}"
        else
            return 1
        fi
    fi
    log "system packages: installed in $((SECONDS - t0))s (mesa-vulkan-drivers $(dpkg-query -W -f='${Version}' mesa-vulkan-drivers))"
}

# ---------------------------------------------------------------- python
install_python_packages() {
    if ! command -v python3 >/dev/null 2>&1; then
        note "python3 not found: interop tests that need gguf-py will fail"
        return 0
    fi
    local want="${GGUF_PIP_SPEC#gguf==}"
    if python3 - "$want" "$OPENPI_CLIENT_VERSION" <<'PY' 2>/dev/null; then
import sys, importlib.metadata as m
import gguf, numpy, zmq, google.protobuf, pytest, msgpack, websockets  # noqa: F401
import openpi_client.websocket_client_policy  # noqa: F401
sys.exit(m.version("gguf") != sys.argv[1] or m.version("openpi-client") != sys.argv[2])
PY
        log "python packages: ok (gguf $want, openpi-client $OPENPI_CLIENT_VERSION)"
        return 0
    fi
    local t0=$SECONDS
    log "installing python packages: $GGUF_PIP_SPEC numpy pyzmq protobuf pytest openpi-client"
    # Debian's python3 is "externally managed" (PEP 668); this is a throwaway
    # CI/dev environment, so install into it anyway. Old pips ignore these.
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
        python3 -m pip install --quiet "$GGUF_PIP_SPEC" numpy pyzmq "protobuf>=4.21" pytest \
        msgpack "websockets>=11"
    # openpi's websocket client, for the openpi front end's tests: without its dependencies,
    # which pin numpy < 2 for modules the client does not import (its websocket policy
    # needs msgpack and websockets only, installed above).
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
        python3 -m pip install --quiet --no-deps "openpi-client==$OPENPI_CLIENT_VERSION"
    log "python packages: installed in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- main
if [[ "${VLA_SKIP_INSTALL:-}" == 1 ]]; then
    log "VLA_SKIP_INSTALL=1: skipping installs"
else
    install_system_packages
    install_python_packages
fi

# Mesa (22 in particular) warns "XDG_RUNTIME_DIR is invalid" on every Vulkan
# instance unless it names a directory owned by us with mode 0700.
if [[ -z "${XDG_RUNTIME_DIR:-}" || ! -d "$XDG_RUNTIME_DIR" || ! -O "$XDG_RUNTIME_DIR" ||
    "$(stat -c %a "$XDG_RUNTIME_DIR" 2>/dev/null)" != 700 ]]; then
    mkdir -m 700 "$tmp_dir/xdg-runtime"
    export XDG_RUNTIME_DIR="$tmp_dir/xdg-runtime"
fi

# Diagnostic only: which Vulkan devices wgpu will see.
if command -v vulkaninfo >/dev/null 2>&1; then
    if vk="$(timeout 60 vulkaninfo --summary 2>/dev/null)"; then
        vk="$(printf '%s\n' "$vk" | sed -n 's/^[[:space:]]*\(deviceName\|driverInfo\)[[:space:]]*= /\1: /p')"
        if [[ -n "$vk" ]]; then
            printf '%s\n' "$vk" | paste -d' ' - - | sed 's/^/==> vulkan: /'
        else
            note "vulkaninfo lists no devices"
        fi
    else
        note "vulkaninfo --summary failed (no Vulkan driver?)"
    fi
else
    note "vulkaninfo not found"
fi

if [[ -n "${CI:-}" ]]; then
    # Fresh clone, one build: incremental artifacts are pure overhead.
    export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

cargo_args=(test --workspace)
[[ -f Cargo.lock ]] && cargo_args+=(--locked)
if (($#)); then
    cargo_args+=("$@")
else
    cargo_args+=(-- --show-output)
fi

if [[ "${VLA_TEST_SKIP_CARGO:-}" == 1 ]]; then
    log "VLA_TEST_SKIP_CARGO=1: would run: cargo ${cargo_args[*]}"
    exit 0
fi
if (($# == 0)); then
    # The code is formatted with rustfmt's defaults (no rustfmt.toml); a full run checks it.
    if cargo fmt --version >/dev/null 2>&1; then
        log "cargo fmt --all --check"
        cargo fmt --all --check >/dev/null || {
            echo "error: the code is not rustfmt-formatted: run cargo fmt --all" >&2
            exit 1
        }
    else
        note "rustfmt is not installed (rustup component add rustfmt): formatting not checked"
    fi
fi
log "cargo ${cargo_args[*]}"
cargo "${cargo_args[@]}"

if (($# == 0)); then
    # cargo test built target/debug/vla-server for the crate's integration tests.
    export VLA_SERVER_BIN="${CARGO_TARGET_DIR:-target}/debug/vla-server"
    # eval/tests: the LIBERO smoke run, skipped at once (with a warning) without the LIBERO
    # venv, which this script never installs (eval/run_libero.sh --install does, ~2 GB).
    log "python3 -m pytest clients/python/tests eval/tests (VLA_SERVER_BIN=$VLA_SERVER_BIN)"
    # clients/lerobot/tests skip (saying so) where lerobot is not installed.
    python3 -m pytest -q -rs -p no:cacheprovider --rootdir=. clients/python/tests \
        clients/lerobot/tests eval/tests
    # The docs' runnable commands (marked `<!-- doctest -->`) against the binaries cargo built,
    # and docs/ARCHITECTURE.md's paths and the docs' links against the tree.
    log "scripts/doc-test.sh"
    VLA_BIN_DIR="${CARGO_TARGET_DIR:-target}/debug" ./scripts/doc-test.sh
fi

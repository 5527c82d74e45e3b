#!/usr/bin/env bash
# Build vla-rs with one of ggml's GPU backends, as shared libraries:
#   ./scripts/build-ggml-gpu.sh sycl|vulkan|cuda [cargo args...]
#
# Default cargo args: build -p vla-server --release (the server, with --backend ggml-<name>).
# Other args replace them, e.g. the op harness on the GPU device as well as ggml-cpu:
#   VLA_TEST_GGML_DEVICES=CPU,SYCL0 ./scripts/build-ggml-gpu.sh sycl test --release --test ops_harness
# The script adds --features vla/ggml-<name> itself.
#
# What it sets (llama-cpp-sys-2, which builds ggml with CMake, forwards every GGML_* and
# CMAKE_* variable to CMake):
#   sycl only: GGML_SYCL=ON, CMAKE_C_COMPILER=icx, CMAKE_CXX_COMPILER=icpx (the sys crate has
#              no SYCL feature; ggml-sycl needs oneAPI's -fsycl compiler). It sources
#              $ONEAPI_ROOT/setvars.sh (default /opt/intel/oneapi) when icpx is not on PATH.
#   LLAMA_BUILD_SHARED_LIBS=1  libggml-<name>.so carries its own dependencies (SYCL runtime,
#              oneMKL, oneDNN; cudart, cuBLAS); a static archive would need each of them
#              named at link time.
#   CARGO_TARGET_DIR=target/ggml-<name>  CMake caches its compilers and options, so such a
#              build must not share a build directory with the default one.
#   RUSTFLAGS += -C link-arg=-Wl,--disable-new-dtags,-rpath,$ORIGIN  binaries look for the
#              libraries next to themselves, and so does libggml for its backends (an
#              RPATH applies to indirect dependencies, a RUNPATH would not); the script
#              puts the libraries there after the build.
# cuda and vulkan also build without this script (static: --features ggml-cuda / ggml-vulkan);
# docs/GGML.md lists what each needs installed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; }
backend="${1:-}"
case "$backend" in
    sycl | vulkan | cuda) shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage; echo "error: first argument must be sycl, vulkan or cuda (got ${backend:-nothing})" >&2; exit 2 ;;
esac

if [[ "$backend" == sycl ]]; then
    if ! command -v icpx >/dev/null 2>&1; then
        setvars="${ONEAPI_ROOT:-/opt/intel/oneapi}/setvars.sh"
        if [[ ! -f "$setvars" ]]; then
            echo "error: icpx is not on PATH and $setvars does not exist." >&2
            echo "       Install the Intel oneAPI Base Toolkit (DPC++/C++ compiler, oneMKL)," >&2
            echo "       or set ONEAPI_ROOT to where it is installed." >&2
            exit 1
        fi
        # setvars.sh reads unset variables and returns non-zero on harmless warnings.
        set +eu
        # shellcheck disable=SC1090
        source "$setvars" >/dev/null
        set -eu
        command -v icpx >/dev/null 2>&1 || { echo "error: $setvars did not put icpx on PATH" >&2; exit 1; }
    fi
    export GGML_SYCL=ON CMAKE_C_COMPILER=icx CMAKE_CXX_COMPILER=icpx
fi

export LLAMA_BUILD_SHARED_LIBS=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/ggml-$backend}"
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C link-arg=-Wl,--disable-new-dtags,-rpath,\$ORIGIN"

# llama-cpp-sys-2 hard-links each library into the profile directory, but for the
# unversioned names that is a hard link to a relative symlink (libggml.so -> libggml.so.0),
# which dangles there; binaries need the versioned names (libggml.so.0); and a later run of
# its build script stops with "File exists" on the dangling links. So: drop dangling links
# before, and copy the whole set (files and links) next to the binaries after.
find "$CARGO_TARGET_DIR" -maxdepth 3 -name 'lib*.so*' -xtype l -delete 2>/dev/null || true

[[ $# -gt 0 ]] || set -- build -p vla-server --release
# The feature goes before a `--`, after which arguments are the test binaries'.
args=()
while [[ $# -gt 0 && "$1" != -- ]]; do args+=("$1"); shift; done
args+=(--features "vla/ggml-$backend" "$@")
echo "==> cargo ${args[*]} (into $CARGO_TARGET_DIR)"
cargo "${args[@]}"

for profile_dir in "$CARGO_TARGET_DIR"/*/; do
    # The newest ggml build of this profile that has this backend.
    lib=$(ls -td "$profile_dir"build/llama-cpp-sys-2-*/out/lib*/libggml-"$backend".so.0 2>/dev/null | head -1)
    [[ -n "$lib" ]] || continue
    for dest in "$profile_dir" "$profile_dir"deps/; do
        cp -a "$(dirname "$lib")"/lib*.so* "$dest"
    done
    echo "==> ggml libraries from $(dirname "$lib") placed in $profile_dir"
done

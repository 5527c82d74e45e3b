#!/usr/bin/env bash
# The main job: ./scripts/run.sh [vla-server options]
#
# Builds vla-server (release) and serves the built-in demo model (a small SmolVLA-shaped
# policy with random weights) on tcp://*:5555 with the cpu backend. Extra arguments go to
# vla-server, e.g. `./scripts/run.sh --backend vulkan` or `./scripts/run.sh --bind tcp://127.0.0.1:6000`.
# Serve a real model with: target/release/vla-server --backend vulkan model.gguf
# Talk to it with clients/python/vla_client.py (see docs/PROTOCOL.md). Ctrl-C stops it.
#
# Needs the Rust toolchain, a C/C++ compiler and cmake (ggml, libzmq are built from source);
# ./scripts/test.sh installs everything both scripts need.
set -euo pipefail
cd "$(dirname "$0")/.."
# Build tools (cmake, g++, libclang-dev), the Vulkan loader and lavapipe: skipped when present.
VLA_TEST_SKIP_CARGO=1 ./scripts/test.sh
echo "==> building vla-server (release; the first build takes several minutes)"
cargo build --release --locked -p vla-server --bin vla-server
echo "==> vla-server --demo $*"
exec target/release/vla-server --demo "$@"

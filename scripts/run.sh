#!/usr/bin/env bash
# The main job: ./scripts/run.sh
#
# Until vla-server lands (issue 8) this builds the release tools and inspects a GGUF written
# by gguf-py (from the reader's test corpus) with `vla-gguf info`; it will start
# `vla-server --demo` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "==> building vla-gguf (release)"
cargo build --release --locked -p vla-server --bin vla-gguf
echo "==> vla-gguf info tests/corpus/gguf/ok-gguf-py-all-types.gguf"
exec target/release/vla-gguf info tests/corpus/gguf/ok-gguf-py-all-types.gguf "$@"

#!/usr/bin/env bash
# The documentation's tests: ./scripts/doc-test.sh [--list] [--checks-only] [--only TEXT] [--keep]
#
# Runs every ```sh block of README.md and docs/*.md marked `<!-- doctest -->` (the line before
# its fence) against freshly built binaries, each in a temp dir with `set -euo pipefail`,
# target/debug (or $VLA_BIN_DIR) first on PATH, FIXTURES=tests/fixtures and an empty Hugging
# Face cache; background servers a block starts are killed when it ends. Also checks that
# every path docs/ARCHITECTURE.md names exists (and that it names every module of src/,
# src/models, src/modules, src/layers) and that the docs' relative links and anchors resolve.
# A failure names the block's file:line. Needs python3 (stdlib only) and, for the blocks,
# `cargo build -p vla-server --bins` first. The logic is scripts/doc_test.py.
set -euo pipefail
exec python3 "$(dirname "$0")/doc_test.py" "$@"

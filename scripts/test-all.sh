#!/usr/bin/env bash
# The whole mqblk test suite, from a fresh Debian machine: installs what the
# tests need, then runs unit, integration, CLI and doc tests (debug build, so
# lifecycle assertions are on) and the loom models (bounded preemptions).
set -euo pipefail
cd "$(dirname "$0")/.."

# Tools the tests need. The Rust toolchain is assumed (rustup's cargo).
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "== installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

echo "== unit, integration and CLI tests"
cargo nextest run --workspace

echo "== doc tests"
cargo test --doc --workspace

echo "== loom models"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p mqblk --release --test loom_sbitmap --lib -- loom

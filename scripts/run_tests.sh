#!/usr/bin/env bash
# The test command: installs the build dependencies, builds, and runs every CTest test.
#
# Usage: scripts/run_tests.sh [extra ctest arguments, e.g. -L unit]
# Builds only sm_90 unless GPUBENCH_CUDA_ARCHS says otherwise (keeps the build short), and the
# AddressSanitizer + UBSan twins of the binary and the unit and CLI tests (label "sanitize"; the
# host code compiled twice, the kernels once). Tests that need a GPU report "skipped" (exit 77) on
# a machine without one. Exits non-zero when a dependency, the build or any test fails.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

export GPUBENCH_CUDA_ARCHS="${GPUBENCH_CUDA_ARCHS:-90}"
build_dir=${GPUBENCH_BUILD_DIR:-build}

bash scripts/install_deps.sh
GPUBENCH_CMAKE_ARGS="${GPUBENCH_CMAKE_ARGS:-} -DGPUBENCH_SANITIZE=ON" bash scripts/build.sh

# Tests without a TIMEOUT property of their own get 300 s: a hang fails, it never blocks.
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error --timeout 300 "$@"

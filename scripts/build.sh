#!/usr/bin/env bash
# Configures and builds gpubench into build/ (Release, incremental).
#
# Usage: scripts/build.sh [TARGET...]      (no target: everything, tests included)
# Environment:
#   GPUBENCH_CUDA_ARCHS  CUDA architectures, e.g. "90" or "80;90"; unset: the project's default
#                        list (a build/ configured earlier for other architectures is reset to it)
#   GPUBENCH_BUILD_DIR   build folder (default: build)
#   GPUBENCH_BUILD_TYPE  CMake build type (default: Release)
#   GPUBENCH_JOBS        parallel jobs (default: nproc)
#   GPUBENCH_CMAKE_ARGS  extra configure arguments, split on spaces
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

say() { echo "build: $*"; }

build_dir=${GPUBENCH_BUILD_DIR:-build}
build_type=${GPUBENCH_BUILD_TYPE:-Release}
jobs=${GPUBENCH_JOBS:-$(nproc 2>/dev/null || echo 2)}

# nvcc from PATH, else the usual install folders (CMake finds the CUDA compiler through PATH).
if ! command -v nvcc >/dev/null 2>&1; then
  for cuda in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [[ -n "$cuda" && -x "$cuda/bin/nvcc" ]]; then
      PATH="$cuda/bin:$PATH"
      export PATH
      break
    fi
  done
fi
if ! command -v nvcc >/dev/null 2>&1; then
  say "nvcc not found in PATH or /usr/local/cuda/bin: install the CUDA toolkit (12.0+)" >&2
  exit 1
fi

configure=(-S . -B "$build_dir" "-DCMAKE_BUILD_TYPE=$build_type")
if [[ -n "${GPUBENCH_CUDA_ARCHS:-}" ]]; then
  configure+=("-DCMAKE_CUDA_ARCHITECTURES=$GPUBENCH_CUDA_ARCHS")
else
  # Forget a previous choice so the project's default list applies again.
  configure+=("-UCMAKE_CUDA_ARCHITECTURES")
fi
# The generator is fixed at the first configure; Ninja is faster when it is there.
if [[ ! -f "$build_dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
  configure+=(-G Ninja)
fi
if [[ -n "${GPUBENCH_CMAKE_ARGS:-}" ]]; then
  read -r -a extra_args <<<"$GPUBENCH_CMAKE_ARGS"
  configure+=("${extra_args[@]}")
fi

say "configuring $build_dir ($build_type, CUDA archs: ${GPUBENCH_CUDA_ARCHS:-project default})"
mkdir -p "$build_dir"
log="$build_dir/configure.log"
if ! cmake "${configure[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  say "cmake configure failed (log: $log)" >&2
  exit 1
fi
grep -- '-- gpubench:' "$log" | sed 's/^-- /build: /' || true

targets=()
for target in "$@"; do
  targets+=(--target "$target")
done
say "building with $jobs jobs${*:+ (targets: $*)}"
if ! cmake --build "$build_dir" -j "$jobs" "${targets[@]}"; then
  say "build failed" >&2
  exit 1
fi
say "done: $build_dir/gpubench"

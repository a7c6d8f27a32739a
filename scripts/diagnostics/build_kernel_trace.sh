#!/usr/bin/env bash
# Builds kernel_trace.cpp into OUT_DIR/libkernel_trace.so with CUPTI's library beside it, so that
# the folder can be carried to a GPU machine as it is.
# Usage: scripts/diagnostics/build_kernel_trace.sh OUT_DIR
# CUPTI: $CUPTI_ROOT (include/, lib/ or lib64/), else the CUDA toolkit's extras/CUPTI, else the
# PyPI package nvidia-cuda-cupti of the toolkit's major.minor version (downloaded).
set -euo pipefail
out=${1:?usage: scripts/diagnostics/build_kernel_trace.sh OUT_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$out"
root=${CUPTI_ROOT:-}
if [[ -z "$root" && -f "$cuda/extras/CUPTI/include/cupti.h" ]]; then root=$cuda/extras/CUPTI; fi
if [[ -z "$root" ]]; then
  version=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
  [[ -n "$version" ]] || { echo "build_kernel_trace.sh: no nvcc in $cuda" >&2; exit 2; }
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps "nvidia-cuda-cupti==${version}.*" -d "$tmp"
  (cd "$tmp" && python3 -m zipfile -e ./*.whl .)
  root=$(dirname "$(dirname "$(find "$tmp" -name cupti.h | head -1)")")
fi
lib=$(find "$root" -maxdepth 2 -name 'libcupti.so*' -type f | head -1)
[[ -f "$root/include/cupti.h" && -n "$lib" ]] || { echo "build_kernel_trace.sh: no CUPTI in $root" >&2; exit 2; }
cp "$lib" "$out/"
ln -sf "$(basename "$lib")" "$out/libcupti.so"
g++ -O2 -Wall -shared -fPIC -o "$out/libkernel_trace.so" "$here/kernel_trace.cpp" \
  -I"$root/include" -I"$cuda/include" -L"$out" -lcupti -Wl,-rpath,'$ORIGIN'
rm -f "$out/libcupti.so"  # linked; the library asks for its soname, copied above
echo "built $out/libkernel_trace.so (CUPTI: $lib)"

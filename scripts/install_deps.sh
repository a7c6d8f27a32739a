#!/usr/bin/env bash
# Installs gpubench's build dependencies (apt, as root) and checks the CUDA toolkit and NCCL.
#
# Usage: scripts/install_deps.sh [--check] [--run]
#   --check   only report what is missing; never install.
#   --run     only what building and running the binary needs (quick_start.sh): GoogleTest and
#             MPI are used when present (the tests; mpirun/srun runs) but not installed.
# Skips apt entirely when everything is present. matplotlib (for the charts) is optional: it is
# installed when root, only noted otherwise. GPUBENCH_SKIP_DEPS=1 skips every check (for
# machines where the libraries live where this script does not look).
# Exit: 0 ready, 1 something required is missing and could not be installed, 2 bad usage.
set -euo pipefail

readonly MIN_CMAKE=3.24
readonly MIN_CUDA=12.0
readonly APT_LOG="${TMPDIR:-/tmp}/gpubench-install-deps.log"

check_only=0
run_only=0
for arg in "$@"; do
  case "$arg" in
    --check) check_only=1 ;;
    --run) run_only=1 ;;
    -h | --help)
      sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "install_deps: unknown argument '$arg' (try --help)" >&2
      exit 2
      ;;
  esac
done

say() { echo "install_deps: $*"; }

# joined A B C -> "A, B, C"
joined() {
  local out="" item
  for item in "$@"; do
    out+="${out:+, }$item"
  done
  echo "$out"
}

if [[ "${GPUBENCH_SKIP_DEPS:-0}" == 1 ]]; then
  say "GPUBENCH_SKIP_DEPS=1: not checking dependencies"
  exit 0
fi

# version_ge A B: true when version A >= version B (dotted numbers).
version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]; }

have_cmd() { command -v "$1" >/dev/null 2>&1; }

# have_header REL: the header is in one of the compiler's usual include folders.
have_header() {
  local dir
  for dir in /usr/include /usr/local/include /usr/include/x86_64-linux-gnu \
    /usr/include/aarch64-linux-gnu; do
    [[ -f "$dir/$1" ]] && return 0
  done
  return 1
}

# have_file GLOB...: at least one of the globs matches an existing file.
have_file() {
  local pattern match
  for pattern in "$@"; do
    for match in $pattern; do
      [[ -e "$match" ]] && return 0
    done
  done
  return 1
}

have_matplotlib() {
  local python
  # Debian's python3-matplotlib is for /usr/bin/python3; plot_results.py falls back to it.
  for python in python3 /usr/bin/python3; do
    have_cmd "$python" && "$python" -c 'import matplotlib' >/dev/null 2>&1 && return 0
  done
  return 1
}

cmake_version() { cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9.]*\).*/\1/p'; }

# Fills missing_pkgs / missing_what (required: Debian package, what was looked for) and
# optional_pkgs / optional_what (nice to have: the charts).
check_packages() {
  missing_pkgs=()
  missing_what=()
  optional_pkgs=()
  optional_what=()
  need() {  # need PACKAGE WHAT CHECK...
    local pkg=$1 what=$2
    shift 2
    if ! "$@"; then
      missing_pkgs+=("$pkg")
      missing_what+=("$what")
    fi
  }
  want() {  # want PACKAGE WHAT CHECK...
    local pkg=$1 what=$2
    shift 2
    if ! "$@"; then
      optional_pkgs+=("$pkg")
      optional_what+=("$what")
    fi
  }
  need cmake "cmake" have_cmd cmake
  need g++ "g++" have_cmd g++
  need make "make" have_cmd make
  need libcli11-dev "CLI11 (CLI/CLI.hpp)" have_header CLI/CLI.hpp
  need nlohmann-json3-dev "nlohmann/json (nlohmann/json.hpp)" have_header nlohmann/json.hpp
  need libspdlog-dev "spdlog (spdlog/spdlog.h)" have_header spdlog/spdlog.h
  need libfmt-dev "fmt (fmt/format.h)" have_header fmt/format.h
  if ((!run_only)); then
    need libgtest-dev "GoogleTest (gtest/gtest.h)" have_header gtest/gtest.h
    need libopenmpi-dev "MPI compiler wrapper (mpicxx)" have_cmd mpicxx
    need openmpi-bin "mpirun" have_cmd mpirun
  fi
  need python3 "python3" have_cmd python3
  want python3-matplotlib "matplotlib for python3 (charts)" have_matplotlib
}

install_packages() {
  say "installing ${*} (apt-get; log: $APT_LOG)"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"; } \
    >"$APT_LOG" 2>&1; then
    say "apt-get failed; the last lines of $APT_LOG:" >&2
    tail -n 20 "$APT_LOG" >&2
    exit 1
  fi
}

check_packages
is_root=0
[[ "$(id -u)" == 0 ]] && is_root=1
if ((${#missing_pkgs[@]} > 0)) || { ((is_root && !check_only)) && ((${#optional_pkgs[@]} > 0)); }; then
  all_pkgs=("${missing_pkgs[@]}" "${optional_pkgs[@]}")
  all_what=("${missing_what[@]}" "${optional_what[@]}")
  if ((check_only)); then
    say "missing: $(joined "${all_what[@]}")" >&2
    say "install with: sudo apt-get install -y ${all_pkgs[*]}" >&2
    exit 1
  fi
  if ! have_cmd apt-get; then
    say "missing: $(joined "${all_what[@]}")" >&2
    say "no apt-get here: install the equivalents of these Debian packages: ${all_pkgs[*]}" >&2
    exit 1
  fi
  if ((!is_root)); then
    say "missing: $(joined "${all_what[@]}")" >&2
    say "run as root, or install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${all_pkgs[*]}" >&2
    exit 1
  fi
  install_packages "${all_pkgs[@]}"
  check_packages
  if ((${#missing_pkgs[@]} > 0)); then
    say "still missing after apt-get: $(joined "${missing_what[@]}")" >&2
    exit 1
  fi
fi
charts="matplotlib"
if ((${#optional_pkgs[@]} > 0)); then
  charts="no matplotlib: charts will be skipped (sudo apt-get install -y ${optional_pkgs[*]})"
fi

problems=()

cmake_ver=$(cmake_version)
if [[ -z "$cmake_ver" ]] || ! version_ge "$cmake_ver" "$MIN_CMAKE"; then
  problems+=("cmake ${cmake_ver:-?} is older than $MIN_CMAKE (pip install cmake gives a newer one)")
fi

# The CUDA toolkit cannot come from Debian's packages: find it and say clearly when it is absent.
nvcc_path=$(command -v nvcc 2>/dev/null || true)
for candidate in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [[ -n "$nvcc_path" ]] && break
  [[ -n "$candidate" && -x "$candidate/bin/nvcc" ]] && nvcc_path="$candidate/bin/nvcc"
done
cuda_ver=""
cuda_root=""
if [[ -z "$nvcc_path" ]]; then
  problems+=("CUDA toolkit $MIN_CUDA+ not found (no nvcc in PATH or /usr/local/cuda/bin);
  install NVIDIA's CUDA toolkit (this script cannot), or put its bin/ on PATH")
else
  cuda_root=$(cd "$(dirname "$(readlink -f "$nvcc_path")")/.." && pwd)
  cuda_ver=$("$nvcc_path" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')
  if [[ -z "$cuda_ver" ]] || ! version_ge "$cuda_ver" "$MIN_CUDA"; then
    problems+=("CUDA ${cuda_ver:-?} at $nvcc_path is older than $MIN_CUDA")
  fi
  if ! have_file "$cuda_root"/lib*/libcublasLt.so* "$cuda_root"/targets/*/lib/libcublasLt.so* \
    /usr/lib/*-linux-gnu/libcublasLt.so*; then
    problems+=("cuBLASLt (libcublasLt.so) not found beside $nvcc_path")
  fi
fi

# NCCL: the header and the library, where FindNCCL.cmake looks.
nccl_dirs=()
[[ -n "${NCCL_ROOT:-}" ]] && nccl_dirs+=("$NCCL_ROOT")
[[ -n "$cuda_root" ]] && nccl_dirs+=("$cuda_root" "$cuda_root/targets/x86_64-linux" \
  "$cuda_root/targets/sbsa-linux")
nccl_dirs+=(/usr /usr/local)
find_nccl_header() {
  local dir
  for dir in "${nccl_dirs[@]}"; do
    [[ -f "$dir/include/nccl.h" ]] && { echo "$dir/include/nccl.h"; return 0; }
  done
  return 1
}
find_nccl_library() {
  local dir
  for dir in "${nccl_dirs[@]}"; do
    have_file "$dir"/lib/libnccl.so* "$dir"/lib64/libnccl.so* "$dir"/lib/*-linux-gnu/libnccl.so* \
      && return 0
  done
  return 1
}
nccl_header=$(find_nccl_header || true)
if [[ -z "$nccl_header" ]] || ! find_nccl_library; then
  # NVIDIA's apt repository has libnccl-dev; use it when this machine has that repository.
  if ((!check_only)) && [[ "$(id -u)" == 0 ]] && have_cmd apt-cache \
    && apt-cache policy libnccl-dev 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    install_packages libnccl-dev libnccl2
    nccl_header=$(find_nccl_header || true)
  fi
fi
nccl_ver=""
if [[ -z "$nccl_header" ]] || ! find_nccl_library; then
  problems+=("NCCL not found (nccl.h and libnccl.so in the CUDA toolkit, /usr or \$NCCL_ROOT);
  install libnccl-dev from NVIDIA's CUDA repository, or set NCCL_ROOT to where NCCL is")
else
  nccl_ver=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END{print v}' \
    "$nccl_header")
fi

if ((${#problems[@]} > 0)); then
  for problem in "${problems[@]}"; do
    say "$problem" >&2
  done
  exit 1
fi

mpi_ver=$(mpirun --version 2>/dev/null | sed -n '1s/.*(Open MPI) \([0-9.]*\).*/, Open MPI \1/p')
say "ready: cmake $cmake_ver, g++ $(g++ -dumpfullversion 2>/dev/null), CUDA $cuda_ver," \
  "NCCL ${nccl_ver:-?}${mpi_ver}; $charts"

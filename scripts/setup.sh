#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian 12 machine (run as root) for tgc's tests: installs the Debian packages the
# tests need only when missing (OpenCL on PoCL, C toolchains incl. aarch64 cross-compiler and qemu, software
# Vulkan for WebGPU, Chromium for WebGPU artifacts), then installs tgc itself in editable mode with its dev and cuda
# extras: the dependencies at the known-good versions of constraints.txt, or with TGC_LATEST=1 in the environment
# at their newest releases (what a plain `pip install` on a fresh machine would get today).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEBIAN_PACKAGES=(pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev clinfo gcc clang make gcc-aarch64-linux-gnu
                 libc6-dev-arm64-cross qemu-user
                 cmake                             # the C-family artifacts' CMakeLists.txt (tests/emit/test_c_cmake.py)
                 mesa-vulkan-drivers libvulkan1    # lavapipe: a software Vulkan adapter for the WebGPU runtime (wgpu)
                 chromium)                         # headless Chromium (SwiftShader WebGPU) for the WebGPU artifacts
# model.js under node; npm pack and the esbuild app of the package: Debian's packages only where no node and npm
# are installed at all (a NodeSource nodejs carries its own npm, which Debian's npm package would conflict with)
COMMAND_PACKAGES=(node:nodejs npm:npm)

missing=()
for package in "${DEBIAN_PACKAGES[@]}"; do
  if ! dpkg -s "$package" >/dev/null 2>&1; then
    missing+=("$package")
  fi
done
for entry in "${COMMAND_PACKAGES[@]}"; do
  if ! command -v "${entry%%:*}" >/dev/null 2>&1; then
    missing+=("${entry#*:}")
  fi
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: missing Debian packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_log="$(mktemp)"
  trap 'rm -f "$apt_log"' EXIT
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    echo "setup.sh: apt-get failed installing ${missing[*]}" >&2
    exit 1
  fi
fi

PYTHON="$(command -v python || command -v python3)" || { echo "setup.sh: no python found" >&2; exit 1; }
# Debian's own python refuses system-wide pip installs (PEP 668); this machine is dedicated to the tests.
export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
cd "$REPO_ROOT"
# the cuda extra (cuda-python + NVRTC wheels) installs without a GPU: CUDA kernels are compiled in the tests everywhere;
# the ray extra lets the tests start a local Ray cluster for --beam-cluster
if [[ "${TGC_LATEST:-0}" == 1 ]]; then
  echo "setup.sh: TGC_LATEST=1: installing the newest release of every dependency (not constraints.txt)"
  "$PYTHON" -m pip install -q --upgrade --upgrade-strategy eager -e '.[dev,cuda,ray]'
else
  "$PYTHON" -m pip install -q -c constraints.txt -e '.[dev,cuda,ray]'
fi

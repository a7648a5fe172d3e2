#!/usr/bin/env bash
# Runs tgc's whole test suite the way CI does: set up the machine, then pytest on 2 workers (pytest-xdist) with a
# private PoCL kernel cache; exits with pytest's exit code.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh

pocl_cache_dir="$(mktemp -d)"
trap 'rm -rf "$pocl_cache_dir"' EXIT
python_bin="$(command -v python || command -v python3)"
status=0
# Mesa's software Vulkan and PoCL cannot share a process (each loads its own LLVM): WebGPU tests run on their own.
POCL_CACHE_DIR="$pocl_cache_dir" "$python_bin" -m pytest -n 2 -m "not webgpu" tests || status=$?
webgpu_status=0
POCL_CACHE_DIR="$pocl_cache_dir" "$python_bin" -m pytest -n 2 -m webgpu tests || webgpu_status=$?
if [ "$status" -eq 0 ]; then status=$webgpu_status; fi
exit "$status"

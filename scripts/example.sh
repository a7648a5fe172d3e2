#!/usr/bin/env bash
# The main job on the bundled example: set up (Debian packages + pip), then compile the example CNN for the C and
# OpenCL devices, validate it against the numpy interpreter and time it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$(mktemp -d)}"
python examples/run_example.py
python bench/bench_core.py --sizes 512 1024 --runs 3

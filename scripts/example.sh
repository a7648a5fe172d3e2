#!/usr/bin/env bash
# The main job on the bundled example: set up (Debian packages + pip), then compile the example CNN into a C
# artifact with the tgc CLI, validate the artifact against the numpy interpreter and time it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
tgc compile examples/mnist_cnn.py:build --target c -o out/mnist --force
tgc validate out/mnist
tgc bench out/mnist

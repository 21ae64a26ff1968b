#!/usr/bin/env bash
# The reference forward on CUDA, when a GPU is present: parity with the CPU and with transformers, and timings.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh test
.venv/bin/python bench/gpu.py

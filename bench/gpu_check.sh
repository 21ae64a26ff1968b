#!/usr/bin/env bash
# The prepared GPU check (bench/gpu_check.py, issue 37 item 5), in one call on a lent device with what it has.
#
#   bash bench/gpu_check.sh --wheelhouse   # here: .cache/gpu-wheelhouse, what a device may lack (<= 64 MiB)
#   bash bench/gpu_check.sh [ARGS...]      # on the device: its own Python and torch, the wheelhouse first on the
#                                          # path; ARGS go to gpu_check.py (default --device cuda); $OUT/gpu_check.json
#
# The device reaches no network and its torch and transformers may be older than this project's: the run tool
# carries the wheelhouse (`carry: [".cache/gpu-wheelhouse"]`), which is unpacked into a folder put before the
# device's site-packages, so its torch stays and transformers, accelerate and the rest are the versions pinned here.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELHOUSE=.cache/gpu-wheelhouse
if [ "${1:-}" = --wheelhouse ]; then
    rm -rf "$WHEELHOUSE"
    mkdir -p "$WHEELHOUSE"
    py=${PYTHON:-.venv/bin/python}
    # what eagle-convert and the reference import beyond torch and numpy, at this project's pins (constraints.txt)
    pinned() { "$py" -m pip freeze | grep -i -E "^($(echo "$1" | sed 's/-/[-_]/g'))==" ; }
    pure="transformers|accelerate|compressed-tensors|huggingface-hub|typer|rich|jsonschema|jsonschema-specifications"
    pure+="|referencing|attrs|markdown-it-py|mdurl|pygments|shellingham|annotated-doc|typing-extensions|filelock"
    pure+="|fsspec|packaging|pyyaml|tqdm|regex|safetensors|tokenizers|jinja2|markupsafe|pydantic|pydantic-core"
    pure+="|annotated-types|typing-inspection|rpds-py|hf-xet|psutil|loguru|frozendict"
    pure+="|anyio|click|h11|httpcore2|httpx2|idna|truststore|certifi|sniffio"  # huggingface_hub's HTTP client
    pinned "$pure" > "$WHEELHOUSE/requirements.txt"
    get() { "$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: "$@" \
        -d "$WHEELHOUSE" 2>/dev/null; }
    get -r "$WHEELHOUSE/requirements.txt"  # this Python's wheels (pure Python for most)
    compiled="rpds-py|pydantic-core|regex|pyyaml|markupsafe|psutil|hf-xet|safetensors|tokenizers"
    for version in 3.10 3.12 3.13; do  # the compiled ones for the other Pythons a device may have
        pinned "$compiled" | while read -r requirement; do
            get --python-version "$version" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
                "$requirement" || echo "no wheel of $requirement for Python $version"
        done
    done
    size=$(du -sm "$WHEELHOUSE" | cut -f1)
    echo "== $WHEELHOUSE: $(ls "$WHEELHOUSE"/*.whl | wc -l) wheels, ${size} MiB"
    [ "$size" -le 64 ] || { echo "the wheelhouse is over the 64 MiB the run tool carries" >&2; exit 1; }
    exit 0
fi
py=${PYTHON:-$(command -v python3 || command -v python)}
site=$(mktemp -d)/site
if [ -d "$WHEELHOUSE" ]; then
    # the wheels this Python can use, unpacked one by one (no network; one without a wheel for this Python keeps
    # the device's own); torch and numpy stay the device's
    while read -r requirement; do
        "$py" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --find-links "$WHEELHOUSE" \
            --target "$site" "$requirement" >/dev/null 2>&1 || echo "kept the device's own: $requirement"
    done < "$WHEELHOUSE/requirements.txt"
fi
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c "import torch, transformers, eagle_convert; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'cuda', torch.cuda.is_available())"
if [ $# -eq 0 ]; then
    set -- --device cuda
fi
exec "$py" bench/gpu_check.py "$@"

#!/usr/bin/env bash
# The steps of the GitHub Action (action.yml): install eagle-convert, run `verify` once on the given paths, writing
# SARIF for code scanning, the GitHub annotations and the step summary; exit with the gate's exit code.
#
# Inputs come as INPUT_* variables (action.yml maps them); tests/cli/test_ci_integrations.py runs this script with a
# fake GITHUB_STEP_SUMMARY and GITHUB_OUTPUT. Outputs (to $GITHUB_OUTPUT): exit-code, sarif-file.
set -euo pipefail

action_path=${GITHUB_ACTION_PATH:-$(cd "$(dirname "$0")/.." && pwd)}
paths=${INPUT_PATHS:?"the action needs paths: the draft checkpoint directories (or files) to verify"}
level=${INPUT_LEVEL:-static}
sarif=${INPUT_SARIF_FILE:-eagle-convert.sarif}

# --- install -------------------------------------------------------------------------------------------------------
# Into a virtualenv of its own (runner images refuse pip installs into the system Python, PEP 668). The tensor and
# forward levels need the reference extra (torch), taken from INPUT_TORCH_INDEX_URL (default: the CPU build).
if [ "${INPUT_INSTALL:-true}" = true ]; then
    venv=${RUNNER_TEMP:-${TMPDIR:-/tmp}}/eagle-convert-venv
    "${INPUT_PYTHON:-python3}" -m venv "$venv"
    pip=("$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off)
    extra=""
    if [ "$level" != static ]; then
        extra="[reference]"
        if [ -n "${INPUT_TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}" ]; then
            "${pip[@]}" torch --index-url "${INPUT_TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
        fi
    fi
    # INPUT_VERSION: a pip requirement (eagle-convert==0.2.0, a git URL, a wheel); default: this action's revision
    requirement=${INPUT_VERSION:-$action_path}
    if [ -d "$requirement" ] || [[ "$requirement" == *.whl ]]; then
        "${pip[@]}" "$requirement$extra"
    elif [ -n "$extra" ]; then
        "${pip[@]}" "$requirement" "eagle-convert$extra"
    else
        "${pip[@]}" "$requirement"
    fi
    export PATH="$venv/bin:$PATH"
fi
eagle-convert --version

# --- verify --------------------------------------------------------------------------------------------------------
# Paths: whitespace- or newline-separated; a glob (drafts/*) is expanded here, a pattern that matches nothing is
# passed as written (verify then says that the path does not exist).
args=()
for word in $paths; do
    args+=("$word")
done
args+=(--level "$level" --format sarif --output "$sarif")
[ -n "${INPUT_ENGINES:-}" ] && args+=(--engine "$INPUT_ENGINES")
[ -n "${INPUT_TARGET:-}" ] && args+=(--target "$INPUT_TARGET")
if [ -n "${INPUT_EXTRA_ARGS:-}" ]; then
    read -r -a more <<<"$INPUT_EXTRA_ARGS"
    args+=("${more[@]}")
fi

# Under Actions (GITHUB_ACTIONS=true) verify prints the annotations on stdout and appends the Markdown summary to
# $GITHUB_STEP_SUMMARY itself; the exit code is the gate's (0 pass, 1 findings, 2 error, 3 nothing to check).
code=0
eagle-convert verify "${args[@]}" || code=$?
if [ -n "${GITHUB_OUTPUT:-}" ]; then
    echo "exit-code=$code" >>"$GITHUB_OUTPUT"
    if [ -f "$sarif" ]; then
        echo "sarif-file=$sarif" >>"$GITHUB_OUTPUT"
    fi
fi
exit "$code"

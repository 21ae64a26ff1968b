"""Where and in what precision the reference models run: ``--device auto|cpu|cuda[:N]`` and ``--dtype``.

The choices and their checks need no torch, so the command line checks them while it parses (``inspect`` and a
``normalize --dry-run`` never import torch); torch is imported when a ``Compute`` is made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from eagle_convert.errors import UsageError, check_choice

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda", "cuda:N")  # cuda:N: the CUDA device with index N
DTYPES = ("float32", "bfloat16", "float16")  # torch dtypes, by name
_DEVICE = re.compile(r"auto|cpu|cuda(?::\d+)?")


def check_device(device: str) -> str:
    """``device`` as :func:`resolve` reads it (trimmed, lower case), or a UsageError naming the choices."""
    name = device.strip().lower()
    if not _DEVICE.fullmatch(name):
        raise UsageError(
            f"unknown device {device!r}; choose {', '.join(DEVICES[:-1])} or {DEVICES[-1]}",
            hint="cuda:N picks the CUDA device with index N (cuda is cuda:0; auto the GPU when torch sees one)",
        )
    return name


def check_dtype(dtype: str) -> str:
    """``dtype`` when it is one of :data:`DTYPES`, else a UsageError naming them."""
    return check_choice("dtype", dtype, DTYPES)


@dataclass(frozen=True)
class Compute:
    device: torch.device
    dtype: torch.dtype

    @property
    def dtype_name(self) -> str:
        import torch

        return next(name for name in DTYPES if getattr(torch, name) == self.dtype)

    def describe(self) -> str:
        """``cpu``, or ``cuda:0 (NVIDIA H100 80GB HBM3)``."""
        import torch

        if self.device.type == "cuda":
            return f"{self.device} ({torch.cuda.get_device_name(self.device)})"
        return str(self.device)


@cache
def _cpu_float32() -> Compute:
    import torch

    return Compute(torch.device("cpu"), torch.float32)


if TYPE_CHECKING:
    CPU_FLOAT32: Compute


def __getattr__(name: str) -> Compute:
    """``CPU_FLOAT32``, the default, made on first use: importing this module does not import torch."""
    if name == "CPU_FLOAT32":
        return _cpu_float32()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve(device: str = "auto", dtype: str = "float32") -> Compute:
    """``auto`` is the first CUDA device when torch sees one, else the CPU. Asking for CUDA without one is an error,
    never a silent fall-back: a CI job that wants the GPU should fail loudly when it has none."""
    torch_dtype_name = check_dtype(dtype)
    name = check_device(device)
    import torch

    torch_dtype = getattr(torch, torch_dtype_name)
    if name == "auto":
        return Compute(torch.device("cuda:0" if torch.cuda.is_available() else "cpu"), torch_dtype)
    if name == "cpu":
        return Compute(torch.device("cpu"), torch_dtype)
    if not torch.cuda.is_available():
        raise UsageError(
            f"--device {device}: torch sees no CUDA device here",
            hint="use --device cpu (or auto, which picks the GPU when there is one); check the torch build and drivers",
        )
    number = int(name.partition(":")[2] or 0)
    if number >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return Compute(torch.device(f"cuda:{number}"), torch_dtype)

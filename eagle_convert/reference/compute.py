"""Where and in what precision the reference models run: ``--device auto|cpu|cuda[:N]`` and ``--dtype``.

The choices and their checks need no torch, so the command line checks them while it parses (``inspect`` and a
``normalize --dry-run`` never import torch); torch is imported when a ``Compute`` is made. ``--dtype auto`` is
decided against the memory at hand by reference/budget.py, before anything is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from eagle_convert.errors import UsageError, check_choice
from eagle_convert.options import option

if TYPE_CHECKING:
    import torch

    from eagle_convert.reference.budget import ReferenceRun

DEVICE_AUTO = "auto"  # --device auto: the first CUDA device when torch sees one, else the CPU
DEVICES = (DEVICE_AUTO, "cpu", "cuda", "cuda:N")  # cuda:N: the CUDA device with index N
DTYPES = ("float32", "bfloat16", "float16")  # torch dtypes, by name
# --dtype auto for the reference models: float32 where it fits the memory at hand and is cheap, else the model's own
# dtype (reference/budget.py). Not the engine's auto (real_engine/base.py ENGINE_DTYPE_AUTO), which the same word
# asks of --level engine.
REFERENCE_DTYPE_AUTO = "auto"
DTYPE_CHOICES = (REFERENCE_DTYPE_AUTO, *DTYPES)
# The one default of --device and --dtype of the reference models: every command and entry point takes these.
DEFAULT_DEVICE = DEVICE_AUTO
DEFAULT_DTYPE = REFERENCE_DTYPE_AUTO
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


def check_dtype_choice(dtype: str) -> str:
    """``dtype`` when it is ``auto`` or one of :data:`DTYPES`, else a UsageError naming them (``--dtype``)."""
    return check_choice("dtype", dtype, DTYPE_CHOICES)


REFERENCE_DTYPE_AUTO_HELP = (
    f"{REFERENCE_DTYPE_AUTO} (the reference's auto): float32 where it fits the memory at hand and costs little, else "
    "the model's own dtype; a run that cannot fit stops before loading, saying what would "
    "($EAGLE_CONVERT_MEMORY_LIMIT overrides the memory measured)."
)


@dataclass(frozen=True)
class ComputeRequest:
    """Where and in what precision the reference models run (``--device``, ``--dtype``): an option group of verify
    and normalize, checked by the functions above while the command line parses."""

    device: str = option(
        DEFAULT_DEVICE,
        choices=DEVICES,
        check=check_device,
        help="where the reference models run (auto: the GPU when torch sees one).",
    )
    dtype: str = option(
        DEFAULT_DTYPE,
        choices=DTYPE_CHOICES,
        check=check_dtype_choice,
        help=f"compute precision. {REFERENCE_DTYPE_AUTO_HELP}",
    )


@dataclass(frozen=True)
class Compute:
    """A device and a dtype, and why that dtype (``--dtype auto``'s decision; empty when none was made)."""

    device: torch.device
    dtype: torch.dtype
    reason: str = field(default="", compare=False, repr=False)
    experts_per_group: int | None = field(default=None, compare=False, repr=False)  # the plan's (budget.py)

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


def resolve(device: str = DEFAULT_DEVICE, dtype: str = DEFAULT_DTYPE, run: ReferenceRun | None = None) -> Compute:
    """``auto`` is the first CUDA device when torch sees one, else the CPU. Asking for CUDA without one is an error,
    never a silent fall-back: a CI job that wants the GPU should fail loudly when it has none.

    With ``run`` (what the reference run will hold), the dtype is checked against the memory of the chosen device
    first (reference/budget.py): ``auto`` picks one that fits, and a run that cannot fit is a UsageError before
    anything is loaded. ``auto`` without a ``run`` has nothing to size and is float32."""
    check_dtype_choice(dtype)
    place = _device(check_device(device), device)
    if run is None:
        name = "float32" if dtype == REFERENCE_DTYPE_AUTO else dtype
        reason = "float32: not sized (no run described)" if dtype == REFERENCE_DTYPE_AUTO else ""
        return Compute(place, _torch_dtype(name), reason)
    from eagle_convert.reference import budget

    available = budget.available_memory(place.type, place.index or 0)
    choice = budget.choose_dtype(run, dtype, available, available.plan(place.type))
    return Compute(place, _torch_dtype(choice.dtype), choice.reason, choice.estimate.group or None)


def _torch_dtype(name: str) -> torch.dtype:
    import torch

    dtype: torch.dtype = getattr(torch, check_dtype(name))
    return dtype


def _device(name: str, device: str) -> torch.device:
    """The torch device ``name`` (checked by :func:`check_device`) stands for here."""
    import torch

    if name == DEVICE_AUTO:
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UsageError(
            f"--device {device}: torch sees no CUDA device here",
            hint="use --device cpu (or auto, which picks the GPU when there is one); check the torch build and drivers",
        )
    number = int(name.partition(":")[2] or 0)
    if number >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return torch.device(f"cuda:{number}")


def matmul_rate(compute: Compute, size: int = 2048, rows: int = 512) -> float:
    """FLOP/s of a layer-shaped matmul (``[rows, size] @ [size, size]``) on ``compute``'s device and dtype, measured
    now (one warm-up, then the best of three): the rate a time estimate divides by."""
    import time

    import torch

    a = torch.randn(rows, size, device=compute.device).to(compute.dtype)
    b = torch.randn(size, size, device=compute.device).to(compute.dtype)
    best = float("inf")
    for attempt in range(4):
        start = time.perf_counter()
        torch.matmul(a, b)
        if compute.device.type == "cuda":
            torch.cuda.synchronize(compute.device)
        if attempt:  # the first one warms up
            best = min(best, time.perf_counter() - start)
    return 2.0 * rows * size * size / max(best, 1e-9)

"""Where and in what precision the reference models run: ``--device auto|cpu|cuda[:N]`` and ``--dtype``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eagle_convert.errors import UsageError

DEVICES = ("auto", "cpu", "cuda")
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Compute:
    device: torch.device
    dtype: torch.dtype

    @property
    def dtype_name(self) -> str:
        return next(name for name, d in DTYPES.items() if d == self.dtype)

    def describe(self) -> str:
        """``cpu``, or ``cuda:0 (NVIDIA H100 80GB HBM3)``."""
        if self.device.type == "cuda":
            return f"{self.device} ({torch.cuda.get_device_name(self.device)})"
        return str(self.device)


CPU_FLOAT32 = Compute(torch.device("cpu"), torch.float32)


def resolve(device: str = "auto", dtype: str = "float32") -> Compute:
    """``auto`` is the first CUDA device when torch sees one, else the CPU. Asking for CUDA without one is an error,
    never a silent fall-back: a CI job that wants the GPU should fail loudly when it has none."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    name = device.strip().lower()
    if name == "auto":
        return Compute(torch.device("cuda:0" if torch.cuda.is_available() else "cpu"), DTYPES[dtype])
    if name == "cpu":
        return Compute(torch.device("cpu"), DTYPES[dtype])
    kind, _, index = name.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise UsageError(f"unknown device {device!r}; choose auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise UsageError(
            f"--device {device}: torch sees no CUDA device here",
            hint="use --device cpu (or auto, which picks the GPU when there is one); check the torch build and drivers",
        )
    number = int(index or 0)
    if number >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return Compute(torch.device(f"cuda:{number}"), DTYPES[dtype])

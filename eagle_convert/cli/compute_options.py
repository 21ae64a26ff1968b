"""Choices shared by the commands that run the reference models (``verify``, ``normalize --aux-convention auto``)."""

from __future__ import annotations

from enum import StrEnum


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Dtype(StrEnum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"

"""Prometheus text exposition (what vLLM serves at ``/metrics``), read into samples.

samples = parse_metrics(text)
drafts = total(samples, "vllm:spec_decode_num_drafts_total")
"""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Samples = list[tuple[str, dict[str, str], float]]


def parse_metrics(text: str) -> Samples:
    """(name, labels, value) of every sample of a Prometheus text exposition."""
    out: Samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        name, labels, value = match.groups()
        try:
            out.append((name, dict(_LABEL.findall(labels or "")), float(value)))
        except ValueError:
            continue
    return out


def total(samples: Samples, name: str) -> float:
    """The sum over every label set (engines, finish reasons) of one metric."""
    return sum(v for n, _, v in samples if n == name)

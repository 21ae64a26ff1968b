"""A checkpoint that is a model, not an EAGLE3 draft (EC021): most often the target passed where the draft belongs.

Every EAGLE3 (and EAGLE-1) draft has an ``fc`` outside its decoder layers, which fuses the target's hidden states
into the draft layer, and few decoder layers; a causal LM has many decoder layers and no ``fc``. So a checkpoint
whose weights hold two or more decoder layers and no ``fc``, under a config with no key or architecture only a
draft writes, is a model: read as a draft it would only yield a pile of findings about a draft that is not there,
and normalize would rename its tensors into a bogus one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from eagle_convert.draft.layouts import TensorName
from eagle_convert.read.config import DraftConfig, TargetConfig, draft_marker
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding

NOT_A_DRAFT = "EC021"

# "layers.N." (or GPT-2's "h.N.", "blocks.N.") anywhere in a name: a decoder layer however the model nests it
# (model.layers.N, model.language_model.layers.N, backbone.layers.N, transformer.h.N)
_DECODER_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
MIN_MODEL_LAYERS = 2  # decoder layers that, with no fc, make a checkpoint a model


def model_evidence(cfg: DraftConfig, names: Iterable[TensorName]) -> str | None:
    """Why the checkpoint is a model and not a draft (its architecture, its decoder layers, no fc), or None."""
    layers: set[int] = set()
    for n in names:
        if n.layer is None and n.local == "fc.weight":
            return None
        hit = _DECODER_LAYER.search(n.name)
        if hit is not None:
            layers.add(int(hit.group(1)))
    if len(layers) < MIN_MODEL_LAYERS or draft_marker(cfg.raw) is not None:
        return None
    what = cfg.architectures[0] if cfg.architectures else "its weights"
    return f"{what} with {len(layers)} decoder layers and no fc (an EAGLE3 draft has one fc and a few layers)"


def not_a_draft(
    cfg: DraftConfig, names: Iterable[TensorName], config_path: Path | None, target: TargetConfig | None
) -> Finding | None:
    """The one finding (EC021) of a checkpoint that is a model, naming it the --target too when it is; or None."""
    evidence = model_evidence(cfg, names)
    if evidence is None:
        return None
    same = target is not None and config_path is not None and _same_file(Path(target.source), config_path)
    also = "; the same model is passed as --target" if same else ""
    return finding(NOT_A_DRAFT, f"a model, not an EAGLE3 draft: {evidence}{also}")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False

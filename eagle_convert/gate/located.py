"""Where a finding lives: the file and JSON pointer of its subject (a tensor, a config key, a deployment setting).

inspect and verify locate every finding here, the gate's and the draft's alike, so the same finding names the same
place in both reports.
"""

from __future__ import annotations

from typing import Any

from eagle_convert.draft.detect import DraftSpec
from eagle_convert.gate.deployment import DEPLOYMENT_SUBJECTS
from eagle_convert.read.checkpoint import Checkpoint
from eagle_convert.read.config import IDS_KEY
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import finding

CONFIG = "config.json"


def config_pointer(key: str) -> str:
    """The JSON pointer of a dotted config key: ``eagle_config.norm_before_fc`` -> ``/eagle_config/norm_before_fc``."""
    return "/" + key.replace(".", "/")


def cfg_finding(
    rule_id: str,
    message: str,
    key: str | None,
    *,
    expected: Any = None,
    actual: Any = None,
    severity: str | None = None,
) -> Finding:
    pointer = config_pointer(key) if key else None
    return finding(rule_id, message, severity=severity, file=CONFIG, pointer=pointer, expected=expected, actual=actual)


def located(spec: DraftSpec, ckpt: Checkpoint, f: Finding) -> Finding:
    """``f`` with the file and JSON pointer its subject lives at (a tensor: its shard and name; a config key:
    config.json and the key's pointer, eagle_config's ids where the draft keeps them; a setting of the deployment, such
    as TensorRT-LLM's eagle3_layers_to_capture: no file of the draft), as inspect and verify report it."""
    subject = f.subject
    if subject in DEPLOYMENT_SUBJECTS:
        return f.at(None, None)
    if subject and subject in ckpt.tensors:
        return f.at(ckpt.tensors[subject].shard, subject)
    if subject == IDS_KEY and spec.aux.location == "eagle_config":
        return f.at(CONFIG, config_pointer(f"eagle_config.{IDS_KEY}"))
    if subject and not subject.startswith(("fc", "midlayer", "self_attn")):
        return f.at(CONFIG, config_pointer(subject))
    return f.at(f.file, subject)

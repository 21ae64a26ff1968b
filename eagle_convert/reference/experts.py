"""A layer's routed experts run group by group, each group read from the target's files only when a token is routed
to it (issue 37).

transformers builds a mixture-of-experts block as a router (or gate) and one *experts* module holding every expert's
weights fused ``[E, ...]``; the block calls ``experts(hidden_states, top_k_index, top_k_weights)`` (the modules
decorated with ``use_experts_implementation``: DeepSeek-V2/V3/V3.2, Kimi K2, Qwen2/Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE,
Qwen3-VL-MoE, Mixtral, MiniMax, GLM-4-MoE, GLM-5, gpt-oss, Gemma 4, Granite-MoE, Kimi-Linear, ...) or, for Llama 4,
``experts(routed_in)`` with every expert's rows stacked ``[E * T, H]`` (a row is zero where its token is not routed
to that expert). Streamed as a whole, the layer holds every expert dequantized (~22.5 GB for a DeepSeek-V3 layer in
bfloat16).

Here the experts module stays transformers' own (its parameters, its class's forward, its config's experts
implementation); only the module's ``forward`` is replaced, on the instance, by a :class:`StreamedExperts` with the
same call. The router has run by then, as transformers' own block runs it. The routed experts (those in
``top_k_index``) are taken in ascending order, ``group`` at a time; for each group:

1. its tensors are read (:meth:`StreamedExperts.read`): per-expert tensors by name (``...experts.17.gate_proj.weight``
   and its scales), fused ``[E, ...]`` tensors by rows (``SafetensorsWeights.read_rows``), on a background thread
   while the previous group computes (the next group's read overlaps this group's compute);
2. they go through transformers' own loading step into the module, its parameters sized to the group (``[G, ...]``):
   the same renaming, fusion and dequantization as a whole layer's load;
3. the module's own forward runs on the tokens routed to the group, each (token, slot) pair as a row with that slot's
   expert (numbered within the group) and weight, and the rows are added to the output per token;
4. the group's parameters are dropped.

An expert no token is routed to is never read. A Llama 4 experts module runs the routed experts' row blocks the same
way; an unrouted expert's block is all zero, and so is its output (no bias), which is what the whole module computes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from eagle_convert.reference.stream import touch
from eagle_convert.reference.weights import SafetensorsWeights

_INDEX = re.compile(r"\.experts\.(\d+)\.")
GROUP_BYTES = 2**30  # a group's experts in the compute dtype, when no plan sized it (reference/budget.py does)

Install = Callable[[dict[str, torch.Tensor], list[str], int], None]
"""``(state, params, rows)``: the checkpoint tensors ``state`` loaded into ``params`` sized to ``rows`` experts."""
Release = Callable[[list[str]], None]
"""``(params)``: the parameters dropped (back to placeholders of their full shape)."""


@dataclass(frozen=True)
class ExpertKeys:
    """The checkpoint tensors of one experts module: each expert's own (by name), and the fused ``[E, ...]`` ones
    (read by rows)."""

    per_expert: dict[int, list[str]]
    fused: list[str] = field(default_factory=list)

    def for_group(self, group: Sequence[int]) -> list[str]:
        return [key for e in group for key in self.per_expert.get(e, [])]


def streamable(layers: Sequence[torch.nn.Module]) -> Iterator[tuple[torch.nn.Module, str]]:
    """The experts modules of the decoder layers this streams: (module, its name inside its layer)."""
    for layer in layers:
        for name, module in layer.named_modules():
            if _routed(module) or _stacked(module):
                yield module, name


def count(module: torch.nn.Module) -> int:
    """An experts module's number of experts (its ``num_experts``)."""
    return int(getattr(module, "num_experts"))  # noqa: B009


def _experts_shaped(module: torch.nn.Module) -> bool:
    experts = getattr(module, "num_experts", None)
    params = list(module.named_parameters(recurse=False))
    return (
        isinstance(experts, int)
        and experts > 0
        and bool(params)
        and not any(True for c in module.children() for _ in c.parameters())  # an activation module, at most
        and all(p.dim() >= 2 and p.shape[0] == experts for _, p in params)
    )


def _routed(module: torch.nn.Module) -> bool:
    """An experts module called with the routing (``use_experts_implementation``): ``(hidden, index, weights)``."""
    return hasattr(module, "_is_expert_parallel") and not module._is_expert_parallel and _experts_shaped(module)


def _stacked(module: torch.nn.Module) -> bool:
    """Llama 4's experts: called with every expert's rows stacked (``forward(self, hidden_states)``), no bias."""
    try:
        names = list(inspect.signature(type(module).forward).parameters)
    except (TypeError, ValueError):
        return False
    return (
        names == ["self", "hidden_states"]
        and _experts_shaped(module)
        and all(p.dim() == 3 for p in module.parameters())  # [E, in, out] matrices (a router is [E, H])
        and not any("bias" in n for n, _ in module.named_parameters())
    )


def split_keys(keys: Sequence[str], weights: SafetensorsWeights, experts: int) -> ExpertKeys | None:
    """``keys`` (the checkpoint tensors an experts module of ``experts`` experts loads from) as per-expert and fused
    ones; None when one is neither (an expert index out of range, or a tensor not ``[E, ...]``): that module is then
    read whole with its layer, as before."""
    per_expert: dict[int, list[str]] = {}
    fused: list[str] = []
    for key in keys:
        match = _INDEX.search(key)
        if match is not None:
            index = int(match.group(1))
            if index >= experts:
                return None
            per_expert.setdefault(index, []).append(key)
            continue
        shape = weights.shape(key)
        if not shape or shape[0] != experts:
            return None
        fused.append(key)
    return ExpertKeys(per_expert, fused)


def group_for(keys: ExpertKeys, weights: SafetensorsWeights, experts: int, itemsize: int, room: int) -> int:
    """How many experts of this module fit ``room`` bytes in the compute dtype (at least one)."""
    values = sum(weights.values(k) for ks in keys.per_expert.values() for k in ks) / max(len(keys.per_expert), 1)
    values += sum(weights.values(k) for k in keys.fused) / experts
    return max(1, min(experts, int(room // max(values * itemsize, 1))))


class StreamedExperts:
    """The forward of one transformers experts module, its experts read ``group`` at a time (module docstring)."""

    def __init__(
        self,
        module: torch.nn.Module,
        name: str,
        keys: ExpertKeys,
        group: int,
        weights: SafetensorsWeights,
        device: torch.device,
        install: Install,
        release: Release,
    ) -> None:
        self.module = module
        self.name = name
        self.keys = keys
        self.group = max(1, int(group))
        self.weights = weights
        self.device = device
        self._install = install
        self._release = release
        self.num_experts = count(module)
        self.params = [f"{name}.{p}" for p, _ in module.named_parameters(recurse=False)]
        self.stacked = _stacked(module)
        self.experts_read = 0  # experts read so far (each time a group holds one)
        self._forward = type(module).forward  # transformers' own (for a routed module: its implementation's)
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="eagle-convert-experts")
        setattr(module, "forward", self)  # noqa: B010  # the instance's forward; the class's stays

    def close(self) -> None:
        delattr(self.module, "forward")  # the class's forward again
        self._reader.shutdown(wait=True)

    def read(self, group: list[int]) -> dict[str, torch.Tensor]:
        """The checkpoint tensors of ``group`` (ascending expert indices), as stored, their pages read now (on the
        reading thread); on a CUDA device, copied there."""
        state = {key: self.weights.read(key) for key in self.keys.for_group(group)}
        for tensor in state.values():
            touch(tensor)
        state |= {key: self.weights.read_rows(key, group) for key in self.keys.fused}
        if self.device.type != "cpu":
            state = {key: t.to(self.device, non_blocking=False) for key, t in state.items()}
        self.experts_read += len(group)
        return state

    def whole(self, param: str) -> torch.Tensor:
        """One of the module's parameters with every expert, read now (asked for by name, not by a forward)."""
        state = self.read(list(range(self.num_experts)))
        self._install(state, self.params, self.num_experts)
        value = self.module.get_parameter(param.removeprefix(self.name + ".")).detach()
        self._release(self.params)
        return value

    def groups(self, routed: list[int]) -> list[list[int]]:
        return [routed[i : i + self.group] for i in range(0, len(routed), self.group)]

    def __call__(
        self,
        hidden_states: torch.Tensor,
        top_k_index: torch.Tensor | None = None,
        top_k_weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if top_k_index is None or top_k_weights is None:
            return self._stacked_forward(hidden_states)
        hidden = hidden_states.reshape(-1, hidden_states.shape[-1])  # [T, H]
        index = top_k_index.reshape(hidden.shape[0], -1)  # [T, K]
        weights = top_k_weights.reshape(hidden.shape[0], -1)  # [T, K]
        wide = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        out = torch.zeros(hidden.shape, dtype=wide, device=hidden.device)  # [T, H], summed over the groups
        valid = (index >= 0) & (index < self.num_experts)
        routed = torch.unique(index[valid]).tolist()
        local = torch.full((self.num_experts,), -1, dtype=torch.int64, device=index.device)  # expert -> its row

        def run(group: list[int]) -> None:
            local.fill_(-1)
            local[torch.tensor(group, device=index.device)] = torch.arange(len(group), device=index.device)
            slot = local[index.clamp(0, self.num_experts - 1)].masked_fill(~valid, -1)  # [T, K]: within the group
            token, k = (slot >= 0).nonzero(as_tuple=True)  # the (token, slot) pairs routed to the group
            rows = self._forward(self.module, hidden[token], slot[token, k][:, None], weights[token, k][:, None])
            out.index_add_(0, token, rows.to(wide))  # rows: [S, H], one per pair

        self._each(self.groups(routed), run)
        return out.to(hidden_states.dtype).reshape(hidden_states.shape)

    def _stacked_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Llama 4: ``hidden_states`` ``[E * T, H]``, expert e's rows ``[e * T, (e + 1) * T)``."""
        stacked = hidden_states.reshape(self.num_experts, -1, hidden_states.shape[-1])  # [E, T, H]
        out = torch.zeros_like(stacked)
        routed = stacked.flatten(1).ne(0).any(dim=1).nonzero().flatten().tolist()  # experts with a routed token

        def run(group: list[int]) -> None:
            ids = torch.tensor(group, device=stacked.device)
            rows = self._forward(self.module, stacked[ids].reshape(-1, stacked.shape[-1]))  # [G * T, H]
            out[ids] = rows.reshape(len(group), -1, stacked.shape[-1]).to(out.dtype)

        self._each(self.groups(routed), run)
        return out.reshape(hidden_states.shape)

    def _each(self, groups: list[list[int]], run: Callable[[list[int]], None]) -> None:
        """``run`` on each group in turn, the group installed; the next group read meanwhile."""
        pending: Future[dict[str, torch.Tensor]] | None = self._reader.submit(self.read, groups[0]) if groups else None
        saved = self.num_experts
        try:
            for n, group in enumerate(groups):
                state = pending.result() if pending is not None else {}
                pending = self._reader.submit(self.read, groups[n + 1]) if n + 1 < len(groups) else None
                self._install(state, self.params, len(group))
                del state
                setattr(self.module, "num_experts", len(group))  # noqa: B010  # its experts are the group's
                try:
                    run(group)
                finally:
                    setattr(self.module, "num_experts", saved)  # noqa: B010
                    self._release(self.params)
        finally:
            if pending is not None:
                pending.result()

"""What the KV-cached generators share (reference/llama_decode.py, reference/deepseek_decode.py): the request's
checks, the left-padded batch and its causal mask, the choice of each next token (greedy, or sampled with
``probe/target.Target.generate``'s draws) and the :class:`Generated` result.

The batch is left-padded so that every sequence's newest token sits in the same column: the prompts run in one
prefill, then one token per sequence per step. Buffers that grow with the text (the caches, the captured states)
are sized once for the whole text by the generators and written in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from eagle_convert.errors import InputError


@dataclass(frozen=True)
class Generated:
    """Each prompt and its continuation (through ``eos`` when it came), and what the target computed on the way:
    ``hidden[i][j]`` is boundary j of sequence i ``[T_i - 1, H]`` (every position but the last token's) and
    ``greedy[i]`` the target's argmax token after each of those positions (the next text token inside the prompt)."""

    sequences: list[list[int]]
    prompt_lengths: list[int]
    hidden: list[dict[int, torch.Tensor]]
    greedy: list[list[int]]


def check_request(
    layers: int, vocab: int, prompts: Sequence[Sequence[int]], new_tokens: int, wanted: Sequence[int]
) -> None:
    """An InputError for a request no generator can serve: boundaries outside 0..layers, no new token, an empty
    prompt, or a token id outside the vocabulary."""
    if bad := [j for j in wanted if not 0 <= j <= layers]:
        raise InputError(f"capture boundaries {bad} must lie in 0..{layers} (N = {layers} layers)")
    if new_tokens < 1:
        raise InputError(f"new_tokens is {new_tokens}; generation needs at least 1")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise InputError("generation needs at least one prompt, and every prompt at least one token")
    if any(not 0 <= t < vocab for p in prompts for t in p):
        raise InputError(f"prompt token ids must lie in 0..{vocab - 1} (the target's vocabulary)")


@dataclass
class Padded:
    """The left-padded batch: the slots the target runs (``total``: the prompts, then each new token but the last),
    which of them hold a token (``valid`` [B, L]), and the next step's token ids and positions."""

    pad: list[int]  # padding slots in front of each prompt
    total: int  # L
    ids: torch.Tensor  # [B, S] on the CPU: the tokens the next step runs (S = W for the prefill, then 1)
    positions: torch.Tensor  # [B, S] on the CPU: 0 at each prompt's first token
    valid: torch.Tensor  # [B, L] on the device: padding slots are never attended to
    slots: torch.Tensor  # [L] on the device
    past: int = 0  # slots filled so far

    @classmethod
    def of(cls, prompts: Sequence[Sequence[int]], new_tokens: int, device: str | torch.device) -> Padded:
        width = max(len(p) for p in prompts)
        pad = [width - len(p) for p in prompts]
        total = width + new_tokens - 1
        ids = torch.tensor([[0] * n + list(p) for n, p in zip(pad, prompts, strict=True)])  # [B, W]
        valid = torch.ones(len(prompts), total, dtype=torch.bool, device=device)
        for row, n in enumerate(pad):
            valid[row, :n] = False
        positions = (valid[:, :width].long().cumsum(-1) - 1).clamp(min=0).cpu()  # [B, W]
        return cls(pad, total, ids, positions, valid, torch.arange(total, device=device))

    def mask(self) -> tuple[int, torch.Tensor]:
        """(seen, mask): the slots filled once this step's tokens are in, and ``[B, S, seen]`` (True = may attend):
        causal over the valid slots, a padding slot seeing itself only."""
        seen = self.past + self.ids.shape[1]
        here, filled = self.slots[self.past : seen], self.slots[:seen]
        mask = ((filled[None, :] <= here[:, None]) & self.valid[:, None, :seen]) | (filled[None, :] == here[:, None])
        return seen, mask

    def advance(self, seen: int, chosen: torch.Tensor) -> None:
        """After a step: ``chosen`` [B] are the next tokens, one position after each sequence's last."""
        self.past = seen
        self.ids = chosen.view(-1, 1)  # [B, 1]
        self.positions = self.positions[:, -1:] + 1


class Choices:
    """Each step's next tokens: the argmax, or (``sample_seed``) one draw per sequence in batch order from the
    softmax of its float32 logits, from one generator seeded so (Target.generate's draws)."""

    def __init__(self, sample_seed: int | None) -> None:
        self.draws = torch.Generator().manual_seed(sample_seed) if sample_seed is not None else None
        self.tokens: list[torch.Tensor] = []  # [B] per step: the next token of each sequence
        self.argmax: list[torch.Tensor] = []  # [B] per step: the target's argmax (the tokens when greedy)

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        """The next token of each sequence from its float32 CPU logits ``[B, V]`` -> ``[B]``."""
        best = logits.argmax(-1)
        self.argmax.append(best)
        if self.draws is None:
            self.tokens.append(best)
        else:
            draws = self.draws
            self.tokens.append(torch.cat([torch.multinomial(row.softmax(-1), 1, generator=draws) for row in logits]))
        return self.tokens[-1]

    def ended(self, eos: int | None) -> bool:
        """Every sequence has generated ``eos``."""
        return eos is not None and all(eos in t for t in torch.stack(self.tokens, dim=-1).tolist())

    def result(
        self,
        prompts: Sequence[Sequence[int]],
        pad: list[int],
        kept: dict[int, torch.Tensor],
        eos: int | None,
    ) -> Generated:
        """Each sequence cut after its ``eos``, with its rows of the captured states ``kept`` (boundary ->
        ``[B, L, H]``)."""
        new = torch.stack(self.tokens, dim=-1).tolist()  # [B, steps run]
        best_after = torch.stack(self.argmax, dim=-1).tolist()
        sequences, hidden, greedy = [], [], []
        for row, (prompt, cont) in enumerate(zip(prompts, new, strict=True)):
            cont = cont[: cont.index(eos) + 1] if eos is not None and eos in cont else cont
            t = len(prompt) + len(cont)
            sequences.append(list(prompt) + cont)
            hidden.append({j: states[row, pad[row] : pad[row] + t - 1] for j, states in kept.items()})
            greedy.append(list(prompt[1:]) + best_after[row][: len(cont)])
        return Generated(sequences, [len(p) for p in prompts], hidden, greedy)

"""What the reference target's passes and its KV-cached generation (reference/hf_target.py) check and share: the
capture boundaries and token ids a request may hold, the choice of each next token (greedy, or sampled with
``probe/target.Target.generate``'s draws) and the :class:`Generated` result (the batch is left-padded, so that every
sequence's newest token sits in the same column).
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
    check_boundaries(layers, wanted)
    if new_tokens < 1:
        raise InputError(f"new_tokens is {new_tokens}; generation needs at least 1")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise InputError("generation needs at least one prompt, and every prompt at least one token")
    if any(not 0 <= t < vocab for p in prompts for t in p):
        raise InputError(f"prompt token ids must lie in 0..{vocab - 1} (the target's vocabulary)")


def check_boundaries(layers: int, wanted: Sequence[int]) -> None:
    """An InputError for capture boundaries outside 0..layers."""
    if bad := [j for j in wanted if not 0 <= j <= layers]:
        raise InputError(f"capture boundaries {bad} must lie in 0..{layers} (N = {layers} layers)")


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

"""The streamed reference target (eagle_convert.reference.hf_target) on a tiny random target of every family it runs
(fixtures/families.py): each boundary below N as transformers' own in-memory model computes it
(``output_hidden_states``), boundary N as its last decoder layer returns it, the logits alike; and its KV-cached
greedy generation continuing each prompt as a teacher-forced argmax of the in-memory model does, the states it
captures on the way (boundaries 0 and N) matching that model's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from eagle_convert.reference.hf_target import StreamedModel  # noqa: E402
from eagle_convert.reference.weights import SafetensorsWeights  # noqa: E402
from fixtures.families import FAMILIES, TEXT_TOKENS, family_model, write_family_target  # noqa: E402

TOLERANCE = 1e-5
LENGTHS = [9, 6]  # two sequences packed end to end (run as one right-padded batch)
PROMPTS = [[5, 17, 3, 25, 9], [99, 7]]  # different lengths: the batch is left-padded
NEW = 3


def _tokens() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    low, high = TEXT_TOKENS.start, TEXT_TOKENS.stop
    return [torch.randint(low, high, (n,), generator=generator) for n in LENGTHS]


def _relative(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours.double() - theirs.double()).norm() / theirs.double().norm().clamp_min(1e-30))


def _last_layer(model: Any, layers: int) -> torch.nn.Module:
    """The text trunk's last decoder layer, found without the reference's own search."""
    for decoder in (model.get_decoder(), getattr(model, "model", None)):
        stack = getattr(decoder, "layers", None)
        if isinstance(stack, torch.nn.ModuleList) and len(stack) == layers:
            return stack[-1]
    raise AssertionError(f"{type(model).__name__} has no text trunk of {layers} layers")


@torch.no_grad()
def _in_memory(model: Any, ids: torch.Tensor, layers: int) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """transformers' own pass over one sequence: hidden_states [N + 1] of [T, H], the last layer's output, logits."""
    last: list[torch.Tensor] = []

    def hook(_module: Any, _args: Any, out: Any) -> None:
        last.append((out[0] if isinstance(out, tuple | list) else out).detach())

    handle = _last_layer(model, layers).register_forward_hook(hook)
    try:
        out = model(input_ids=ids[None], output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    return [h[0] for h in out.hidden_states], last[0][0], out.logits[0]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_streamed_matches_transformers(name: str, tmp_path: Path) -> None:
    model = family_model(name)
    directory = write_family_target(name, tmp_path / name, model)
    layers = int(model.config.get_text_config().num_hidden_layers)
    raw = json.loads((directory / "config.json").read_text())
    streamed = StreamedModel(directory, raw, SafetensorsWeights(directory), resident=False)
    try:
        assert streamed.num_layers == layers
        sequences = _tokens()
        out = streamed.forward(torch.cat(sequences), capture=range(layers + 1), lengths=LENGTHS)
        for (hidden, last, logits), ours in zip(
            (_in_memory(model, ids, layers) for ids in sequences),
            _split(out.hidden, out.logits),
            strict=True,
        ):
            for j in range(layers):
                error = _relative(ours[j], hidden[j])
                assert error <= TOLERANCE, f"boundary {j}: relative error {error:.2e}"
            error = _relative(ours[layers], last)
            assert error <= TOLERANCE, f"boundary N = {layers}: relative error {error:.2e}"
            error = _relative(ours["logits"], logits)
            assert error <= TOLERANCE, f"logits: relative error {error:.2e}"

        generated = streamed.generate(PROMPTS, NEW, capture=[0, layers])
        for prompt, sequence, states in zip(PROMPTS, generated.sequences, generated.hidden, strict=True):
            assert sequence[: len(prompt)] == prompt and len(sequence) == len(prompt) + NEW
            hidden, last, logits = _in_memory(model, torch.tensor(sequence), layers)
            forced = logits.argmax(-1)[len(prompt) - 1 : -1].tolist()
            assert sequence[len(prompt) :] == forced, f"generated {sequence[len(prompt) :]}, teacher-forced {forced}"
            for j, theirs in ((0, hidden[0]), (layers, last)):  # every position but the last, KV-cached
                error = _relative(states[j], theirs[:-1])
                assert error <= TOLERANCE, f"generation, boundary {j}: relative error {error:.2e}"
    finally:
        streamed.close()


def _split(hidden: dict[int, torch.Tensor], logits: torch.Tensor) -> list[dict[Any, torch.Tensor]]:
    """The packed outputs of the streamed pass, one dict per sequence (boundary -> [T, H], "logits" -> [T, V])."""
    rows: list[dict[Any, torch.Tensor]] = [{"logits": part} for part in logits.split(LENGTHS)]
    for j, states in hidden.items():
        for row, part in zip(rows, states.split(LENGTHS), strict=True):
            row[j] = part
    return rows

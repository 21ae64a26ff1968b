"""The streamed reference on DeepSeek-V3 targets (MLA, YaRN, sigmoid-routed MoE whose per-expert checkpoint tensors
transformers fuses as they load): the same states as transformers' model in memory, and the head's input before the
final norm at boundary N."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from eagle_convert.probe.target import Target  # noqa: E402
from fixtures.deepseek_target import YARN, YARN_NO_MSCALE, save_random_target, tiny  # noqa: E402

TOL = 1e-5


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize(
    "overrides",
    [{}, {"rope_scaling": YARN}, {"rope_scaling": YARN_NO_MSCALE}, {"q_lora_rank": None, "rope_scaling": YARN}],
    ids=["plain", "yarn", "yarn-no-mscale", "no-q-lora"],
)
def test_parity_with_transformers(overrides: dict[str, Any], tmp_path: Path) -> None:
    model = save_random_target(tiny(**overrides), tmp_path)
    ids = torch.randint(0, 128, (20,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(ids[None], output_hidden_states=True)
    target = Target(tmp_path, resident=False)
    n = target.num_layers
    ours = target.run(ids, capture=range(n + 1))
    assert max(_rel(ours.hidden[j], ref.hidden_states[j][0]) for j in range(n)) <= TOL
    assert _rel(ours.logits, ref.logits[0]) <= TOL
    assert _rel(ours.final_hidden, model.model.norm(ours.hidden[n])) <= TOL  # boundary N is before the final norm
    assert _rel(ours.hidden[n], ours.final_hidden) > 1e-3


def test_per_expert_tensors_are_fused_as_each_layer_streams(tmp_path: Path) -> None:
    """The checkpoint holds one tensor per expert (what transformers writes back); the layer is read without them,
    and its experts module fuses a group's tensors at a time as the layer runs (reference/experts.py); no file is
    written beside the target."""
    save_random_target(tiny(), tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    target = Target(tmp_path, resident=False)
    assert any(".mlp.experts.0." in n for n in target.weights.names())
    layer = next(u for u in target.model.units if u.name.endswith("layers.1"))
    assert not any(".experts." in p for p in layer.params + layer.keys)
    stream = next(s for s in target.model.experts if s.name.startswith(layer.name + "."))
    assert any(p.endswith(".experts.gate_up_proj") for p in stream.params)
    assert sorted(stream.keys.per_expert) == list(range(stream.num_experts)) and not stream.keys.fused
    target.run(torch.arange(10), capture=[2])
    assert sorted(p.name for p in tmp_path.iterdir()) == before

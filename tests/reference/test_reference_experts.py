"""Routed experts streamed in groups (reference/experts.py, issue 37).

Every mixture-of-experts family the reference runs, forced to one expert a group, gives the states and logits of
transformers' own unstreamed model in float32 (relative error <= 1e-6); the expert tensors read are exactly those of
the experts transformers' own router picked, per-expert tensors by name and fused ``[E, ...]`` tensors by rows (the
bytes counted by a reader that records every read); and the budget plans a DeepSeek-V3 / Kimi-K2-sized target into
the 8 GB plan by groups, refusing only a part that is not an expert."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from eagle_convert.errors import UsageError  # noqa: E402
from eagle_convert.reference import budget  # noqa: E402
from eagle_convert.reference.hf_target import StreamedModel  # noqa: E402
from eagle_convert.reference.weights import SafetensorsWeights  # noqa: E402
from fixtures.families import family_model, write_family_target  # noqa: E402

TOLERANCE = 1e-6
LENGTHS = [9, 6]
MOE_FAMILIES = [
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "kimi_k25",
    "kimi_linear",
    "glm4_moe",
    "glm_moe_dsa",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_5_moe",
    "qwen3_vl_moe",
    "mixtral",
    "minimax_m2",
    "gpt_oss",
    "gemma4_moe",
    "granitemoe",
    "llama4_text",
]


def _relative(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours.double() - theirs.double()).norm() / theirs.double().norm().clamp_min(1e-30))


def _experts_modules(model: Any) -> list[str]:
    """transformers' experts modules of the text trunk (its class names end in Experts), found by name."""
    return [n for n, m in model.named_modules() if type(m).__name__.endswith("Experts") and "vision" not in n]


def _tokens() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, 112, (n,), generator=g) for n in LENGTHS]


@pytest.mark.parametrize("name", MOE_FAMILIES)
def test_one_expert_a_group_equals_transformers(name: str, tmp_path: Path) -> None:
    model = family_model(name)
    directory = write_family_target(name, tmp_path / name, model)
    raw = json.loads((directory / "config.json").read_text())
    layers = int(model.config.get_text_config().num_hidden_layers)
    streamed = StreamedModel(directory, raw, SafetensorsWeights(directory), experts_per_group=1)
    try:
        assert len(streamed.experts) == len(_experts_modules(model)) > 0  # every experts module streams
        assert all(stream.group == 1 for stream in streamed.experts)
        out = streamed.forward(torch.cat(_tokens()), capture=range(layers + 1), lengths=LENGTHS)
        assert sum(stream.experts_read for stream in streamed.experts) > 0
        start = 0
        for ids in _tokens():
            with torch.no_grad():
                theirs = model(input_ids=ids[None], output_hidden_states=True, use_cache=False)
            part = slice(start, start + ids.numel())
            for j in range(layers):  # boundary N is the last layer's output before the norm: not in hidden_states
                error = _relative(out.hidden[j][part], theirs.hidden_states[j][0])
                assert error <= TOLERANCE, f"boundary {j}: relative error {error:.2e}"
            error = _relative(out.logits[part], theirs.logits[0])
            assert error <= TOLERANCE, f"logits: relative error {error:.2e}"
            start += ids.numel()
    finally:
        streamed.close()


class CountingWeights(SafetensorsWeights):
    """A target's weights that record every read: (name, rows or None for the whole tensor, bytes)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.reads: list[tuple[str, tuple[int, ...] | None, int]] = []

    def read(self, name: str) -> torch.Tensor:
        tensor = super().read(name)
        self.reads.append((name, None, tensor.numel() * tensor.element_size()))
        return tensor

    def read_rows(self, name: str, rows: Sequence[int]) -> torch.Tensor:
        tensor = super().read_rows(name, rows)
        self.reads.append((name, tuple(rows), tensor.numel() * tensor.element_size()))
        return tensor


def _routed(model: Any, ids: torch.Tensor) -> dict[int, set[int]]:
    """layer -> the experts transformers' own router picks for ``ids`` (hooks on its experts modules)."""
    picked: dict[int, set[int]] = {}
    handles = []
    for name in _experts_modules(model):
        layer = int(re.search(r"layers\.(\d+)\.", name).group(1))  # type: ignore[union-attr]

        def hook(_m: Any, args: Any, layer: int = layer) -> None:
            picked.setdefault(layer, set()).update(args[1].flatten().tolist())

        handles.append(model.get_submodule(name).register_forward_pre_hook(hook))
    with torch.no_grad():
        model(input_ids=ids[None], use_cache=False)
    for h in handles:
        h.remove()
    return picked


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("deepseek_v3", {"n_routed_experts": 16, "num_experts_per_tok": 2}),  # per-expert tensors, by name
        ("gpt_oss", {"num_local_experts": 16, "num_experts_per_tok": 2}),  # fused [E, ...] tensors, by rows
    ],
)
def test_only_the_routed_experts_are_read(name: str, overrides: dict[str, int], tmp_path: Path) -> None:
    model = family_model(name, **overrides)
    directory = write_family_target(name, tmp_path / name, model)
    raw = json.loads((directory / "config.json").read_text())
    ids = torch.tensor([5, 17, 3])  # 3 tokens x 2 slots: at most 6 of 16 experts a layer
    routed = _routed(model, ids)
    weights = CountingWeights(directory)
    streamed = StreamedModel(directory, raw, weights, experts_per_group=2)
    try:
        streamed.forward(ids)
    finally:
        streamed.close()
    experts = 16
    read: dict[int, set[int]] = {}
    expert_bytes = 0
    for key, rows, nbytes in weights.reads:
        layer = re.search(r"layers\.(\d+)\.mlp\.experts\.(?:(\d+)\.)?", key)
        if layer is None:
            continue
        expert_bytes += nbytes
        if rows is None:  # a per-expert tensor, read whole: exactly its bytes
            assert layer.group(2) is not None, f"{key}: a fused experts tensor was read whole"
            assert nbytes == weights.nbytes(key)
            read.setdefault(int(layer.group(1)), set()).add(int(layer.group(2)))
        else:  # a fused tensor: only those rows
            shape = weights.shape(key)
            assert shape is not None and nbytes == weights.nbytes(key) * len(rows) // shape[0]
            read.setdefault(int(layer.group(1)), set()).update(rows)
    assert read == routed and all(len(r) < experts for r in routed.values())
    every = sum(weights.nbytes(k) for k in weights.names() if ".mlp.experts." in k)
    share = sum(len(r) for r in routed.values()) / (experts * len(routed))
    assert expert_bytes == pytest.approx(every * share)  # the routed experts' bytes, each read once a pass


# ---------------------------------------------------------------------------------------------------- the budget

KIMI = {  # Kimi K2's text config (a DeepSeek-V3 trunk), 8 of its 61 layers
    "model_type": "kimi_k2",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 8,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "vocab_size": 163840,
    "torch_dtype": "bfloat16",
}


def _kimi_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The tensor shapes of a DeepSeek-V3-trunk checkpoint (weights only; their FP8 scales are 1/16384 of it)."""
    h, heads, moe = config["hidden_size"], config["num_attention_heads"], config["moe_intermediate_size"]
    qk = config["qk_rope_head_dim"] + config["qk_nope_head_dim"]
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config["vocab_size"], h),
        "lm_head.weight": (config["vocab_size"], h),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_a_proj.weight": (config["q_lora_rank"], h),
            p + "self_attn.q_b_proj.weight": (heads * qk, config["q_lora_rank"]),
            p + "self_attn.kv_a_proj_with_mqa.weight": (config["kv_lora_rank"] + config["qk_rope_head_dim"], h),
            p + "self_attn.kv_b_proj.weight": (heads * (config["qk_nope_head_dim"] + 128), config["kv_lora_rank"]),
            p + "self_attn.o_proj.weight": (h, heads * config["v_head_dim"]),
        }
        if i < config["first_k_dense_replace"]:
            for proj, shape in (("gate", (config["intermediate_size"], h)), ("up", None), ("down", None)):
                shapes[f"{p}mlp.{proj}_proj.weight"] = shape or (
                    (config["intermediate_size"], h) if proj == "up" else (h, config["intermediate_size"])
                )
            continue
        shapes[p + "mlp.gate.weight"] = (config["n_routed_experts"], h)
        for e in ["shared_experts", *(f"experts.{x}" for x in range(config["n_routed_experts"]))]:
            shapes |= {
                f"{p}mlp.{e}.gate_proj.weight": (moe, h),
                f"{p}mlp.{e}.up_proj.weight": (moe, h),
                f"{p}mlp.{e}.down_proj.weight": (h, moe),
            }
    return shapes


def _kimi_run(config: dict[str, Any] = KIMI) -> budget.ReferenceRun:
    draft = {"fc.weight": (7168, 3 * 7168), "midlayer.mlp.down_proj.weight": (7168, 18432), "lm_head": (32000, 7168)}
    return budget.reference_run(draft, 32000, 3, config, _kimi_shapes(config), [list(range(16))])


def test_a_kimi_k2_sized_target_is_planned_by_groups() -> None:
    run = _kimi_run()
    assert run.target is not None and run.target.num_experts == 384
    assert run.target.expert_params == 3 * 7168 * 2048  # one expert, not a layer of them
    whole = run.estimate("bfloat16")  # every expert of a layer at once: the whole-layer path's figure
    assert whole.total > 70e9 and whole.group == 384
    two = 2 * 3 * 7168 * 2048 * 2  # two experts in bfloat16: the one running and the one read ahead
    plan = 12 * 10**9
    choice = budget.choose_dtype(run, "auto", budget.Available(24 * 10**9, "test"), plan)
    planned = choice.estimate
    assert choice.dtype == "bfloat16" and planned.total <= plan < planned.total + two  # the plan, filled
    assert planned.experts == planned.group * two and 1 < planned.group < 384
    assert f"2 groups of {planned.group} experts" in planned.describe()
    rest = planned.total - planned.experts
    default = budget.choose_dtype(run, "auto", budget.Available(24 * 10**9, "test")).estimate  # the 8 GB plan
    assert default.total == rest + default.group * two
    assert default.group == max(1, (budget.PLAN_BYTES - rest) // two)


def test_a_gpu_plans_its_groups_in_its_free_memory() -> None:
    run = _kimi_run()
    gpu = budget.Available(80 * 10**9, "free memory of cuda:0")
    cpu = budget.Available(24 * 10**9, "MemAvailable")
    assert gpu.plan("cuda") == 80 * 10**9 and cpu.plan("cpu") == budget.PLAN_BYTES
    assert budget.Available(4 * 10**9, "MemAvailable").plan("cpu") == 4 * 10**9  # less memory: less plan
    on_gpu = budget.choose_dtype(run, "bfloat16", gpu, gpu.plan("cuda")).estimate
    on_cpu = budget.choose_dtype(run, "bfloat16", cpu, cpu.plan("cpu")).estimate
    assert on_gpu.group > on_cpu.group and on_gpu.total <= 80 * 10**9


def test_one_expert_a_group_when_the_plan_is_spent_and_a_huge_embedding_is_refused() -> None:
    run = _kimi_run()
    tight = budget.choose_dtype(run, "bfloat16", budget.Available(24 * 10**9, "test"), 10**9).estimate
    assert tight.group == 1  # the rest already exceeds the plan: the smallest group, and the run goes on
    huge = _kimi_run({**KIMI, "vocab_size": 2_000_000})  # embedding and head: 2 x 28.7 GB in bfloat16
    with pytest.raises(UsageError) as caught:
        budget.choose_dtype(huge, "auto", budget.Available(24 * 10**9, "test"), budget.PLAN_BYTES)
    assert "embedding and lm_head 57.3 GB" in caught.value.message
    assert "2 groups of 1 expert " in caught.value.message


def test_fused_experts_count_as_experts_in_the_estimate() -> None:
    """gpt-oss stores each layer's experts fused [E, ...]: the estimate takes one expert's share of them."""
    config = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 2, "num_local_experts": 32,
              "num_attention_heads": 64, "vocab_size": 201088}  # fmt: skip
    shapes = {
        f"model.layers.{i}.mlp.experts.{n}": (32, *rest)
        for i in range(2)
        for n, rest in (("gate_up_proj_blocks", (5760, 90, 16)), ("down_proj_blocks", (2880, 90, 16)))
    } | {"model.layers.0.self_attn.q_proj.weight": (4096, 2880), "model.embed_tokens.weight": (201088, 2880)}
    size = budget.TargetSize.of(config, shapes)
    assert size.num_experts == 32
    assert size.expert_params == math.prod((5760, 90, 16)) + math.prod((2880, 90, 16))
    assert size.layer_params == 4096 * 2880

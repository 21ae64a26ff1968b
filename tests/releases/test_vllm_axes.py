"""vLLM 0.33.0's EAGLE3 support by platform and by pipeline parallelism (releases/vllm_axes.py). Expectations are
written from the 0.33.0 wheel's code (``VL/`` = ``vllm/`` inside it), not from the tool:

- ``VL/models/kimi_k3/__init__.py:21-36`` picks KimiLinearForCausalLM by platform: CUDA gets
  ``nvidia/model.py:1402`` (SupportsEagle3 at :1408), ROCm and XPU get ``amd/linear.py:1077``, whose bases
  (nn.Module, HasInnerState, SupportsPP, MixtureOfExperts, IsHybrid, SpecializedDecodeMixin) lack it;
  ``supports_eagle3`` is ``isinstance(model, SupportsEagle3)`` (``VL/model_executor/models/interfaces.py:1783-1786``).
- ``VL/models/deepseek_v4/__init__.py:26-39``: XPU and CPU get ``vl_stub.py``'s DeepseekV4ForConditionalGeneration.
- ``VL/platforms/rocm.py:72,76``: ROCm's unsupported / partly supported architecture lists are empty.
- ``VL/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:43-45, 57-62``: with PP, V2 raises ValueError unless the
  target's decoder sets ``supports_aux_hidden_states_over_pp`` (``interfaces.py:1611``: False; ``llama.py:358`` and
  ``qwen2.py:335``: True); ``VL/v1/worker/gpu_model_runner.py:5169-5188`` (V1) checks nothing.

Set ``VLLM_0_33_WHEEL`` to the wheel's path to check the cited lines themselves."""

from __future__ import annotations

import os
import re
import zipfile
from typing import Any

import pytest

from eagle_convert.releases import RELEASES, engine_view
from eagle_convert.releases import target_classes as read
from eagle_convert.releases.vllm_axes import BY_PLATFORM_0_33, PLATFORMS_0_33, REFUSES_0_33, RELAYS_0_33

DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "eagle_aux_hidden_state_layer_ids": [1, 4, 6],
}  # read by V1 and V2
V2, V1 = "vllm@0.33", "vllm@0.33-v1"


def view(release: str, arch: str | None, deployment: dict[str, Any] | None = None, model_type: str | None = None):  # type: ignore[no-untyped-def]
    return engine_view(
        release,
        DRAFT,
        target_model_type=model_type,
        target_num_layers=8,
        target_architecture=arch,
        deployment=deployment,
    )


# ---- the platform ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("release", [V2, V1])
def test_kimi_linear_captures_on_cuda_only(release: str) -> None:
    # the table (read from the CUDA branch) has it: nvidia/model.py:1408
    assert read.EAGLE3["vllm 0.33"]["KimiLinearForCausalLM"] == "models/kimi_k3/nvidia/model.py:1408"
    unknown = view(release, "KimiLinearForCausalLM")
    assert unknown.target_eagle3 is True and unknown.target_refusal is None
    assert "rocm or xpu" in unknown.caveats["platform"] and "kimi_k3/__init__.py:21-36" in unknown.caveats["platform"]
    for platform in ("rocm", "xpu", "ROCm"):
        on = view(release, "KimiLinearForCausalLM", {"platform": platform})
        assert on.target_eagle3 is False, platform
        assert on.target_refusal and "amd/linear.py:1077" in on.target_refusal
        assert on.hidden_state_indices is None and "platform" not in on.caveats
    cuda = view(release, "KimiLinearForCausalLM", {"platform": "cuda"})
    assert cuda.target_eagle3 is True and cuda.hidden_state_indices == [1, 4, 6] and "platform" not in cuda.caveats


def test_deepseek_v4_vision_is_a_stub_on_xpu_and_cpu() -> None:
    arch = "DeepseekV4ForConditionalGeneration"
    assert view(V2, arch, {"platform": "rocm"}).target_eagle3 is True  # common/vl_model.py:105-106
    for platform in ("xpu", "cpu"):
        on = view(V2, arch, {"platform": platform})
        assert on.target_eagle3 is False and on.target_refusal and "vl_stub.py:8-14" in on.target_refusal


@pytest.mark.parametrize(
    ("arch", "eagle3"),
    [
        ("DeepseekV4ForCausalLM", True),  # nvidia/amd/xpu/cpu model.py: each has SupportsEagle3
        ("MiniMaxM3SparseForCausalLM", True),  # minimax_m3/nvidia/model.py:1042, amd/model.py:1704
        ("DeepseekV41ForCausalLM", True),  # deepseek_v41/nvidia/vl_model.py:124, amd/vl_model.py:126
        ("HYV4ForCausalLM", False),  # hy_v4/nvidia/model.py:600, amd/model.py:636: neither
        ("BeamForCausalLM", True),  # beam/__init__.py imports nvidia/ on every platform
        ("Qwen4ExpForCausalLM", False),  # qwen4_exp/nvidia/model.py:686, amd/model.py:650: neither
        ("LlamaForCausalLM", True),  # no platform pick at all
    ],
)
def test_other_targets_do_not_depend_on_the_platform(arch: str, eagle3: bool) -> None:
    assert arch not in PLATFORMS_0_33
    for platform in (None, "cuda", "rocm", "xpu", "cpu"):
        on = view(V2, arch, {"platform": platform} if platform else None)
        assert on.target_eagle3 is eagle3 and "platform" not in on.caveats, (arch, platform)


def test_glm5_next_cannot_be_built_on_xpu() -> None:
    # VL/models/glm5next/__init__.py:6-7 raises NotImplementedError on XPU before importing common/model.py
    for arch in ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration"):
        assert view(V2, arch, {"platform": "cuda"}).target_eagle3 is True
        assert view(V2, arch, {"platform": "rocm"}).target_eagle3 is True
        xpu = view(V2, arch, {"platform": "xpu"})
        assert xpu.target_eagle3 is False and xpu.target_refusal and "glm5next/__init__.py:6-9" in xpu.target_refusal


# ---- pipeline parallelism -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arch", ["LlamaForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"]
)
def test_v2_relays_aux_states_over_pp_for_llama_and_qwen2_decoders(arch: str) -> None:
    for deployment in (None, {"pipeline_parallel_size": 1}, {"pipeline_parallel_size": 4}):
        on = view(V2, arch, deployment)
        assert on.target_refusal is None and not on.problems and "pipeline-parallel" not in on.caveats, deployment


@pytest.mark.parametrize(
    "arch",
    [
        "Qwen3MoeForCausalLM",
        "GptOssForCausalLM",
        "DeepseekV3ForCausalLM",
        "Qwen3NextForCausalLM",
        "Glm5NextForCausalLM",  # glm5next/common/model.py:701: Glm5NextModel(nn.Module, EagleModelMixin), no flag
        "DeepseekV41ForCausalLM",  # deepseek_v41/nvidia/model.py:699 and amd/model.py:494: no flag
        "BeamForCausalLM",  # beam/nvidia/model.py:188: no flag
    ],
)
def test_v2_refuses_pp_for_decoders_that_do_not_relay(arch: str) -> None:
    unset = view(V2, arch)
    assert unset.target_refusal is None and "with 1 (the default) it runs" in unset.caveats["pipeline-parallel"]
    assert view(V2, arch, {"pipeline_parallel_size": 1}).caveats.get("pipeline-parallel") is None
    for size in (2, "2"):
        on = view(V2, arch, {"pipeline_parallel_size": size})
        assert on.target_refusal and "eagle3_utils.py:43-45, 57-62" in on.target_refusal
        assert on.target_refusal in on.problems and "pipeline-parallel" not in on.caveats


@pytest.mark.parametrize(
    ("arch", "relays_on", "refuses_on", "refuser"),
    [
        # minimax_m3/__init__.py:16-27: ROCm gets amd/ (MiniMaxM3Model at :1385, no flag), the rest nvidia/ (:803)
        ("MiniMaxM3SparseForCausalLM", ("cuda", "cpu", "xpu"), ("rocm",), "minimax_m3/amd/model.py:1385"),
        ("MiniMaxM3SparseForConditionalGeneration", ("cuda",), ("rocm",), "minimax_m3/amd/model.py:1385"),
        # deepseek_v4/__init__.py:17-47: nvidia/model.py:812 sets it; amd :1111, xpu :962, cpu :454 do not
        ("DeepseekV4ForCausalLM", ("cuda", "tpu"), ("rocm", "xpu", "cpu"), "deepseek_v4/amd/model.py:1111"),
        ("DeepseekV4ForConditionalGeneration", ("cuda",), ("rocm",), "deepseek_v4/amd/model.py:1111"),
    ],
)
def test_v2_pp_verdict_depends_on_the_platform(
    arch: str, relays_on: tuple[str, ...], refuses_on: tuple[str, ...], refuser: str
) -> None:
    unknown = view(V2, arch, {"pipeline_parallel_size": 2})
    caveat = unknown.caveats["pipeline-parallel"]
    assert unknown.target_refusal is None and "on CUDA" in caveat and refuser in caveat
    for platform in relays_on:
        on = view(V2, arch, {"pipeline_parallel_size": 2, "platform": platform})
        assert on.target_refusal is None and "pipeline-parallel" not in on.caveats, platform
    for platform in refuses_on:
        on = view(V2, arch, {"pipeline_parallel_size": 2, "platform": platform})
        assert on.target_refusal and refuser in on.target_refusal, platform
        assert "eagle3_utils.py:43-45, 57-62" in on.target_refusal
    assert view(V2, arch, {"pipeline_parallel_size": 1, "platform": refuses_on[0]}).target_refusal is None


def test_v2_pp_by_model_type_and_for_unread_decoders() -> None:
    # a target known by its model_type only: qwen3_moe -> Qwen3MoeForCausalLM (model.py MODEL_TYPE_ARCHITECTURES)
    assert view(V2, None, {"pipeline_parallel_size": 2}, model_type="qwen3_moe").target_refusal
    # a class with EAGLE3 whose decoder this record did not read: said as a dependency, never a verdict
    on = view(V2, "HunYuanDenseV1ForCausalLM", {"pipeline_parallel_size": 2})
    assert on.target_refusal is None and "no verdict" in on.caveats["pipeline-parallel"]
    # aux capture off: the runner never asks the target (eagle3_utils.py:15-22), so PP is not checked for EAGLE3
    off = engine_view(
        V2,
        {**DRAFT, "eagle_config": {"use_aux_hidden_state": False}},
        target_model_type=None,
        target_num_layers=8,
        target_architecture="Qwen3MoeForCausalLM",
        deployment={"pipeline_parallel_size": 2},
    )
    assert off.target_refusal is None and "pipeline-parallel" not in off.caveats


def test_v1_checks_nothing_for_pp() -> None:
    assert "pipeline-parallel" not in view(V1, "Qwen3MoeForCausalLM").caveats
    on = view(V1, "Qwen3MoeForCausalLM", {"pipeline_parallel_size": 2})
    assert on.target_refusal is None and "no pipeline-parallel check" in on.caveats["pipeline-parallel"]


def test_0_28_models_neither_axis() -> None:
    rel = RELEASES["vllm@0.28"]
    assert rel.pipeline_parallel is None and rel.target_classes is not None and not rel.target_classes.platforms
    on = view("vllm@0.28", "KimiLinearForCausalLM", {"platform": "rocm", "pipeline_parallel_size": 2})
    assert "platform" not in on.caveats and "pipeline-parallel" not in on.caveats


# ---- the records ----------------------------------------------------------------------------------------------------


def test_tables_agree_with_the_target_class_table() -> None:
    eagle3 = read.EAGLE3["vllm 0.33"]
    assert not set(RELAYS_0_33) & set(REFUSES_0_33)
    assert not set(BY_PLATFORM_0_33) & (set(RELAYS_0_33) | set(REFUSES_0_33))
    # the PP check runs after the SupportsEagle3 check (eagle3_utils.py:28-45): every listed class has it
    assert set(RELAYS_0_33) | set(REFUSES_0_33) | set(PLATFORMS_0_33) | set(BY_PLATFORM_0_33) <= set(eagle3)


@pytest.mark.parametrize("release", [V2, V1])
def test_both_0_33_records_say_where_they_looked(release: str) -> None:
    keys = {b.key: b for b in RELEASES[release].behaviours}
    for key in ("target-classes:platform", "target-classes:platform-stub", "target-classes:platform-others"):
        assert key in keys
    assert "platforms/rocm.py:71-76" in str(keys["target-classes:platform-others"].cite)
    assert "pipeline-parallel" in keys


def _cites() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for release in RELEASES.values():
        if release.target_classes is not None:
            out += [(str(p.cite), p.why) for p in release.target_classes.platforms.values()]
        if release.pipeline_parallel is not None:
            pp = release.pipeline_parallel
            out += [(str(c), a) for a, c in (*pp.relays.items(), *pp.refuses.items())]
            out += [(str(c), a) for a, r in pp.by_platform.items() for c in (r.relays, r.refuses)]
            out += [(str(pp.check), "check")] if pp.check is not None else []
    return out


def test_every_axis_citation_is_well_formed() -> None:
    cites = _cites()
    assert len(cites) > 30
    for cite, what in cites:
        assert re.match(r"vllm/[\w/]+\.py:\d+(-\d+)?", cite), (cite, what)


# ---- the cited lines, in the wheel itself (when it is here) -------------------------------------------------------

WHEEL = os.environ.get("VLLM_0_33_WHEEL", "")


@pytest.mark.skipif(not os.path.isfile(WHEEL), reason="set VLLM_0_33_WHEEL to vllm-0.33.0-*.whl")
def test_cited_lines_say_what_the_records_say() -> None:
    with zipfile.ZipFile(WHEEL) as z:

        def line(path: str, n: int) -> str:
            return z.read(path).decode().splitlines()[n - 1]

        assert "from .amd.linear import KimiLinearForCausalLM" in line("vllm/models/kimi_k3/__init__.py", 27)
        assert "from .amd.linear import KimiLinearForCausalLM" in line("vllm/models/kimi_k3/__init__.py", 31)
        assert line("vllm/models/kimi_k3/amd/linear.py", 1077).startswith("class KimiLinearForCausalLM(")
        assert "SupportsEagle3" not in "".join(
            z.read("vllm/models/kimi_k3/amd/linear.py").decode().splitlines()[1076:1084]
        )
        assert "SupportsEagle3" in line("vllm/models/kimi_k3/nvidia/model.py", 1408)
        assert "_ROCM_UNSUPPORTED_MODELS: list[str] = []" in line("vllm/platforms/rocm.py", 72)
        assert "_ROCM_PARTIALLY_SUPPORTED_MODELS: dict[str, str] = {}" in line("vllm/platforms/rocm.py", 76)
        assert "verify_supports_aux_hidden_states_over_pp" in line(
            "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", 45
        )
        assert "supports_aux_hidden_states_over_pp = True" in line("vllm/model_executor/models/llama.py", 358)
        assert "supports_aux_hidden_states_over_pp = True" in line("vllm/model_executor/models/qwen2.py", 335)
        assert "supports_aux_hidden_states_over_pp: ClassVar[bool] = False" in line(
            "vllm/model_executor/models/interfaces.py", 1611
        )
        assert line("vllm/model_executor/models/qwen3_moe.py", 435).startswith("class Qwen3MoeModel(nn.Module, Eagle")
        assert "supports_aux_hidden_states_over_pp = True" in line("vllm/models/minimax_m3/nvidia/model.py", 803)
        assert line("vllm/models/minimax_m3/amd/model.py", 1385).startswith("class MiniMaxM3Model(nn.Module, Eagle")
        assert "supports_aux_hidden_states_over_pp = True" in line("vllm/models/deepseek_v4/nvidia/model.py", 812)
        for path, n in (("amd", 1111), ("xpu", 962), ("cpu", 454)):
            assert line(f"vllm/models/deepseek_v4/{path}/model.py", n).startswith("class DeepseekV4Model(nn.Module, E")
            assert "supports_aux" not in line(f"vllm/models/deepseek_v4/{path}/model.py", n + 1)
        assert "does not currently support XPU" in line("vllm/models/glm5next/__init__.py", 7)
        assert line("vllm/models/glm5next/common/model.py", 701).startswith("class Glm5NextModel(nn.Module, Eagle")
        assert line("vllm/models/beam/nvidia/model.py", 188).startswith("class BeamModel(nn.Module, EagleModelMixin")

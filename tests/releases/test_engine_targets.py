"""Which targets a release can run EAGLE3 on, and what its loader does with d2t, t2d and fc: the records read from
the wheels (``SG/`` = ``sglang/srt/``, ``VL/`` = ``vllm/``), their views and the gate findings they give (EC111,
EC112, EC412). Expectations are written from the cited released code, not from the tool."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.releases import RELEASES, engine_view
from eagle_convert.releases import target_classes as read
from eagle_convert.rules.registry import RULES
from eagle_convert.verify.run import verify_checkpoint
from fixtures.broken import CANONICAL, Broken, _edit, _set, write_broken
from fixtures.layouts import TARGETS, H, V

IDS = "eagle_aux_hidden_state_layer_ids"
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {IDS: [1, 2, 3]}}


def view(release: str, raw: dict[str, Any] | None = None, **target: Any) -> Any:
    target.setdefault("target_model_type", None)
    target.setdefault("target_num_layers", 8)
    return engine_view(release, raw or DRAFT, **target)


# ---- the target-class tables ----------------------------------------------------------------------------------------


def test_tables_hold_what_the_wheels_register() -> None:
    # counts printed by scripts/read-target-classes over the four wheels (registered target architectures)
    sizes = {r: (len(read.EAGLE3[r]), read.REGISTERED[r]) for r in read.EAGLE3}
    assert sizes == {
        "sglang 0.5.23": (71, 290),
        "sglang 0.5.16": (61, 233),
        "vllm 0.33": (117, 274),
        "vllm 0.28": (81, 258),
    }
    for release in RELEASES.values():
        classes = release.target_classes
        if release.engine == "trtllm":  # its target classes were not read (releases/trtllm.py): unknown, not guessed
            assert classes is None
            continue
        assert classes is not None, release.name
        for arch, cite in classes.eagle3.items():
            if release.engine == "tokenspeed":  # read by hand from its wheel (releases/tokenspeed.py): lines and loops
                assert re.fullmatch(r"tokenspeed/runtime/[\w/]+\.py", cite.file), (arch, cite)
                assert re.match(r"\d+(-\d+)?\b", cite.lines), (arch, cite)
                continue
            assert re.fullmatch(r"(sglang/srt|vllm)/[\w/]+\.py", cite.file) and cite.lines.isdigit(), (arch, cite)
        if classes.without is not None:
            assert not set(classes.without) & set(classes.eagle3)


@pytest.mark.parametrize("version", ["0.5.23", "0.5.16"])
def test_every_sglang_capture_rule_starts_at_a_capture_method_of_the_table(version: str) -> None:
    """The per-model_type capture rows (read by hand) and the class table (read by the script) agree: each row's
    lines start at a set_eagle3_layers_to_capture some registered class resolves to."""
    release = RELEASES[f"sglang@{version}"]
    assert release.target_classes is not None
    methods = {(c.file, c.lines) for c in release.target_classes.eagle3.values()}
    for model_type in ("llama", "qwen3", "qwen3_moe", "deepseek_v3", "gpt_oss", "gemma3_text", "glm4_moe_lite"):
        row = release.capture(model_type)
        assert row is not None and (row.cite.file, row.cite.lines.split("-")[0]) in methods, model_type


@pytest.mark.parametrize(
    ("arch", "sglang", "vllm"),
    [
        ("LlamaForCausalLM", True, True),  # SG/models/llama.py:929; VL/model_executor/models/llama.py:464
        ("Qwen3MoeForCausalLM", True, True),
        ("DeepseekV3ForCausalLM", True, True),  # SG/models/deepseek_v2.py:3458 (inherited)
        ("Gemma2ForCausalLM", False, False),
        ("Gemma3ForCausalLM", True, False),  # SG/models/gemma3_causal.py:917; VL gemma3.py:367: no SupportsEagle3
        ("Gemma3ForConditionalGeneration", True, False),  # SG/models/gemma3_mm.py:543 delegates
        ("Glm4MoeForCausalLM", True, False),  # VL/model_executor/models/glm4_moe.py:534
        ("HunYuanDenseV1ForCausalLM", False, True),  # SG/models/hunyuan.py:800; VL: the Transformers backend
        ("GraniteMoeForCausalLM", False, True),  # SG/models/granitemoe.py:437; VL granitemoe.py:391
        ("KimiLinearForCausalLM", False, True),  # SG/models/kimi_linear.py:765
        ("KimiK3ForConditionalGeneration", False, True),  # SG registers it without the method (DFlash/DSpark only)
        ("DeepseekV4ForCausalLM", False, True),  # SG/models/deepseek_v4.py:4633
        ("NemotronHForCausalLM", False, True),  # SG/models/nemotron_h.py:907
        ("Mistral3ForConditionalGeneration", False, True),  # SG/models/mistral.py:94, a Llava subclass
        ("Qwen2AudioForConditionalGeneration", False, False),
        ("Idefics3ForConditionalGeneration", False, False),  # not an SGLang architecture: Transformers fallback
        ("SmolVLMForConditionalGeneration", False, False),
        ("SomeNewForCausalLM", False, True),  # unregistered: SG Transformers fallback has none, VL's implements it
    ],
)
def test_which_target_classes_capture(arch: str, sglang: bool, vllm: bool) -> None:
    for name in ("sglang@0.5.23", "vllm@0.33", "vllm@0.33-v1"):
        v = view(name, target_architecture=arch)
        expected = sglang if name.startswith("sglang") else vllm
        assert v.target_eagle3 is expected, (name, arch, v.citations["target_class"])
        assert (v.target_refusal is None) is expected
        if not expected:
            assert v.hidden_state_indices is None and v.rule.startswith("no EAGLE3 capture")
            assert arch in v.target_refusal and re.search(r"\.py:\d", v.target_refusal), v.target_refusal


def test_granite_moe_gained_the_interface_after_0_28() -> None:
    assert view("vllm@0.28", target_architecture="GraniteMoeForCausalLM").target_eagle3 is False  # not yet in 0.28
    assert view("vllm@0.33", target_architecture="GraniteMoeForCausalLM").target_eagle3 is True


def test_model_type_alone_decides_only_when_every_class_of_it_agrees() -> None:
    gemma2 = view("sglang@0.5.23", target_model_type="gemma2")
    assert gemma2.target_eagle3 is False and gemma2.target_refusal and "Gemma2ForCausalLM" in gemma2.target_refusal
    assert view("vllm@0.33", target_model_type="gemma3_text").target_eagle3 is False
    assert view("sglang@0.5.23", target_model_type="gemma3_text").target_eagle3 is True
    # unknown model_type, unknown class: no verdict and no error; vLLM's capture is the same for every class
    for name in RELEASES:
        v = view(name, target_model_type="some_new_type")
        draft_only = [p for p in v.problems if p.startswith("no EAGLE3 draft class")]  # AutoDeploy: no model_type
        assert v.target_eagle3 is None and v.target_refusal is None and v.problems == draft_only, name
    assert view("sglang@0.5.23", target_model_type="some_new_type").rule == "depends on the target class (unknown)"
    assert view("vllm@0.33-v1", target_model_type="some_new_type").hidden_state_indices == [1, 2, 3]


def test_a_class_without_a_row_takes_the_rule_of_the_method_it_inherits() -> None:
    # MistralForCausalLM(LlamaForCausalLM) runs SG/models/llama.py:929-941: +1
    v = view("sglang@0.5.23", target_architecture="MistralForCausalLM")
    assert (v.rule, v.hidden_state_indices) == ("+1", [2, 3, 4])


# ---- eagle_config.use_aux_hidden_state: false ----------------------------------------------------------------------


def test_aux_capture_off_captures_nothing_and_checks_no_target_class() -> None:
    # SG spec_aux_hidden_state.py:189-191 and attention_backend_setup.py:54; VL eagle3_utils.py:15-22 (V2),
    # llm_base_proposer.py:1674-1687 with gpu_model_runner.py:5170-5171 (V1)
    raw = {**DRAFT, "eagle_config": {IDS: [1, 2, 3], "use_aux_hidden_state": False}}
    for name in ("sglang@0.5.23", "sglang@0.5.16", "vllm@0.33", "vllm@0.33-v1"):
        v = view(name, raw, target_architecture="Gemma3ForCausalLM", target_model_type="gemma3_text")
        assert (v.aux_capture, v.hidden_state_indices, v.target_refusal) == (False, [], None), name
        assert v.rule.startswith("no aux capture") and not v.problems, name
    # 0.28's V2 runner (dense targets) captures for eagle3 whatever the config (VL 0.28 gpu/model_runner.py:245-247)
    # while the draft class skips fc: a problem; its V1 runner (MoE targets) honours the flag
    dense = view("vllm@0.28", raw, target_model_type="llama")
    assert dense.aux_capture is True and any("skips fc" in p for p in dense.problems)
    assert view("vllm@0.28", raw, target_model_type="deepseek_v3").hidden_state_indices == []


# ---- speculators configs with transformer_layer_config.model_type null ----------------------------------------------


def test_speculators_null_layer_model_type_is_refused_not_routed_to_llama() -> None:
    # VL transformers_utils/configs/speculators/algos.py:43-45: dict.get("model_type", "llama") returns None for a
    # null value, which is not in the arch map: ValueError. A missing key reads as llama.
    null = {"speculators_model_type": "eagle3", "transformer_layer_config": {"model_type": None}}
    missing = {"speculators_model_type": "eagle3", "transformer_layer_config": {"hidden_size": 64}}
    for name in ("vllm@0.33", "vllm@0.33-v1", "vllm@0.28"):
        v = view(name, null)
        assert v.draft_class is None and "algos.py:43-45" in v.citations["draft_class"], name
        assert any("Unsupported model_type None" in p for p in v.problems)
        assert view(name, missing).draft_class == "llama_eagle3.Eagle3LlamaForCausalLM"


# ---- what the loaders do with d2t and t2d ---------------------------------------------------------------------------


def fates(release: str, raw: dict[str, Any], target_vocab: int | None = None) -> dict[str, str]:
    v = view(release, {**DRAFT, **raw}, target_vocab_size=target_vocab)
    return {f.tensor: f.fate for f in v.tensor_fates}


def test_d2t_is_refused_by_vllm_0_33_when_the_vocabularies_are_equal() -> None:
    # VL llama_eagle3.py:314-316 (null -> vocab_size), :338-345 (parameter only when they differ), :428-430 (rename),
    # model_executor/models/utils.py:441-448 (ValueError)
    for name in ("vllm@0.33", "vllm@0.33-v1"):
        assert fates(name, {"vocab_size": 256, "draft_vocab_size": 256})["d2t"] == "refused"
        assert fates(name, {"vocab_size": 256, "draft_vocab_size": None})["d2t"] == "refused"
        assert fates(name, {"vocab_size": 256})["d2t"] == "refused"
        assert fates(name, {"vocab_size": 256, "draft_vocab_size": 128})["d2t"] == "loaded"
        assert fates(name, {"vocab_size": 256, "draft_vocab_size": 256}, target_vocab=512)["d2t"] == "loaded"
        assert fates(name, {})["t2d"] == "dropped" and "d2t" not in fates(name, {})  # sizes unknown: no verdict
    # 0.28 builds the parameter always (llama_eagle3.py:304-307); SGLang turns d2t into hot_token_id
    # (SG/models/llama_eagle3.py:350-353) and skips t2d (:355-356)
    for name in ("vllm@0.28", "sglang@0.5.23", "sglang@0.5.16"):
        equal = fates(name, {"vocab_size": 256, "draft_vocab_size": 256})
        assert {k: equal[k] for k in ("d2t", "t2d")} == {"d2t": "loaded", "t2d": "dropped"}
    # SGLang's Llama draft: a tied head drops the file's lm_head (both releases); 0.5.16 has no input_norm at all
    for name in ("sglang@0.5.23", "sglang@0.5.16"):
        assert fates(name, {"tie_word_embeddings": True})["lm_head.weight"] == "dropped"
        assert "lm_head.weight" not in fates(name, {"tie_word_embeddings": False})
    assert fates("sglang@0.5.16", {})["input_norm.weight"] == "dropped"
    assert "input_norm.weight" not in fates("sglang@0.5.23", {})


# ---- the gate -------------------------------------------------------------------------------------------------------


def _target(root: Path, **config: Any) -> Path:
    out = root / "target-gemma3"
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({**TARGETS["target-llama"], **config}))
    return out


def test_inspect_with_a_target_the_release_cannot_run_is_an_error_for_that_release(tmp_path: Path) -> None:
    draft = write_broken(tmp_path / "draft", Broken("plain", "", CANONICAL))
    target = _target(tmp_path, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text")
    report = inspect_checkpoint(draft, target=target, engine="all")
    ec111 = {f.engine: f for f in report.findings if f.rule_id == "EC111"}
    assert set(ec111) == {"vllm@0.33", "vllm@0.33-v1", "vllm@0.28", "tokenspeed@0.1.1"}
    found = ec111["vllm@0.33-v1"]
    assert found.severity == "error" and found.actual == "Gemma3ForCausalLM"
    assert "vllm@0.33-v1" in found.message and "vllm/v1/worker/gpu_model_runner.py:5173-5177" in found.message
    assert not [f for f in inspect_checkpoint(draft, target=target, engine="sglang").findings if f.rule_id == "EC111"]


def test_aux_capture_off_gives_no_ec104_and_says_the_trained_fc_is_lost(tmp_path: Path) -> None:
    config = _set(eagle_config={**CANONICAL.config["eagle_config"], "use_aux_hidden_state": False})
    draft = write_broken(tmp_path / "off", Broken("off", "", CANONICAL, config=config))
    report = verify_checkpoint(draft, target=tmp_path / "targets" / "target-llama", engine="all", compute_hashes=False)
    rules = [(f.rule_id, f.engine) for f in report.findings]
    assert not [r for r in rules if r[0] in ("EC103", "EC104", "EC105")], rules
    ec112 = {f.engine: f.message for f in report.findings if f.rule_id == "EC112"}
    assert set(ec112) >= {"sglang@0.5.23", "sglang@0.5.16", "vllm@0.33", "vllm@0.33-v1"}
    assert "fc.weight is dropped" in ec112["vllm@0.33-v1"] and "llama_eagle3.py:462-463" in ec112["vllm@0.33-v1"]
    assert "fc.weight is loaded" in ec112["sglang@0.5.23"]


def test_d2t_with_equal_vocabularies_is_ec412_for_the_releases_that_refuse_it(tmp_path: Path) -> None:
    case = Broken(
        "equal-vocab",
        "",
        CANONICAL,
        config=_set(draft_vocab_size=V),
        tensors=lambda specs: _edit("lm_head.weight", shape=(V, H))(_edit("d2t", shape=(V,))(specs)),
    )
    draft = write_broken(tmp_path / "equal", case)
    report = verify_checkpoint(draft, target=tmp_path / "targets" / "target-llama", engine="all", compute_hashes=False)
    ec412 = [f for f in report.findings if f.rule_id == "EC412"]
    assert {f.engine for f in ec412} == {"vllm@0.33", "vllm@0.33-v1"}
    assert all(f.severity == "error" and "draft_id_to_target_id" in f.message for f in ec412)
    assert report.status == "fail"


def test_the_new_rules_are_registered() -> None:
    assert {r: (RULES[r].severity, RULES[r].level) for r in ("EC111", "EC112", "EC412")} == {
        "EC111": ("error", "static"),
        "EC112": ("error", "static"),
        "EC412": ("error", "static"),
    }


# ---- the demo's trained pair (cached build, about two minutes the first time) ----------------------------------------


@pytest.mark.slow
def test_trained_pair_is_refused_by_vllm_before_any_engine_runs() -> None:
    from fixtures.trained_pair import trained_pair

    pair = trained_pair()
    report = verify_checkpoint(
        pair.draft_dir, target=pair.target_dir, level="tensors", engine="vllm@0.33-v1", compute_hashes=False
    )
    (refused,) = [f for f in report.findings if f.rule_id == "EC412"]
    assert refused.severity == "error" and refused.subject == "d2t" and report.status == "fail"

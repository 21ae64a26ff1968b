"""TensorRT-LLM's AutoDeploy backend as a runner view of its own (issue 39, item 2): ``trtllm@main-09562d6-autodeploy``.

Expectations are worked from the cited lines of NVIDIA/TensorRT-LLM as stored by the reference index:
``tensorrt_llm/_torch/auto_deploy/models/custom/modeling_eagle.py`` at 09562d6 (ME) and
``tensorrt_llm/_torch/auto_deploy/transform/library/hidden_states.py`` at 06b74be (HS):

- layers by the draft config's model_type: llama -> LlamaEagleLayer; deepseek_v3, nemotron_h -> MTP; else ValueError
  (ME:77-88, 205-209);
- LlamaEagleLayer has hidden_norm, input_layernorm, post_attention_layernorm: no fc_norm, no input_norm (ME:545-547);
- fc = Linear(hidden_size * num_capture_layers, hidden_size), num_capture_layers default 3 (ME:122, 640-650);
- the carried state is post-norm only with eagle_config.return_hidden_post_norm (ME:758-759, 798);
- RoPE from a top-level rope_type: default / ntk, anything else ValueError; rope_scaling never read (ME:247-273);
- capture: eagle3_layers_to_capture, layer i -> hs[i+1]; unset {1, N//2-1, N-4}, ValueError for N <= 6 (HS:84-91).

The PyTorch backend's records (``trtllm@main-00679c6``, ``trtllm@1.2``) read fc_norm and norm_output where their code
does, so the same draft gets the findings under the AutoDeploy view only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from eagle_convert.cli.main import main
from eagle_convert.hub.model_card import trtllm_launch
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.releases import DEFAULT_ENGINES, RELEASES, default_hidden_states, engine_view, resolve_engines
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout, write_targets
from fixtures.layouts import LAYOUTS
from fixtures.real import write_real_checkpoint
from tests.conftest import SCHEMAS

AD = "trtllm@main-09562d6-autodeploy"
MAIN, RC = "trtllm@main-00679c6", "trtllm@1.2"
KEY = "eagle3_layers_to_capture"
ME = "tensorrt_llm/_torch/auto_deploy/models/custom/modeling_eagle.py@09562d6"
HS = "tensorrt_llm/_torch/auto_deploy/transform/library/hidden_states.py@06b74be"
REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real-configs"
INSPECT = Draft202012Validator(json.loads((SCHEMAS / "inspect-report.schema.json").read_text()))
VERIFY = Draft202012Validator(json.loads((SCHEMAS / "verify-report.schema.json").read_text()))
LLAMA = {"model_type": "llama", "hidden_size": 4096, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}

# every behaviour's citation, line for line as read at the commits above
CITES = {
    "ids-location": f"{HS}:82",
    "ids-convention": f"{HS}:104-142",
    "defaults": f"{HS}:84-91, 173-175",
    "minus-one": f"{HS}:178-181",
    "order": f"{ME}:1051-1072",
    "num-capture": f"{ME}:122, 640-650",
    "EagleDrafterForCausalLM:draft-types": f"{ME}:77-88, 95-100, 205-209",
    "EagleDrafterForCausalLM:defaults": f"{ME}:118-133, 224-232",
    "EagleDrafterForCausalLM:mtp-types": f"{ME}:134-160",
    "EagleDrafterForCausalLM:qkv": f"{ME}:405-431",
    "EagleDrafterForCausalLM:norms": f"{ME}:545-547, 584-600, 742-745",
    "EagleDrafterForCausalLM:fc": f"{ME}:639-650, 918-925",
    "EagleDrafterForCausalLM:norm_output": f"{ME}:758-759, 798",
    "EagleDrafterForCausalLM:rope": f"{ME}:240-273",
    "EagleDrafterForCausalLM:d2t": f"{ME}:631-637, 928-933",
    "EagleDrafterForCausalLM:embed_tokens": f"{ME}:120, 624-629, 935-941",
    "EagleDrafterForCausalLM:lm_head": f"{ME}:748-756",
    "EagleDrafterForCausalLM:names": f"{ME}:90-92, 129-132",
}


def view(raw: dict[str, Any], release: str = AD, n: int | None = 32, **kw: Any) -> Any:
    return engine_view(release, raw, target_model_type="llama", target_num_layers=n, **kw)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---- the record -----------------------------------------------------------------------------------------------------


def test_a_runner_of_trtllm_chosen_by_name_and_out_of_the_defaults() -> None:
    rel = RELEASES[AD]
    assert (rel.engine, rel.version, rel.runner) == ("trtllm", "main-09562d6", "autodeploy")
    assert resolve_engines(AD) == [rel] and rel in resolve_engines("all")
    assert [r.name for r in resolve_engines("trtllm")] == [RC]  # the newest PyTorch record stays the default
    assert rel not in resolve_engines(DEFAULT_ENGINES) and rel not in resolve_engines("both")
    assert "09562d6" in rel.source and "06b74be" in rel.source and "not a release tag" in rel.source


def test_every_behaviour_cites_its_file_and_lines_at_the_commit_read() -> None:
    cites = {b.key: str(b.cite) for b in RELEASES[AD].behaviours}
    assert cites == CITES
    assert {k: str(b.cite) for b in RELEASES[AD].caveats for k in [b.key]} == {"layers-prefix": f"{ME}:90-92, 129-132"}


def test_the_cli_lists_it_with_its_sources(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "engines", "--json")
    docs = {d["release"]: d for d in json.loads(out)}
    assert code == 0 and docs[AD]["engine"] == "trtllm" and docs[AD]["deployed"] is False
    assert {b["key"]: b["cite"] for b in docs[AD]["behaviours"]} == CITES


# ---- the capture: the deployment's setting, refused defaults for N <= 6 ---------------------------------------------


@pytest.mark.parametrize("n", [1, 6, 7, 32, 61])
def test_unset_captures_the_defaults_or_refuses_for_six_layers_or_fewer(n: int) -> None:
    ad, pytorch = view(LLAMA, n=n), view(LLAMA, MAIN, n=n)
    assert ad.ids_from == "defaults" and ad.ids is None  # the draft's ids are never read
    if n <= 6:  # HS:89-90; the PyTorch backend feeds hs[1] for N == 1 and the defaults for N == 6
        assert ad.hidden_state_indices is None and "Not enough hidden layers" in (ad.target_refusal or "")
        assert pytorch.target_refusal is None and pytorch.hidden_state_indices is not None
    else:
        assert ad.hidden_state_indices == default_hidden_states(n) == pytorch.hidden_state_indices
        assert ad.target_refusal is None


def test_the_setting_is_layer_outputs_and_advised_as_on_the_pytorch_backend() -> None:
    given = view(LLAMA, deployment={KEY: [28, 1, 15]})
    assert given.ids_from == "deployment" and given.hidden_state_indices == [2, 16, 29]
    assert view(LLAMA, trained_states=[4, 7, 10]).capture_setting == {KEY: [3, 6, 9]}
    assert view(LLAMA, n=6, trained_states=[2, 3, 4]).capture_setting == {KEY: [1, 2, 3]}  # the default refuses


def test_k_of_fc_is_the_configs_not_the_captured_count() -> None:
    three = view(LLAMA, deployment={KEY: [1, 15, 28]})
    assert three.num_aux_hidden_states == 3 and not three.problems  # ME:122: num_capture_layers defaults to 3
    four = view(LLAMA, deployment={KEY: [1, 10, 20, 28]})
    assert four.num_aux_hidden_states == 3 and any("does not fit fc" in p for p in four.problems)
    assert view(LLAMA, MAIN, deployment={KEY: [1, 10, 20, 28]}).num_aux_hidden_states == 4  # PyTorch: len(the set)
    own = view({**LLAMA, "num_capture_layers": 4}, deployment={KEY: [1, 10, 20, 28]})
    assert own.num_aux_hidden_states == 4 and not own.problems and own.fc_in_width == 4 * 4096


# ---- the drafter: what it builds from the config ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "flags"),
    [
        ({"fc_norm": True}, (False, False, False)),  # ME:545-547: no fc_norm anywhere
        ({"norm_before_fc": True}, (False, False, False)),
        ({"eagle_config": {"norm_before_fc": True}}, (False, False, False)),  # no input_norm either
        ({"norm_output": True}, (False, False, False)),  # ME:758-759: the top level is not read
        ({"eagle_config": {"return_hidden_post_norm": True}}, (False, False, True)),
    ],
)
def test_it_reads_only_eagle_config_return_hidden_post_norm(config: dict[str, Any], flags: tuple[bool, ...]) -> None:
    raw = {"model_type": "llama", **config}
    ad = view(raw)
    assert (ad.fc_norm, ad.norm_before_fc, ad.norm_output) == flags
    main_flags = (view(raw, MAIN).fc_norm, view(raw, MAIN).norm_before_fc, view(raw, MAIN).norm_output)
    assert main_flags == (
        "fc_norm" in config,
        "norm_before_fc" in config.get("eagle_config", {}),
        "norm_output" in config or "return_hidden_post_norm" in config.get("eagle_config", {}),
    )


@pytest.mark.parametrize(
    ("config", "rope", "refused"),
    [
        ({}, "default", False),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "default", False),  # never read: plain RoPE
        ({"rope_scaling": {"type": "llama3", "factor": 8.0}}, "default", False),
        ({"rope_type": "default"}, "default", False),
        ({"rope_type": "ntk"}, "ntk", False),
        ({"rope_type": "yarn"}, None, True),  # ME:272-273: ValueError at load
    ],
)
def test_rope_comes_from_a_top_level_rope_type_only(config: dict[str, Any], rope: str | None, refused: bool) -> None:
    ad = view({"model_type": "llama", **config})
    assert ad.rope == rope and any("Not support rope_type" in p for p in ad.problems) == refused
    assert view({"model_type": "llama", **config}, MAIN).rope is None  # the PyTorch records do not model RoPE


def test_fc_is_sized_from_hidden_size_never_target_hidden_size() -> None:
    raw = {"model_type": "llama", "hidden_size": 4096, "target_hidden_size": 7168}
    assert view(raw).fc_in_width == 3 * 4096 and view(raw).citations["fc"] == f"{ME}:639-650, 918-925"
    assert view(raw, MAIN).fc_in_width is None  # K x target_hidden_size, as the weights: not a difference


@pytest.mark.parametrize(
    ("model_type", "why"),
    [
        ("llama", None),
        ("deepseek_v3", "MTP drafter"),
        ("nemotron_h", "MTP drafter"),
        ("qwen3", "ValueError"),
        (None, "ValueError"),
    ],
)
def test_the_draft_type_is_the_config_model_type(model_type: str | None, why: str | None) -> None:
    ad = view({"model_type": model_type, "architectures": ["LlamaForCausalLMEagle3"]})
    if why is None:
        assert ad.draft_class == "modeling_eagle.EagleDrafterForCausalLM (LlamaEagleLayer)"
    else:
        assert ad.draft_class is None and why in ad.citations["draft_class"]
        assert view({"model_type": model_type, "architectures": ["LlamaForCausalLMEagle3"]}, MAIN).draft_class


# ---- the gate: the losses as findings under this view only ----------------------------------------------------------


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("autodeploy")
    write_layout(root / "eagle3.1", LAYOUTS["specforge-mha-eagle3.1"])  # fc_norm weights, norm_output true
    write_layout(root / "plain", LAYOUTS["specforge-mha"])
    yarn = write_layout(root / "yarn", LAYOUTS["specforge-mha"])
    config = json.loads((yarn / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    (yarn / "config.json").write_text(json.dumps(config))
    write_targets(root / "targets")
    return root


def _verify(drafts: Path, name: str, release: str) -> dict[str, list[Any]]:
    report = verify_checkpoint(
        drafts / name, target=drafts / "targets" / "target-llama", engine=release, compute_hashes=False
    )
    out: dict[str, list[Any]] = {}
    for f in report.findings:
        if f.engine == release:
            out.setdefault(f.rule_id, []).append(f.subject)
    return {rule: sorted(subjects) for rule, subjects in out.items()}


def test_an_eagle3_1_draft_loses_fc_norm_and_norm_output_under_autodeploy_only(drafts: Path) -> None:
    assert _verify(drafts, "eagle3.1", AD) == {"EC211": ["fc_norm", "norm_output"]}
    assert _verify(drafts, "eagle3.1", MAIN) == {}  # main reads both (modeling_speculative.py@00679c6:712-747)
    assert _verify(drafts, "eagle3.1", RC) == {"EC211": ["fc_norm", "norm_output"]}  # 1.2.0rc2 builds neither
    assert _verify(drafts, "plain", AD) == {}  # an EAGLE3 draft on the default capture passes


def test_a_yarn_draft_runs_plain_rope_under_autodeploy_only(drafts: Path) -> None:
    assert _verify(drafts, "yarn", AD) == {"EC211": ["rope_scaling"]}
    assert _verify(drafts, "yarn", MAIN) == {} and _verify(drafts, "yarn", RC) == {}


def test_an_fc_wider_than_k_hidden_size_does_not_fit(tmp_path: Path) -> None:
    config = json.loads((REAL / "specforge__llama3-8B-eagle3.json").read_text())
    config["target_hidden_size"] = 5120  # a draft narrower than its target: fc is [4096, 3 x 5120]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    draft = write_real_checkpoint(path, tmp_path / "draft")
    by = {r: verify_checkpoint(draft, engine=r, compute_hashes=False).findings for r in (AD, MAIN)}
    (wide,) = [f for f in by[AD] if f.rule_id == "EC211" and f.subject == "target_hidden_size"]
    assert (wide.expected, wide.actual) == (3 * 5120, 3 * 4096) and "normalize cannot fix" in wide.message
    assert not [f for f in by[MAIN] if f.subject == "target_hidden_size" and f.engine == MAIN]


def test_an_mla_draft_has_no_autodeploy_class_and_normalize_does_not_promise_one(tmp_path: Path) -> None:
    draft = write_layout(tmp_path / "mla", LAYOUTS["specforge-mla"])  # model_type deepseek_v3: the MTP drafter
    (found,) = [f for f in verify_checkpoint(draft, engine=AD, compute_hashes=False).findings if f.rule_id == "EC012"]
    assert "MTP drafter" in found.message and "normalize cannot fix" in found.message


@pytest.mark.parametrize(
    ("name", "subjects"),
    [
        ("specforge__qwen3-30B-A3B-eagle3.1.json", {"fc_norm", "norm_output"}),
        ("torchspec__kimi_k25_eagle3.json", {"rope_scaling"}),
        ("specforge__deepseek-v2-lite-eagle3.json", {"rope_scaling"}),
        ("specforge__llama3-70B-ealge3.json", {"rope_scaling"}),  # llama3 scaling: not read either
        ("specforge__llama3-8B-eagle3.json", set()),
    ],
)
def test_real_configs(tmp_path: Path, name: str, subjects: set[str]) -> None:
    draft = write_real_checkpoint(REAL / name, tmp_path / "draft")
    found = {
        f.subject for f in verify_checkpoint(draft, engine=AD, compute_hashes=False).findings if f.rule_id == "EC211"
    }
    assert found == subjects
    pytorch = verify_checkpoint(draft, engine=MAIN, compute_hashes=False).findings
    assert not {f.subject for f in pytorch if f.rule_id == "EC211"} & {"fc_norm", "norm_output", "rope_scaling"}


# ---- the commands ---------------------------------------------------------------------------------------------------


def test_inspect_and_verify_show_the_view(drafts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = str(drafts / "targets" / "target-llama")
    code, out, _ = cli(capsys, "inspect", str(drafts / "yarn"), "--target", target, "--engine", AD, "--json")
    doc = json.loads(out)
    INSPECT.validate(doc)
    entry = doc["aux_layers"]["engines"][AD]
    assert code == 0 and entry["rope"] == "default" and entry["fc_in_width"] == 3 * 64
    assert entry["hidden_state_indices"] == [2, 6, 9] and entry["citations"]["rope"] == f"{ME}:240-273"
    code, out, _ = cli(
        capsys, "verify", str(drafts / "yarn"), "--target", target, "--engine", AD, "--json", "--no-hash"
    )
    doc = json.loads(out)
    VERIFY.validate(doc)
    assert code == 1 and [(f["rule_id"], f["subject"], f["engine"]) for f in doc["findings"]] == [
        ("EC211", "rope_scaling", AD)
    ]
    code, out, _ = cli(capsys, "inspect", str(drafts / "plain"), "--target", target, "--engine", AD)
    assert code == 0 and any(line.startswith(AD) and "hs[2, 6, 9]" in line for line in out.splitlines())


def test_the_model_card_launches_the_autodeploy_backend(drafts: Path) -> None:
    report = inspect_checkpoint(drafts / "plain", target=drafts / "targets" / "target-llama", engine=AD)
    text = "\n".join(trtllm_launch(report.spec, resolve_engines(AD), "org/target", "org/draft"))
    assert "trtllm-serve org/target --backend _autodeploy --extra_llm_api_options extra_llm_api_options.yaml" in text
    plain = "\n".join(trtllm_launch(report.spec, resolve_engines(RC), "org/target", "org/draft"))
    assert "--backend" not in plain

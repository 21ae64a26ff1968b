"""The TokenSpeed record (releases/tokenspeed.py), read from the tokenspeed 0.1.1 wheel.

Three layers. The expectations of the first are worked from the cited lines of the wheel (``tokenspeed/runtime/``):
``execution/factory.py:47-78`` reads the ids (an ``eagle_config`` object decides alone, else the top-level list, then
``text_config``), ``:197-200`` lets ``--eagle3-layers-to-capture`` win; ``models/base/causal_lm.py:271-282`` adds 1
and ``base/transformer_model.py:207-253`` captures index i before layer i and index N + 1 as hs[N]. The second runs
``inspect --engine tokenspeed --json`` on every real config whose target TokenSpeed serves. The third, where the
wheel is at hand (``EAGLE_CONVERT_TOKENSPEED_WHEEL``, or ``.cache/`` of the checkout), checks every citation against
the wheel's files and runs TokenSpeed's own functions (taken from the wheel's source, which cannot be imported here:
its kernels refuse a machine without a GPU) on the same configs.
"""

from __future__ import annotations

import ast
import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from eagle_convert.releases import DEFAULT_ENGINES, RELEASES, engine_view, launch_command, resolve_engines
from eagle_convert.releases import tokenspeed as ts
from fixtures.real import real_config_paths, write_real_checkpoint
from tests.conftest import ROOT, SCHEMAS, run_cli
from tests.engine.test_engines_real import target_of, tokenspeed_capture

TS = "tokenspeed@0.1.1"
KEY = "eagle3_layers_to_capture"
IDS = "eagle_aux_hidden_state_layer_ids"
LLAMA = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "hidden_size": 64}
MLA = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "num_hidden_layers": 1, "hidden_size": 64}


def view(raw: dict[str, Any], mt: str | None = "llama", n: int | None = 32, **kw: Any):  # type: ignore[no-untyped-def]
    return engine_view(TS, raw, target_model_type=mt, target_num_layers=n, **kw)


# ---- the record -------------------------------------------------------------------------------------------------


def test_tokenspeed_resolves_by_name_and_stays_out_of_the_default() -> None:
    assert [r.name for r in resolve_engines("tokenspeed")] == [TS] == [r.name for r in resolve_engines(TS)]
    assert not any(r.engine == "tokenspeed" for r in resolve_engines(DEFAULT_ENGINES))
    assert "tokenspeed" in launch_command("tokenspeed", "T", "D") and "--speculative-algorithm EAGLE3" in (
        launch_command("tokenspeed", "T", "D")
    )


def test_eagle_config_object_decides_alone_then_top_level_then_text_config() -> None:
    both = {**LLAMA, IDS: [3, 4, 5], "eagle_config": {IDS: [1, 15, 28]}}
    assert (view(both).ids_from, view(both).ids) == ("eagle_config", [1, 15, 28])
    # an eagle_config without ids: the top-level list is not read (factory.py:70-75), the defaults apply
    no_ids = {**LLAMA, IDS: [3, 4, 5], "eagle_config": {"use_aux_hidden_state": True}}
    assert view(no_ids).ids_from == "defaults" and view(no_ids).hidden_state_indices == [2, 16, 29]
    assert view({**LLAMA, IDS: [3, 4, 5]}).ids == [3, 4, 5]
    nested = {**LLAMA, "eagle_config": {}, "text_config": {"eagle_config": {IDS: [0, 7, 20]}}}
    assert (view(nested).ids_from, view(nested).ids) == ("text_config.eagle_config", [0, 7, 20])
    # an empty list counts as none (factory.py:76)
    assert view({**LLAMA, "eagle_config": {IDS: []}}).ids_from == "defaults"


def test_the_server_argument_wins_over_the_draft_ids() -> None:
    raw = {**LLAMA, "eagle_config": {IDS: [1, 15, 28]}}
    given = view(raw, deployment={KEY: [0, 7, 20]})
    assert (given.ids_from, given.ids, given.hidden_state_indices) == ("deployment", [0, 7, 20], [1, 8, 21])
    assert "factory.py:193-200" in given.citations["ids_from"]


def test_base_loop_adds_one_reaches_hs_n_with_id_n_and_never_id_n_minus_1() -> None:
    assert view({**LLAMA, IDS: [1, 15, 28]}).hidden_state_indices == [2, 16, 29]
    at_n = view({**LLAMA, IDS: [1, 15, 32]})
    assert at_n.hidden_state_indices == [2, 16, 32] and at_n.problems == []
    short = view({**LLAMA, IDS: [1, 15, 31]})
    assert short.hidden_state_indices == [2, 16]
    assert any("[31] are never reached" in p and "transformer_model.py:240-253" in p for p in short.problems)
    # no "first id is 1" test on DeepSeek targets (deepseek_v3.py:2073-2080), and no hs[N] there
    assert view({**MLA, "eagle_config": {IDS: [2, 30, 58]}}, "deepseek_v3", 61).hidden_state_indices == [3, 31, 59]
    past = view({**MLA, "eagle_config": {IDS: [2, 30, 60]}}, "deepseek_v3", 61)
    assert any("never reached" in p for p in past.problems)


def test_kimi_k3_takes_ids_as_they_are_and_refuses_unsorted_ones() -> None:
    raw = {**MLA, "eagle_config": {IDS: [1, 45, 89]}}
    assert view(raw, "kimi_k3", 93).hidden_state_indices == [1, 45, 89]
    refused = view({**MLA, "eagle_config": {IDS: [45, 1, 89]}}, "kimi_k3", 93)
    assert refused.target_refusal and "kimi_k3.py:3647-3657" in refused.target_refusal
    assert view({**MLA, "eagle_config": {IDS: [0, 45, 89]}}, "kimi_k3", 93).target_refusal  # 1..N only


def test_qwen3_targets_capture_nothing_and_start_anyway() -> None:
    for mt in ("qwen2", "qwen3", "qwen3_moe"):
        v = view({**LLAMA, "eagle_config": {IDS: [1, 15, 28]}}, mt, 36, trained_states=[2, 16, 29])
        assert v.hidden_state_indices is None and v.target_refusal is None and v.target_eagle3 is False
        assert any("captures nothing" in p and "logits_processor.py:689-712" in p for p in v.problems)
        assert v.capture_setting is None and v.capture_impossible and "captures nothing" in v.capture_impossible


def test_an_unregistered_target_is_refused() -> None:
    v = view({**LLAMA, IDS: [1, 15, 28]}, "gemma3_text", 26)
    assert v.target_refusal and "registry.py:48-60" in v.target_refusal and v.hidden_state_indices is None


def test_llama_draft_sizes_fc_from_top_level_ids_and_hidden_size() -> None:
    nested = view({**LLAMA, "num_aux_hidden_states": 4, "eagle_config": {IDS: [1, 8, 15, 28]}})
    assert (nested.num_aux_hidden_states, nested.hidden_state_indices) == (3, [2, 9, 16, 29])  # fc 3H, fed 4H
    assert view({**LLAMA, IDS: [1, 8, 15, 28]}).num_aux_hidden_states == 4
    flags = {**LLAMA, "fc_norm": False, "use_aux_norm": True, "eagle_config": {"norm_before_fc": True}}
    v = view(flags)
    assert (v.fc_norm, v.norm_before_fc, v.norm_output, v.bias_is) == (False, False, False, "none")
    wide = {f.tensor: f for f in view({**LLAMA, "target_hidden_size": 128}).tensor_fates}
    assert wide["fc.weight"].fate == "refused" and "linear.py:465" in wide["fc.weight"].why
    assert {f.tensor: f.fate for f in v.tensor_fates}["fc.bias"] == "dropped"
    assert any("ValueError" in p for p in view({**LLAMA, "num_hidden_layers": 2}).problems)


def test_mla_draft_reads_eagle_config_first_for_k() -> None:
    assert view({**MLA, IDS: [1, 2], "eagle_config": {}}, "deepseek_v3", 61).num_aux_hidden_states == 3
    assert view({**MLA, IDS: [1, 2]}, "deepseek_v3", 61).num_aux_hidden_states == 2
    assert view({**MLA, "eagle_config": {IDS: [1, 2, 3, 4]}}, "deepseek_v3", 61).num_aux_hidden_states == 4


def test_draft_routing_walks_architectures_after_the_nextn_rewrite() -> None:
    assert ts.draft_class({"architectures": ["Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3"]})[0] is ts.LLAMA_EAGLE3
    cls, why = ts.draft_class({"architectures": ["DeepseekV3ForCausalLM"]})
    assert cls is None and "DeepseekV3ForCausalLMNextN" in why and "MTP" in why
    cls, why = ts.draft_class({"architectures": ["LlamaForCausalLM"]})
    assert cls is None and "LlamaForCausalLMNextN" in why and "ValueError" in why


def test_the_advice_is_the_server_argument_that_feeds_the_trained_states() -> None:
    v = view({**LLAMA, IDS: [1, 15, 31]}, trained_states=[2, 16, 32])
    assert v.capture_setting == {KEY: [1, 15, 32]}
    assert view({**LLAMA, IDS: [1, 15, 28]}, trained_states=[2, 16, 29]).capture_setting is None
    assert view({**LLAMA, IDS: [1, 15, 28]}, trained_states=[29, 2, 16]).capture_impossible


# ---- the CLI on the real configs --------------------------------------------------------------------------------

PATHS = real_config_paths()
SERVED = {"llama", "gpt_oss", "deepseek_v3", "kimi_k2", "kimi_k25", "qwen3_5_moe", "longcat_flash", "kimi_k3"}
ARCH = {
    "llama": "LlamaForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "kimi_k2": "DeepseekV3ForCausalLM",
    "kimi_k25": "KimiK25ForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "longcat_flash": "LongcatFlashForCausalLM",
    "kimi_k3": "KimiK3ForConditionalGeneration",
}


def _target(path: Path) -> tuple[str | None, int | None]:
    return ("kimi_k3", None) if "kimi_k3" in path.name.lower() else target_of(path.name)


SERVED_PATHS = [p for p in PATHS if _target(p)[0] in SERVED]


def test_the_served_real_configs_cover_every_capture_kind() -> None:
    kinds = {ts.CAPTURES[_target(p)[0] or ""].rule for p in SERVED_PATHS}
    assert {"+1 (id N: hs[N]; id N-1: none)", "+1", "as-is (sorted, unique, 1..N)"} <= kinds
    assert len(SERVED_PATHS) >= 30


@pytest.mark.slow
@pytest.mark.parametrize("path", SERVED_PATHS, ids=[p.name for p in SERVED_PATHS])
def test_inspect_gives_tokenspeed_s_fed_states_with_citations(tmp_path: Path, path: Path) -> None:
    mt, n = _target(path)
    raw = json.loads(path.read_text())
    want = tokenspeed_capture(raw, mt, n)
    if n is None and want is None:
        pytest.skip("no ids and a target of unknown depth: TokenSpeed's defaults need N")
    draft = write_real_checkpoint(path, tmp_path / "draft")
    target = tmp_path / "target"
    target.mkdir()
    # a target of unknown depth: a deep one (the states of explicit ids under these rules do not depend on N)
    config = {"model_type": mt, "architectures": [ARCH[mt or ""]], "num_hidden_layers": n or 200, "hidden_size": 8}
    (target / "config.json").write_text(json.dumps(config))
    proc = run_cli("inspect", str(draft), "--engine", "tokenspeed", "--target", str(target), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.validate(report, json.loads((SCHEMAS / "inspect-report.schema.json").read_text(encoding="utf-8")))
    entry = report["aux_layers"]["engines"][TS]
    assert entry["engine"] == "tokenspeed" and entry["hidden_state_indices"] == want
    cites = entry["citations"]
    assert cites["ids_from"].startswith("tokenspeed/runtime/execution/factory.py:")
    assert "tokenspeed/runtime/models/" in cites["target_class"]
    if entry["hidden_state_indices"] is not None:
        assert cites["hidden_state_indices"].startswith("tokenspeed/runtime/models/")


# ---- against the wheel ------------------------------------------------------------------------------------------


def _wheel() -> zipfile.ZipFile | None:
    given = os.environ.get("EAGLE_CONVERT_TOKENSPEED_WHEEL")
    path = Path(given) if given else ROOT / ".cache" / "tokenspeed-0.1.1-py3-none-any.whl"
    return zipfile.ZipFile(path) if path.is_file() else None


WHEEL = _wheel()
_IN_CI = os.environ.get("CI") == "true"  # scripts/test downloads the wheel in CI: there the checks must run
needs_wheel = pytest.mark.skipif(
    WHEEL is None and not _IN_CI,
    reason="the tokenspeed 0.1.1 wheel is not here: `pip download --no-deps tokenspeed==0.1.1 -d .cache` (or set "
    "EAGLE_CONVERT_TOKENSPEED_WHEEL)",
)


def _source(file: str) -> list[str]:
    if WHEEL is None:  # only in CI, where a missing wheel fails the checks instead of skipping them
        pytest.fail("CI must check the tokenspeed record against its wheel, but .cache/ has no tokenspeed 0.1.1")
    return WHEEL.read(file).decode("utf-8").splitlines()


def _cites() -> list[tuple[str, int]]:
    """Every (file, line) a TokenSpeed citation names, the files named inside its lines included."""
    texts = [str(b.cite) for b in ts.TOKENSPEED_0_1_1.behaviours]
    texts += [v.why for raw in (LLAMA, {**LLAMA, "target_hidden_size": 128}, MLA) for v in view(raw).tensor_fates]
    texts += [ts.NO_CAPTURE_FEEDS, ts.TARGET_CLASSES.fallback_cite.__str__(), str(ts.SETTING_CITE)]
    out = []
    for text in texts:
        for file, lines in re.findall(r"(tokenspeed/runtime/[\w/]+\.py):([\d ,()\-:;a-zA-Z_/.\[\]]+)", text):
            head = lines.split("(")[0]
            out += [(file, int(x)) for x in re.findall(r"\d+", head)]
            for inner, rest in re.findall(r"([\w/]+\.py):([\d ,-]+)", lines):
                path = inner if inner.startswith("tokenspeed/") else f"tokenspeed/runtime/{inner}"
                out += [(path, int(x)) for x in re.findall(r"\d+", rest)]
    return out


@needs_wheel
def test_every_citation_names_a_line_of_the_wheel() -> None:
    cites = _cites()
    assert len(cites) > 100
    for file, line in cites:
        assert 1 <= line <= len(_source(file)), (file, line)


ANCHORS = [  # a cited line and what the wheel has there
    ("execution/factory.py", 47, "def _eagle_aux_layer_ids"),
    ("execution/factory.py", 197, "server_args.eagle3_layers_to_capture or _eagle_aux_layer_ids"),
    ("models/base/causal_lm.py", 271, "def set_eagle3_layers_to_capture"),
    ("models/base/causal_lm.py", 282, "self.model.layers_to_capture = [val + 1 for val in layer_ids]"),
    ("models/base/transformer_model.py", 211, "capture = i in self.layers_to_capture"),
    ("models/base/transformer_model.py", 247, "len(self.layers) + 1 in self.layers_to_capture"),
    ("models/deepseek_v3.py", 2080, "self.model.layers_to_capture = {val + 1 for val in layer_ids}"),
    ("models/deepseek_v3.py", 1997, "i in self.layers_to_capture"),
    ("models/kimi_k3.py", 3647, "if selected != sorted(selected) or len(set(selected)) != len(selected):"),
    ("models/kimi_k3.py", 3538, "layer_idx + 1 in self.eagle3_layers_to_capture"),
    ("models/kimi_k25.py", 81, "self.language_model = DeepseekV3ForCausalLM("),
    ("models/qwen3.py", 389, "return hidden_states, None"),
    ("models/qwen3_moe.py", 195, "return hidden_states, None"),
    ("models/qwen2.py", 367, "return hidden_states, None"),
    ("models/qwen3_5.py", 1024, "layer_idx in self.layers_to_capture"),
    ("models/longcat_flash.py", 1005, "self.model.layers_to_capture = {val + 1 for val in layer_ids}"),
    ("models/llama_eagle3.py", 414, "len(config.eagle_aux_hidden_state_layer_ids)"),
    ("models/llama_eagle3.py", 420, "config.hidden_size * self.num_fc_input_dim"),
    ("models/llama_eagle3.py", 437, 'getattr(config, "norm_before_fc", False)'),
    ("models/llama_eagle3.py", 447, 'getattr(config, "fc_norm", False)'),
    ("models/llama_eagle3.py", 489, "if hidden_states.size(-1) != embeds.size(-1):"),
    ("models/llama_eagle3.py", 561, "if self.config.num_hidden_layers != 1:"),
    ("models/llama_eagle3.py", 648, 'if "d2t" in name:'),
    ("models/llama_eagle3.py", 716, "EntryClass = [LlamaForCausalLMEagle3]"),
    ("models/deepseek_v3.py", 2525, "fc_input_size = target_hidden_size * self.num_fc_input_dim"),
    ("models/deepseek_v3.py", 2662, "if self.config.num_hidden_layers != 1:"),
    ("models/registry.py", 57, "raise ValueError("),
    ("utils/hf_transformers_utils.py", 475, 'config.architectures[0] += "NextN"'),
    ("layers/linear.py", 465, "assert param_data.shape == loaded_weight.shape"),
    ("layers/logits_processor.py", 700, "hidden_states_to_store = hidden_states"),
]


@needs_wheel
@pytest.mark.parametrize(("file", "line", "text"), ANCHORS, ids=[f"{f}:{n}" for f, n, _ in ANCHORS])
def test_the_cited_lines_say_what_the_record_says(file: str, line: int, text: str) -> None:
    assert text in _source(f"tokenspeed/runtime/{file}")[line - 1]


# TokenSpeed's own functions, taken from the wheel's source and run on stand-ins for the torch objects: the id
# reading, set_eagle3_layers_to_capture of the base class and of DeepseekV3ForCausalLM, and the base loop.


def _function(file: str, cls: str | None, name: str) -> Any:
    tree = ast.parse("\n".join(_source(f"tokenspeed/runtime/{file}")))
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    namespace: dict[str, Any] = {"torch": _Torch, "CompiledDecoderLayer": _Never, "BaseDecoderLayer": _Never}
    exec(compile(ast.Module([node], []), file, "exec"), namespace)  # the wheel's own code, on purpose
    return namespace[name]


class _Never:  # a class no stand-in is an instance of
    pass


class _State(int):
    """hs[i] as the int i: a layer turns hs[i] into hs[i + 1]; the residual stand-in adds nothing."""

    def clone(self) -> _State:
        return self


class _Torch:
    @staticmethod
    def zeros_like(x: Any) -> int:
        return 0


class _Layer:
    def __call__(self, positions: Any, hidden: _State, ctx: Any, residual: Any, aux_hidden_states: Any = None) -> Any:
        if aux_hidden_states is not None:  # decoder_layer.py:139-145: the residual entering the layer
            aux_hidden_states.append(_State(hidden))
        return _State(hidden + 1), _State(0)


class _Ctx:
    target_capture_sink = None

    class forward_mode:  # the attribute's name in TokenSpeed
        @staticmethod
        def is_idle() -> bool:
            return False


class _Model:
    def __init__(self, n: int) -> None:
        self.layers = [_Layer() for _ in range(n)]
        self.layers_to_capture: list[int] = []
        self.embed_tokens = lambda ids, reduce_results=True: _State(0)
        self._final_norm_op = lambda hidden, residual, ctx: (hidden, _State(hidden))  # final residual: hs[N]


class _CausalLM:
    def __init__(self, n: int) -> None:
        self.model = _Model(n)
        self.config = type("Config", (), {"num_hidden_layers": n})()


def _base_capture(ids: list[int] | None, n: int) -> list[int]:
    lm = _CausalLM(n)
    _function("models/base/causal_lm.py", "BaseCausalLM", "set_eagle3_layers_to_capture")(lm, ids)
    forward = _function("models/base/transformer_model.py", "BaseTransformerModel", "forward")
    _, aux = forward(lm.model, [0], None, _Ctx())
    return sorted(int(s) for s in aux or [])


def _deepseek_capture(ids: list[int] | None, n: int) -> list[int]:
    lm = _CausalLM(n)
    _function("models/deepseek_v3.py", "DeepseekV3ForCausalLM", "set_eagle3_layers_to_capture")(lm, ids)
    return sorted(i for i in range(n) if i in lm.model.layers_to_capture)  # deepseek_v3.py:1996-2010: hs[i]


class _Config(dict):  # type: ignore[type-arg]
    """A transformers config as TokenSpeed sees it: the keys as attributes (getattr), a nested dict as a dict."""

    def __getattr__(self, key: str) -> Any:
        if key in self:
            return self[key]
        raise AttributeError(key)


@needs_wheel
@pytest.mark.parametrize("path", PATHS, ids=[f"{p.parent.name}/{p.name}" for p in PATHS])
def test_the_record_reads_ids_as_tokenspeed_s_own_function_does(path: Path) -> None:
    raw = json.loads(path.read_text())
    read = _function("execution/factory.py", None, "_eagle_aux_layer_ids")
    as_dict = read(raw)
    text = raw.get("text_config")
    as_object = read(_Config({**raw, "text_config": _Config(text)} if isinstance(text, dict) else raw))
    assert as_dict == as_object == view(raw).ids


SYNTHETIC_IDS = [None, [1, 15, 28], [0, 7, 20], [2, 16, 30], [1, 15, 31], [1, 15, 32], [29, 2, 16], [5, 5, 9]]


@needs_wheel
@pytest.mark.parametrize("ids", SYNTHETIC_IDS, ids=str)
def test_the_record_captures_as_tokenspeed_s_own_code_does(ids: list[int] | None) -> None:
    raw = {**LLAMA, "eagle_config": {IDS: ids}} if ids is not None else LLAMA
    assert view(raw, "llama", 32).hidden_state_indices == _base_capture(ids, 32)
    deepseek = view(raw, "deepseek_v3", 32)
    captured = _deepseek_capture(ids, 32)
    assert [j for j in deepseek.hidden_state_indices or [] if j < 32] == captured
    assert bool([j for j in deepseek.hidden_state_indices or [] if j >= 32]) == any(
        "never reached" in p for p in deepseek.problems
    )


@needs_wheel
@pytest.mark.parametrize("path", SERVED_PATHS, ids=[p.name for p in SERVED_PATHS])
def test_real_configs_capture_as_tokenspeed_s_own_code_does(path: Path) -> None:
    raw = json.loads(path.read_text())
    mt, n = _target(path)
    if n is None or mt == "kimi_k3":
        pytest.skip("the target's depth is not known: only explicit ids are compared (above)")
    ids = view(raw, mt, n).ids
    own = _base_capture(ids, n) if mt in ("llama", "gpt_oss") else _deepseek_capture(ids, n)
    assert [j for j in view(raw, mt, n).hidden_state_indices or [] if j <= n] == own
    assert RELEASES[TS].capture(mt) is not None

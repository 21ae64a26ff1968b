"""SGLang releases, read from the released wheels (``pip download --no-deps sglang==X``; paths under ``sglang/srt/``).

Modelled: 0.5.23 (newest) and 0.5.16, the last release before 0.5.17 changed two verdict-flipping behaviours: GPT-OSS
targets keep ids whose largest value is N (``models/gpt_oss.py``), and the Llama-style draft reads
``eagle_config.norm_before_fc`` (before 0.5.17 the MHA draft class has no ``input_norm`` at all).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from typing import Any

from eagle_convert.releases import rope, target_classes
from eagle_convert.releases.model import (
    IDS_KEY,
    Behaviour,
    Capture,
    Cite,
    DraftClass,
    Release,
    TargetClasses,
    TensorFate,
    ids_at,
    int_list,
)

WHEEL = "pip download --no-deps sglang=={v}; paths under sglang/srt/"
# How a deployment serves a target with an EAGLE3 draft (server_args.py: --speculative-* options); the model card
# shows it with k = steps draft tokens per cycle.
LAUNCH = (
    "python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 \\\n"
    "    --speculative-draft-model-path {draft} --speculative-num-steps {steps} \\\n"
    "    --speculative-eagle-topk 1 --speculative-num-draft-tokens {tokens}"
)


def _c(file: str, lines: str) -> Cite:
    return Cite(f"sglang/srt/{file}", lines)


# ---- where the ids come from (the target worker, not the draft) -------------------------------------------------


def _ids_reader(cite: Cite):  # type: ignore[no-untyped-def]
    def read(raw: Mapping[str, Any], _target_model_type: str | None) -> tuple[str, list[int] | None, Cite]:
        # eagle_config["eagle_aux_hidden_state_layer_ids"] and nothing else; any exception -> None -> the defaults.
        # An empty list is not None: it is passed on and captures nothing.
        nested = ids_at(raw, "eagle_config", IDS_KEY)
        ids = int_list(nested)
        if ids is None:
            return "defaults", None, cite
        return "eagle_config", ids, cite

    return read


# ---- per target class: how ids become captured states -----------------------------------------------------------

_PLUS1 = "+1"
_FIRST1 = "+1 if first id is 1"


def _put(t: dict[str, Capture], types: str, rule: str, file: str, lines: str, n: bool = False, **kw: Any) -> None:
    """One row of a capture table: the same rule for every model_type in ``types`` (``n``: hs[N] is reachable)."""
    for mt in types.split():
        t[mt] = Capture(rule, n, _c(file if "/" in file else f"models/{file}", lines), **kw)


def _captures_0_5_23() -> dict[str, Capture]:
    t: dict[str, Capture] = {}
    put = partial(_put, t)
    put("llama mistral ministral phi3", _PLUS1, "llama.py", "929-941 (Phi3ForCausalLM: 956)")
    put("llama4 llama4_text", _PLUS1, "mllama4.py", "971-973")  # delegates to the Llama language model
    put("qwen2", _PLUS1, "qwen2.py", "781-794")
    put("qwen2_moe", _PLUS1, "qwen2_moe.py", "1418-1433")
    put("qwen3", _PLUS1, "qwen3.py", "778-791")
    # the MoE models' capture indexes self.layers[i]: a state past the last layer raises IndexError (run: the SGLang
    # conformance test's Qwen3-MoE target)
    put("qwen3_moe", _PLUS1, "qwen3_moe.py", "1128-1143", past_end_raises=_c("models/qwen2_moe.py", "1153-1156"))
    put("qwen3_next", _PLUS1, "qwen3_next.py", "1286-1301")
    put("qwen3_vl qwen3_vl_moe", _PLUS1, "qwen3_vl.py", "1777-1795")
    put("qwen2_5_vl", _PLUS1, "qwen2_5_vl.py", "990-1001")
    put("qwen3_5 qwen3_5_text qwen3_5_moe qwen3_5_moe_text", _PLUS1, "qwen3_5_text.py", "150-159")
    put("glm4_moe", _PLUS1, "glm4_moe.py", "1269-1281")
    put("glm5_next", _PLUS1, "glm5_next.py", "1533-1543")
    put("minimax_m2", _PLUS1, "minimax_m2.py", "1067-1080")
    put("bailing_moe", _PLUS1, "bailing_moe.py", "1098-1109")
    put("longcat_flash", _PLUS1, "longcat_flash.py", "1112-1119")
    put("exaone_moe", _PLUS1, "exaone_moe.py", "866-879")
    put("apertus", _PLUS1, "apertus.py", "675-687")
    put("gemma3 gemma3_text", _PLUS1, "gemma3_causal.py", "917-926 (hs[N]: 668-672)", n=True)
    put("gemma4 gemma4_text", _PLUS1, "gemma4_causal.py", "1495-1504 (hs[N]: 1093)", n=True)
    put("deepseek_v2 deepseek_v3 deepseek_v32", _FIRST1, "deepseek_v2.py", "3458-3473", exact_count=True)
    put("kimi_k2 kimi_k25", _FIRST1, "deepseek_v2.py", "3458-3473 (kimi_k25.py:928-939)", exact_count=True)
    put("glm_moe_dsa", _FIRST1, "deepseek_v2.py", "3458-3473 (glm4_moe.py:1284)", exact_count=True)
    put("glm4_moe_lite", _FIRST1, "glm4_moe_lite.py", "805-820")
    put("gpt_oss", "as-is if max id == N else +1", "gpt_oss.py", "1337-1352 (hs[N]: 725-738)", n=True)
    put("minimax_m3", _PLUS1, "minimax_m3.py", "2056-2070 (hs[N]: 1962)", n=True)
    put("minimax_m3_vl", _PLUS1, "minimax_m3_vl.py", "246-263", defaults_shift=1)
    return t  # target classes without capture (gemma2, kimi_vl, step3p5, ...): _target_classes


def _captures_0_5_16() -> dict[str, Capture]:
    """0.5.16's target classes, with 0.5.16's own lines (glm5_next and qwen3_5 do not exist yet)."""
    t: dict[str, Capture] = {}
    put = partial(_put, t)
    put("llama mistral ministral phi3", _PLUS1, "llama.py", "808-821")
    put("llama4 llama4_text", _PLUS1, "mllama4.py", "985-988")
    put("qwen2", _PLUS1, "qwen2.py", "655-670")
    put("qwen2_moe", _PLUS1, "qwen2_moe.py", "1188-1203")
    put("qwen3", _PLUS1, "qwen3.py", "688-702")
    put("qwen3_moe", _PLUS1, "qwen3_moe.py", "1068-1084", past_end_raises=_c("models/qwen2_moe.py", "876-879"))
    put("qwen3_next", _PLUS1, "qwen3_next.py", "1266-1281")
    put("qwen3_vl qwen3_vl_moe", _PLUS1, "qwen3_vl.py", "1537-1550")
    put("qwen2_5_vl", _PLUS1, "qwen2_5_vl.py", "897-910")
    put("glm4_moe", _PLUS1, "glm4_moe.py", "1451-1465")
    put("minimax_m2", _PLUS1, "minimax_m2.py", "1248-1262")
    put("minimax_m3", _PLUS1, "minimax_m3.py", "1491-1505")
    put("bailing_moe", _PLUS1, "bailing_moe.py", "1026-1039")
    put("longcat_flash", _PLUS1, "longcat_flash.py", "1126-1135")
    put("exaone_moe", _PLUS1, "exaone_moe.py", "859-874")
    put("apertus", _PLUS1, "apertus.py", "666-680")
    put("gemma3 gemma3_text", _PLUS1, "gemma3_causal.py", "903-913 (hs[N]: 656-659)", n=True)
    put("gemma4 gemma4_text", _PLUS1, "gemma4_causal.py", "1407-1418 (hs[N]: 1015)", n=True)
    put("deepseek_v2 deepseek_v3 deepseek_v32", _FIRST1, "deepseek_v2.py", "2915-2931")
    put("kimi_k2 kimi_k25", _FIRST1, "deepseek_v2.py", "2915-2931 (kimi_k25.py:921-933)")
    put("glm_moe_dsa", _FIRST1, "deepseek_v2.py", "2915-2931")
    put("glm4_moe_lite", _FIRST1, "glm4_moe_lite.py", "1015-1031")
    put("gpt_oss", _PLUS1, "gpt_oss.py", "1284-1297 (the loop at 689-697 stops before hs[N])")
    return t


_CAPTURES_0_5_23 = _captures_0_5_23()
_CAPTURES_0_5_16 = _captures_0_5_16()


# ---- which target classes capture at all ------------------------------------------------------------------------


def _target_classes(version: str) -> TargetClasses:
    """The registered architectures whose class (or a base) defines set_eagle3_layers_to_capture, read from the
    wheel (releases/target_classes.py). Start-up calls it on the target whenever aux capture is on, and any other
    class fails there; an architecture SGLang does not register falls back to the Transformers backend, which does
    not define it either."""
    new = version != "0.5.16"
    setup = "model_executor/model_runner_components/attention_backend_setup.py"
    return TargetClasses(
        eagle3={arch: _c(*where.rsplit(":", 1)) for arch, where in target_classes.EAGLE3[f"sglang {version}"].items()},
        without=None,
        refusal=_c(setup, "54-60 (ValueError)" if new else "53-54 (called without a hasattr check: AttributeError)"),
        fallback="the Transformers backend (TransformersForCausalLM)",
        fallback_eagle3=False,
        fallback_cite=_c(
            "model_loader/utils.py",
            "224-231, models/registry.py:88-90, models/transformers.py:1612"
            if new
            else "216-222, models/registry.py:75-77, models/transformers.py:1565",
        ),
        registered=target_classes.REGISTERED[f"sglang {version}"],
    )


def _capture_of_class(captures: dict[str, Capture]):  # type: ignore[no-untyped-def]
    """The capture row whose cited lines start at ``cite``, the set_eagle3_layers_to_capture a target class gets
    (a Mistral target runs llama.py's): the rule of a class whose model_type has no row of its own."""

    def find(cite: Cite) -> Capture | None:
        for capture in captures.values():
            if capture.cite.file == cite.file and capture.cite.lines.split("-")[0].split(" ")[0] == cite.lines:
                return capture
        return None

    return find


def _aux_capture(ids_cite: Cite):  # type: ignore[no-untyped-def]
    def read(raw: Mapping[str, Any], _target_model_type: str | None) -> tuple[bool | None, Cite]:
        return target_captures(raw), ids_cite  # eagle_config.get("use_aux_hidden_state", True), any draft class

    return read


def _tensor_fates(version: str):  # type: ignore[no-untyped-def]
    new = version != "0.5.16"
    llama, mla = "models/llama_eagle3.py", "models/kimi_k25_eagle3.py"

    def fates(raw: Mapping[str, Any], cls: str | None, _target_vocab: int | None) -> tuple[TensorFate, ...]:
        if cls is None:
            return ()
        if cls.startswith("kimi_k25_eagle3"):
            d2t, t2d, fc = (
                f"{mla}:{a}" for a in (("437-441", "442-443", "286") if new else ("434-438", "439-440", "285"))
            )
        else:
            d2t, t2d, fc = (
                f"{llama}:{a}"
                for a in (("350-353", "355-356", "238-247") if new else ("322-325", "327-328", "214-221"))
            )
        out = [
            TensorFate(
                "d2t", "loaded", f"as hot_token_id = d2t + arange, whatever the vocabulary sizes (sglang/srt/{d2t})"
            ),
            TensorFate("t2d", "dropped", f"skipped: only d2t is used at inference (sglang/srt/{t2d})"),
        ]
        if not cls.startswith("kimi_k25_eagle3"):
            if raw.get("tie_word_embeddings") is True:
                # lm_head is tied to the draft's embed_tokens, which the EAGLE worker replaces by the target's
                # embedding; the file's lm_head.weight has no parameter left and is skipped without a word
                tie, skip, worker = (
                    ("303-304", "372-378", "speculative/eagle_worker_v2.py:336-363")
                    if new
                    else ("275-276", "342-350", "speculative/eagle_worker_v2.py:307-308")
                )
                out.append(
                    TensorFate(
                        "lm_head.weight",
                        "dropped",
                        f"tie_word_embeddings true ties lm_head to embed_tokens (sglang/srt/{llama}:{tie}), which "
                        f"becomes the target's embedding (sglang/srt/{worker}); the file's lm_head.weight is skipped "
                        f"(sglang/srt/{llama}:{skip}): the draft predicts through the target's embedding",
                    )
                )
            if not new:
                out.append(
                    TensorFate(
                        "input_norm.weight",
                        "dropped",
                        f"0.5.16's Llama draft class has no input_norm (sglang/srt/{llama}:143-173): skipped "
                        f"(sglang/srt/{llama}:342-350)",
                    )
                )
        if not target_captures(raw):
            out.append(
                TensorFate(
                    "fc.weight",
                    "loaded",
                    "built and loaded, but applied only when the fed state's width differs from hidden_size; with "
                    f"aux capture off the target's last hidden state is fed (sglang/srt/{fc})",
                )
            )
        return tuple(out)

    return fates


# ---- draft classes -----------------------------------------------------------------------------------------------


def _truthy(raw: Mapping[str, Any], key: str) -> bool:
    return bool(raw.get(key))


def _fc_norm(raw: Mapping[str, Any]) -> bool:
    # getattr(config, "fc_norm", None) or getattr(config, "use_aux_norm", False): fc_norm false + use_aux_norm true
    # turns the norms on.
    return bool(raw.get("fc_norm") or raw.get("use_aux_norm"))


def _nbf_nested_first(raw: Mapping[str, Any]) -> bool:
    nested = ids_at(raw, "eagle_config", "norm_before_fc")
    return bool(nested) if nested is not None else bool(raw.get("norm_before_fc"))


def _use_aux(raw: Mapping[str, Any]) -> bool:
    value = ids_at(raw, "eagle_config", "use_aux_hidden_state")
    return True if value is None else bool(value)


def target_captures(raw: Mapping[str, Any]) -> bool:
    """The target worker captures only when eagle_config.use_aux_hidden_state is not false (read at
    spec_aux_hidden_state.py:189-191, whatever the draft class)."""
    return _use_aux(raw)


def _k_llama(raw: Mapping[str, Any]) -> tuple[int, str]:
    declared = raw.get("num_aux_hidden_states")
    if isinstance(declared, int) and not isinstance(declared, bool):
        return declared, "num_aux_hidden_states"
    ids = int_list(ids_at(raw, "eagle_config", IDS_KEY))
    return (len(ids), "len(eagle_config ids)") if ids else (3, "default 3")


def _k_mla(raw: Mapping[str, Any]) -> tuple[int, str]:
    nested = ids_at(raw, "eagle_config", IDS_KEY)
    if isinstance(nested, list):
        return len(nested), "len(eagle_config ids)"
    top = raw.get(IDS_KEY)
    if isinstance(top, list):
        return len(top), "len(top-level ids)"
    return 3, "default 3"


def _llama_class(version: str) -> DraftClass:
    new = version != "0.5.16"
    lines = {
        "k": "156-161" if new else "148-153",
        "fc_norm": "185-187" if new else "162-164",
        "nbf": "169-175" if new else "143-173 (fc set-up without input_norm)",
        "norm_output": "207" if new else "183",
        "legacy": "338-348" if new else "310-314",
        "unknown": "370-378" if new else "342-350",
    }
    f = "models/llama_eagle3.py"
    return DraftClass(
        name="llama_eagle3.LlamaForCausalLMEagle3",
        attention="mha",
        fc_norm=_fc_norm,
        norm_output=lambda raw: _truthy(raw, "norm_output"),
        norm_before_fc=_nbf_nested_first if new else (lambda raw: None),
        norm_before_residual=lambda raw: False,
        use_aux_hidden_state=_use_aux,
        num_aux=_k_llama,
        qk_norm=False,
        unknown_tensors="dropped",
        legacy_aux_norm_names=True,
        required_keys=("draft_vocab_size",),
        reads_use_aux_norm=True,
        reads_norm_before_residual=False,
        null_draft_vocab_size="uses the target's lm_head and ignores any draft head",
        embed_tokens="replaced by the target's",
        cites=(
            Behaviour("K", "num_aux_hidden_states, else len(eagle_config ids), else 3", _c(f, lines["k"])),
            Behaviour("fc_norm", "fc_norm or use_aux_norm (either true turns the norms on)", _c(f, lines["fc_norm"])),
            Behaviour(
                "norm_before_fc",
                "eagle_config.norm_before_fc, else the top level" if new else "never read: no input_norm",
                _c(f, lines["nbf"]),
            ),
            Behaviour("norm_output", "top-level norm_output", _c(f, lines["norm_output"])),
            Behaviour(
                "norm_before_residual", "not read (residual = hidden_states)", _c(f, "97-102" if new else "89-94")
            ),
            Behaviour(
                "legacy-names", "midlayer->layers.0, aux_norm_low/mid/high->fc_norm.0/1/2", _c(f, lines["legacy"])
            ),
            Behaviour("unknown-tensors", "names with no parameter are skipped silently", _c(f, lines["unknown"])),
            Behaviour("bias", "the top-level bias key is fc's bias", _c(f, "166" if new else "158")),
            Behaviour(
                "draft_vocab_size",
                "read as an attribute (missing: the load fails); null -> the target's head",
                _c(f, "306-308" if new else "278-280"),
            ),
            *(
                (
                    Behaviour(
                        "target_hidden_size", "read as a width: null fails the load (None * K)", _c(f, "151-164")
                    ),
                    Behaviour(
                        "embed_tokens",
                        "a shipped embed_tokens is replaced by the target's unless target_hidden_size differs",
                        _c("models/llama.py", "910-916 (speculative/eagle_worker_v2.py:336-363)"),
                    ),
                )
                if new
                else ()  # 0.5.16: the same behaviour, lines not re-read
            ),
        ),
    )


def _mla_class(version: str) -> DraftClass:
    new = version != "0.5.16"
    f = "models/kimi_k25_eagle3.py"
    return DraftClass(
        name="kimi_k25_eagle3.Eagle3DeepseekV2ForCausalLM",
        attention="mla",
        fc_norm=_fc_norm,
        norm_output=lambda raw: _truthy(raw, "norm_output"),
        norm_before_fc=lambda raw: None,
        norm_before_residual=lambda raw: False,
        use_aux_hidden_state=_use_aux,
        num_aux=_k_mla,
        qk_norm=False,
        unknown_tensors="dropped",
        legacy_aux_norm_names=False,
        reads_use_aux_norm=True,
        reads_norm_before_residual=False,
        null_target_hidden_size="hidden_size",
        embed_tokens="replaced by the target's",
        cites=(
            Behaviour(
                "K", "len(eagle_config ids), else len(top-level ids), else 3", _c(f, "48-59" if new else "47-58")
            ),
            Behaviour("fc_norm", "fc_norm or use_aux_norm", _c(f, "230-232" if new else "229-231")),
            Behaviour("norm_output", "top-level norm_output", _c(f, "255" if new else "254")),
            Behaviour("unknown-tensors", "skipped with a warning", _c(f, "495" if new else "492")),
            *(
                (
                    Behaviour(
                        "target_hidden_size", "getattr(...) or hidden_size: null reads as hidden_size", _c(f, "208-210")
                    ),
                    Behaviour(
                        "embed_tokens",
                        "a shipped embed_tokens is replaced by the target's unless target_hidden_size differs",
                        _c(f, "404-411"),
                    ),
                )
                if new
                else ()  # 0.5.16: the same behaviour, lines not re-read
            ),
        ),
    )


# Draft architecture names trainers now write that no SGLang release registers, and what each one is.
_UNREGISTERED = {
    "GptOssForCausalLMEagle3": "a SpecForge draft class (the Llama draft with GPT-OSS's MoE MLP)",
    "Glm4MoeForCausalLMEagle3": "TorchSpec's GLM-4-MoE draft class (the Llama draft with a DeepSeek-V3 MoE block)",
    "Eagle3DeepseekV3ForCausalLM": "another engine's alias of its MLA draft class; SGLang's MLA class is "
    "Eagle3DeepseekV2ForCausalLM",
    "DeepSeekForCausalLMEagle3": "a trainer's deferred DeepSeek draft name, registered nowhere",
    "LlamaForCausalLMEagle3Gated": "TorchSpec's depth-gated Llama draft (shared, depth-0 and depth-N MLPs)",
    "Eagle3LlamaForCausalLM": "AngelSlim's name for the Llama draft (another engine's class); SGLang's is "
    "LlamaForCausalLMEagle3",
}


def _draft_router(version: str):  # type: ignore[no-untyped-def]
    llama, mla = _CLASSES[version]
    classes = {"LlamaForCausalLMEagle3": llama, "Eagle3DeepseekV2ForCausalLM": mla}
    new = version != "0.5.16"
    nextn = _c("configs/model_config.py", "1032-1036" if new else "555-559")
    # Only LlamaForCausalLMEagle3 and Eagle3DeepseekV2ForCausalLM are EAGLE3 draft EntryClasses (llama_eagle3.py:387,
    # kimi_k25_eagle3.py:523; 0.5.16: :359, :520). Any other name is not native, so SGLang falls back to the
    # Transformers backend (model_loader/utils.py:224-231; 0.5.16: 216-222), which has no such class either: it
    # raises ValueError "Cannot find model module" at start-up.
    fallback = _c("model_loader/utils.py", "154-167" if new else "151-164")

    def route(raw: Mapping[str, Any]) -> tuple[DraftClass | None, str]:
        archs = raw.get("architectures")
        names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
        for arch in names[:1]:  # SGLang builds architectures[0]
            if arch in classes:
                return classes[arch], f"architectures[0] {arch} (EntryClass)"
            if arch in ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"):
                return None, f"{arch} is rewritten to DeepseekV3ForCausalLMNextN, an MTP head ({nextn})"
            what = f" ({_UNREGISTERED[arch]})" if arch in _UNREGISTERED else ""
            return None, f"no EAGLE3 draft class is registered as {arch}{what}; start-up fails ({fallback})"
        return None, "no architectures"

    return route


_CLASSES = {v: (_llama_class(v), _mla_class(v)) for v in ("0.5.23", "0.5.16")}

# A target model class name: SGLang's model registry resolves architectures[0] to it and builds the target model as
# the draft (no EAGLE3 class, no aux-state input). Draft classes all carry "Eagle" in their name.
_TARGET_CLASS = re.compile(r"^(?!.*Eagle).*For(CausalLM|CausalLMNextN|ConditionalGeneration)$")


def _target_model_class(version: str):  # type: ignore[no-untyped-def]
    cite = _c("configs/model_config.py", "1032-1036" if version != "0.5.16" else "555-559")

    def built(raw: Mapping[str, Any]) -> str | None:
        archs = raw.get("architectures")
        names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
        if names and all(_TARGET_CLASS.match(a) for a in names):
            return f"it builds architectures[0] {names[0]} as that target model, not an EAGLE3 draft ({cite})"
        return None

    return built


def _caveats(version: str) -> tuple[Behaviour, ...]:
    llama = "models/llama_eagle3.py"
    return (
        Behaviour(
            "layers-prefix",
            "builds before PR #24663 skip layers.0.* decoder names and run a random layer; midlayer.* loads "
            "in every build",
            _c(llama, "338-348 (the midlayer/layers.0 mapping)" if version != "0.5.16" else "310-314"),
        ),
        Behaviour(
            "max-positions",
            "refuses (ValueError) a draft whose context length, from max_position_embeddings, is below the target's "
            "unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (then the draft's is raised to the target's)",
            _c("configs/model_config.py", "1291-1316" if version != "0.5.16" else "729-755"),
        ),
    )


def _release(version: str, captures: dict[str, Capture], ids_cite: Cite, newest: bool, deployed: bool) -> Release:
    def capture(model_type: str | None) -> Capture | None:
        return captures.get(model_type or "")

    new = version != "0.5.16"
    targets = _target_classes(version)
    llama = "models/llama_eagle3.py"
    behaviours = (
        Behaviour("ids-location", "eagle_config.eagle_aux_hidden_state_layer_ids only; missing -> defaults", ids_cite),
        Behaviour("ids-empty", "an empty eagle_config list is passed on and captures nothing", ids_cite),
        Behaviour(
            "target-classes",
            f"{len(targets.eagle3)} of its {targets.registered} registered architectures define (or inherit) "
            "set_eagle3_layers_to_capture (listed in releases/target_classes.py); start-up fails on any other target "
            "class, and an unregistered one falls back to TransformersForCausalLM, which has none",
            targets.refusal,
        ),
        Behaviour(
            "aux-capture-off",
            "eagle_config.use_aux_hidden_state false: the target captures nothing and its class is not checked",
            _c(
                "model_executor/model_runner_components/spec_aux_hidden_state.py",
                "189-191 (attention_backend_setup.py:54)" if new else "86-88 (attention_backend_setup.py:53)",
            ),
        ),
        Behaviour(
            "tensor:d2t",
            "loaded as hot_token_id = d2t + arange, whatever the vocabulary sizes",
            _c(llama, "350-353" if new else "322-325"),
        ),
        Behaviour("tensor:t2d", "skipped", _c(llama, "355-356" if new else "327-328")),
        *(
            Behaviour(f"capture:{mt}", f"{c.rule}" + ("; can capture hs[N]" if c.can_capture_n else ""), c.cite)
            for mt, c in sorted(captures.items())
        ),
        Behaviour(
            "draft-classes",
            "architectures[0] LlamaForCausalLMEagle3 or Eagle3DeepseekV2ForCausalLM (EntryClass); a draft named "
            "DeepseekV3ForCausalLM becomes an MTP head",
            _c("configs/model_config.py", "1032-1036" if version != "0.5.16" else "555-559"),
        ),
        *(
            Behaviour(f"{cls.name.split('.')[-1]}:{b.key}", b.does, b.cite)
            for cls in _CLASSES[version]
            for b in cls.cites
        ),
    )
    return Release(
        name=f"sglang@{version}",
        engine="sglang",
        version=version,
        runner=None,
        summary=(
            "newest modelled SGLang"
            if newest
            else "last release before GPT-OSS 'max id == N' and eagle_config.norm_before_fc (0.5.17)"
        ),
        source=WHEEL.format(v=version),
        read_ids=_ids_reader(ids_cite),
        capture=capture,
        draft_class=_draft_router(version),
        behaviours=(*behaviours, rope.SGLANG[version].behaviour(), *_caveats(version)),
        newest=newest,
        deployed=deployed,
        target_model_class=_target_model_class(version),
        caveats=_caveats(version),
        target_classes=targets,
        aux_capture=_aux_capture(
            _c("model_executor/model_runner_components/spec_aux_hidden_state.py", "189-191" if new else "86-88")
        ),
        capture_of_class=_capture_of_class(captures),
        tensor_fates=_tensor_fates(version),
    )


SGLANG_0_5_23 = _release(
    "0.5.23",
    _CAPTURES_0_5_23,
    _c("model_executor/model_runner_components/spec_aux_hidden_state.py", "185-196"),
    newest=True,
    deployed=True,
)
SGLANG_0_5_16 = _release(
    "0.5.16",
    _CAPTURES_0_5_16,
    _c("model_executor/model_runner_components/spec_aux_hidden_state.py", "80-94"),
    newest=False,
    deployed=True,  # fleets pinned before 0.5.17's two verdict-flipping changes
)
RELEASES = (SGLANG_0_5_23, SGLANG_0_5_16)

"""vLLM's start-up checks and loader, per release: which target classes capture EAGLE3 aux states (``SupportsEagle3``,
read from the wheels into ``releases/target_classes.py``) and what the draft loaders do with d2t, t2d and fc. Paths
under ``vllm/``; used by the release records in ``releases/vllm.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eagle_convert.releases import target_classes
from eagle_convert.releases.model import Cite, TargetClasses, TensorFate, ids_at
from eagle_convert.releases.vllm_axes import PLATFORMS_0_33


def _c(file: str, lines: str) -> Cite:
    return Cite(f"vllm/{file}", lines)


def _use_aux(raw: Mapping[str, Any]) -> bool:
    value = ids_at(raw, "eagle_config", "use_aux_hidden_state")
    return True if value is None else bool(value)


# ---- which target classes capture at all: SupportsEagle3 (model_executor/models/interfaces.py) ---------------------

REFUSAL = {  # start-up raises RuntimeError("Model does not support EAGLE3 interface") when aux capture is on
    "v2": _c("v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "28-29 (v1/worker/gpu/model_runner.py:412-416)"),
    "v1": _c("v1/worker/gpu_model_runner.py", "5173-5177"),
    "default": _c(
        "v1/worker/gpu_model_runner.py", "5591-5595 (V1; V2: v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:18-19)"
    ),
}


def target_classes_of(version: str, runner: str) -> TargetClasses:
    """The registered target architectures whose class has SupportsEagle3 among its bases, read from the wheel
    (releases/target_classes.py); an architecture vLLM does not register is served by the Transformers backend,
    whose classes implement it."""
    key = f"vllm {version}"
    return TargetClasses(
        eagle3={arch: _c(*where.rsplit(":", 1)) for arch, where in target_classes.EAGLE3[key].items()},
        without=frozenset(target_classes.WITHOUT[key]),
        refusal=REFUSAL[runner],
        fallback="the Transformers backend (when transformers implements the class compatibly)",
        fallback_eagle3=True,
        fallback_cite=_c(
            "model_executor/models/registry.py",
            "1443-1472, model_executor/models/transformers/base.py:116"
            if version == "0.33"
            else "1346-1375, model_executor/models/transformers/base.py:103",
        ),
        registered=target_classes.REGISTERED[key],
        platforms=PLATFORMS_0_33 if version == "0.33" else {},  # 0.28's platform-picked classes were not read
    )


# ---- what the loaders do with d2t, t2d and fc (per draft class module; lines of 0.33 and 0.28) --------------------

# module -> (draft_vocab_size null -> vocab_size, the draft_id_to_target_id parameter, d2t renamed, t2d skipped,
#            fc skipped when use_aux_hidden_state is false (None: the class always builds and loads fc))
TENSOR_LINES: dict[str, dict[str, tuple[str | None, str, str, str, str | None]]] = {
    "0.33": {
        "llama_eagle3": (
            "314-316",
            "338-345 (only when draft_vocab_size != the target's)",
            "428-430",
            "426-427",
            "462-463",
        ),
        "qwen3_eagle3": (
            "293-295",
            "317-324 (only when draft_vocab_size != the target's)",
            "406-408",
            "404-405",
            "440-441",
        ),
        "deepseek_eagle3": (
            "283-285",
            "307-314 (only when draft_vocab_size != the target's)",
            "378-380",
            "376-377",
            None,
        ),
    },
    "0.28": {
        "llama_eagle3": (None, "304-307 (always)", "389-391", "387-388", "423-424"),
        "qwen3_eagle3": (None, "314-317 (always)", "399-401", "397-398", "433-434"),
        "deepseek_eagle3": (None, "310-313 (always)", "377-379", "375-376", None),
    },
}
REFUSE_UNPLACED = {"0.33": "model_executor/models/utils.py:441-448", "0.28": "model_executor/models/utils.py:388-394"}


def _vocab(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def tensor_fates(version: str):  # type: ignore[no-untyped-def]
    def fates(raw: Mapping[str, Any], cls: str | None, target_vocab: int | None) -> tuple[TensorFate, ...]:
        module = (cls or "").split(".")[0]
        if module not in TENSOR_LINES[version]:
            return ()
        null, param, d2t, t2d, fc = TENSOR_LINES[version][module]
        f = f"vllm/model_executor/models/{module}.py"
        out: list[TensorFate] = []
        own_vocab = _vocab(raw.get("vocab_size")) or _vocab(ids_at(raw, "transformer_layer_config", "vocab_size"))
        draft_vocab = _vocab(raw.get("draft_vocab_size")) or own_vocab  # missing or null: vocab_size (null lines)
        vocab, whose = (target_vocab, "the target's") if target_vocab else (own_vocab, "vocab_size (the target's)")
        if null is None:
            out.append(TensorFate("d2t", "loaded", f"into draft_id_to_target_id ({f}:{param}, {d2t})"))
        elif draft_vocab is not None and vocab is not None and draft_vocab == vocab:
            out.append(
                TensorFate(
                    "d2t",
                    "refused",
                    f"draft_vocab_size {draft_vocab} equals {whose}: no draft_id_to_target_id parameter is built "
                    f'({f}:{null}, {param}), so the renamed d2t ({d2t}) has no parameter: ValueError "There is no '
                    f"module or parameter named 'draft_id_to_target_id'\" (vllm/{REFUSE_UNPLACED[version]})",
                )
            )
        elif draft_vocab is not None and vocab is not None:
            out.append(TensorFate("d2t", "loaded", f"into draft_id_to_target_id ({f}:{param}, {d2t})"))
        out.append(TensorFate("t2d", "dropped", f"skipped ({f}:{t2d})"))
        if fc is not None and not _use_aux(raw):
            out.append(
                TensorFate("fc.weight", "dropped", f"skipped without a word: use_aux_hidden_state false ({f}:{fc})")
            )
        return tuple(out)

    return fates

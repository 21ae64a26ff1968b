"""`verify --level target` end to end for every target family the field trains drafts for: a tiny random target
built by transformers (fixtures/families.py, seeded, saved as safetensors), a canonical draft normalized against it,
the probe over given token ids, and hidden states transformers computed in memory given as
``--reference-hidden-states``: each saved state is matched to its boundary with relative error <= 1e-5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from eagle_convert.normalize.plan import normalize_checkpoint  # noqa: E402
from eagle_convert.verify.run import verify_checkpoint  # noqa: E402
from fixtures.families import FAMILIES, family_model, write_family_target  # noqa: E402
from fixtures.generate import write_layout  # noqa: E402
from fixtures.layouts import LAYOUTS, V  # noqa: E402

pytestmark = pytest.mark.slow
TRAINED_IDS = [0, 1, 2]  # SpecForge's output-of ids: the draft reads hs[1, 2, 3] of a 4-layer target
TOL = 1e-5


def _draft(tmp: Path, target: Path) -> Path:
    src = write_layout(tmp / "src", LAYOUTS["specforge-mha-eagle3.1"])
    config = json.loads((src / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = TRAINED_IDS
    (src / "config.json").write_text(json.dumps(config))
    normalize_checkpoint(src, tmp / "draft", target=target, aux_convention="output-of", profile="vllm")
    return tmp / "draft"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_verify_target_level_runs_every_family(family: str, tmp_path: Path) -> None:
    model = family_model(family)
    target = write_family_target(family, tmp_path / "target", model)
    text = model.config.get_text_config()
    if text.vocab_size != V or text.hidden_size != 64:
        pytest.fail(f"{family}: the fixture target must have vocab {V} and hidden 64 to match the draft")
    draft = _draft(tmp_path, target)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 100, (24,), generator=g)
    with torch.no_grad():
        hs = model(ids[None], output_hidden_states=True).hidden_states
    read = [j + 1 for j in TRAINED_IDS]
    from safetensors.torch import save_file

    save_file(
        {"token_ids": ids, "hidden_states": torch.stack([hs[j][0] for j in read]).contiguous()},
        str(tmp_path / "saved.safetensors"),
    )
    report = verify_checkpoint(
        draft,
        target=target,
        level="target",
        token_ids=[ids.tolist(), list(range(5, 40))],
        reference_hidden_states=tmp_path / "saved.safetensors",
        probe_steps=2,
    )
    assert not [f for f in report.findings if f.rule_id == "EC702"], [f.message for f in report.findings]
    assert report.status in ("pass", "fail") and report.probe is not None
    assert report.probe.result.row("configured").hidden_states == read
    saved = report.probe.saved_states
    assert saved is not None and [m.boundary for m in saved.matches] == read
    assert all(m.relative_error is not None and m.relative_error <= TOL for m in saved.matches), saved.matches


@pytest.mark.parametrize("model_type", ["made_up_arch", "kimi_linear_next"])
def test_an_architecture_transformers_lacks_is_refused_before_reading(model_type: str, tmp_path: Path) -> None:
    """EC702 names the model_type and the transformers version, and the probe does not run."""
    import transformers

    target = write_family_target("llama", tmp_path / "target")
    draft = _draft(tmp_path, target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    report = verify_checkpoint(draft, target=target, level="target", token_ids=[list(range(5, 30))])
    messages = [f.message for f in report.findings if f.rule_id == "EC702"]
    assert messages and model_type in messages[0] and transformers.__version__ in messages[0], messages
    assert report.probe is None

"""One pass (STYLE.md rule 12): ``verify --level target`` opens the draft once, parses its config once, detects once
(with the target and the declared convention), reads each tensor at most once besides hashing, and reads the
target's config once; every level gets the same objects. ``normalize --aux-convention auto`` likewise opens the draft
once and detects once (the probe measures on what was opened)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import eagle_convert
from eagle_convert.draft import detect as detect_module
from eagle_convert.errors import UsageError
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.read import checkpoint as checkpoint_module
from eagle_convert.read import regular as regular_module
from eagle_convert.read import tensor_bytes
from eagle_convert.read.config import DraftConfig, TargetConfig
from eagle_convert.read.source_files import SourceFiles
from eagle_convert.reference import tensor_file
from eagle_convert.verify.run import verify_checkpoint
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS, TARGETS

TOKENS = [list(range(3, 40)), list(range(50, 70))]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a canonical draft written in 5 shards, the fixtures' 12-layer target with random weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("one-pass")
    raw = {k: v for k, v in TARGETS["target-llama"].items() if k not in ("architectures", "model_type")}
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**raw, tie_word_embeddings=False)).save_pretrained(root / "target")
    src = write_layout(root / "src", LAYOUTS["specforge-mha-eagle3.1"])
    normalize_checkpoint(src, root / "draft", target=root / "target", max_shard_size=40_000)
    assert len(list((root / "draft").glob("*.safetensors"))) > 1
    return root / "draft", root / "target"


class Counts:
    """Wraps the readers where every module looks them up, and counts the calls on one draft and one target."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, draft: Path, target: Path) -> None:
        import importlib
        import pkgutil

        import safetensors

        self.calls: Counter[str] = Counter()
        self.tensors: Counter[str] = Counter()
        draft, target_config = draft.resolve(), (target / "config.json").resolve()
        names = [m.name for m in pkgutil.walk_packages(eagle_convert.__path__, "eagle_convert.")]
        skip = ("eagle_convert.cli", "eagle_convert.__main__")  # the commands call verify; they read nothing
        modules = [importlib.import_module(n) for n in names if not n.startswith(skip) and not n.endswith("_worker")]

        def counted(key: str, fn: Callable[..., Any], on: Callable[..., bool] = lambda *a: True) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if on(*args):
                    self.calls[key] += 1
                return fn(*args, **kwargs)

            return wrapper

        def is_draft(path: Any, *_: Any) -> bool:
            return Path(path).resolve() == draft

        for name, original, key, on in (
            # open_source opens a local path through checkpoint.open_checkpoint, looked up when it is called
            ("open_checkpoint", checkpoint_module.open_checkpoint, "draft opened", is_draft),
            ("detect", detect_module.detect, "detect", lambda *a: True),
        ):
            wrapped = counted(key, original, on)
            for module in modules:
                if getattr(module, name, None) is original:
                    monkeypatch.setattr(module, name, wrapped)
        for cls, key in ((DraftConfig, "draft config parsed"), (TargetConfig, "target config parsed")):
            method = "from_dict" if cls is DraftConfig else "from_path"
            original_fn = getattr(cls, method).__func__
            monkeypatch.setattr(cls, method, classmethod(counted(key, original_fn, lambda *a: True)))
        read_bytes, read_text = Path.read_bytes, Path.read_text

        def on_target_config(path: Path, *_: Any) -> bool:
            return path.resolve() == target_config

        monkeypatch.setattr(Path, "read_bytes", counted("target config.json read", read_bytes, on_target_config))
        monkeypatch.setattr(Path, "read_text", counted("target config.json read", read_text, on_target_config))
        # files are read through read/regular.py's read_regular (a FIFO never blocks), looked up by name
        read_regular = regular_module.read_regular
        counted_regular = counted("target config.json read", read_regular, lambda p, *_: on_target_config(Path(p)))
        for module in modules:
            if getattr(module, "read_regular", None) is read_regular:
                monkeypatch.setattr(module, "read_regular", counted_regular)

        original_open = safetensors.safe_open
        calls, tensors = self.calls, self.tensors

        # Every reader of the draft's values goes through read/tensor_bytes.py: count the shards its own descriptors
        # open (a second reader, or a reader that opened a shard again, counts twice), and the tensors read as torch
        # tensors through reference/tensor_file.py (normalize's plan reads d2t/t2d's bytes on the writer's
        # descriptors, to decide the vocabulary map: not the draft's values, not counted).
        class CountedFiles(SourceFiles):
            def open(self, path: Path) -> int:
                if Path(path).resolve().parent == draft and Path(path) not in self._open:
                    calls["draft shard opened"] += 1
                return super().open(path)

        monkeypatch.setattr(tensor_bytes, "SourceFiles", CountedFiles)
        get_tensor, get_slice = tensor_file.TensorFile.get_tensor, tensor_file.TensorFile.get_slice

        def counted_read(read: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(file: tensor_file.TensorFile, name: str) -> Any:
                if file.bytes.root.resolve() == draft:
                    tensors[name] += 1
                return read(file, name)

            return wrapper

        monkeypatch.setattr(tensor_file.TensorFile, "get_tensor", counted_read(get_tensor))
        monkeypatch.setattr(tensor_file.TensorFile, "get_slice", counted_read(get_slice))

        class Handle:  # safetensors' own reader, should anything read the draft through it again
            def __init__(self, path: str, *args: Any, **kwargs: Any) -> None:
                self._f = original_open(path, *args, **kwargs)
                self._draft = Path(path).resolve().parent == draft
                if self._draft:
                    calls["draft shard opened"] += 1

            def __enter__(self) -> Handle:
                self._f.__enter__()
                return self

            def __exit__(self, *exc: Any) -> Any:
                return self._f.__exit__(*exc)

            def get_tensor(self, name: str) -> Any:
                if self._draft:
                    tensors[name] += 1
                return self._f.get_tensor(name)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._f, name)

        monkeypatch.setattr(safetensors, "safe_open", Handle)
        for module in modules:
            if getattr(module, "safe_open", None) is original_open:
                monkeypatch.setattr(module, "safe_open", Handle)


def test_verify_target_reads_everything_once(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    draft, target = pair
    counts = Counts(monkeypatch, draft, target)
    report = verify_checkpoint(draft, target=target, level="target", token_ids=TOKENS, probe_steps=2)
    assert report.probe is not None and report.probe.result.positions == 35 + 18
    assert not [f for f in report.findings if f.rule_id == "EC702"], report.findings
    assert counts.calls["draft opened"] == 1
    assert counts.calls["draft config parsed"] == 1
    assert counts.calls["detect"] == 1
    assert counts.calls["target config parsed"] == 1
    assert counts.calls["target config.json read"] == 1
    shards = len(list(draft.glob("*.safetensors")))
    assert counts.calls["draft shard opened"] == shards  # each shard once (the hashing pass reads bytes, not tensors)
    assert set(counts.tensors) == set(json.loads((draft / "model.safetensors.index.json").read_text())["weight_map"])
    assert max(counts.tensors.values()) == 1, counts.tensors


def test_tensors_level_alone_streams(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """At --level tensors the reader keeps nothing: each tensor read once, each shard opened once."""
    from eagle_convert.reference import draft_reader

    kept: list[bool] = []
    original = draft_reader.TensorReader.__init__

    def init(self: draft_reader.TensorReader, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        kept.append(self.keep)

    monkeypatch.setattr(draft_reader.TensorReader, "__init__", init)
    draft, target = pair
    counts = Counts(monkeypatch, draft, target)
    verify_checkpoint(draft, target=target, level="tensors")
    assert kept == [False]
    assert max(counts.tensors.values()) == 1 and counts.calls["draft shard opened"] <= len(
        list(draft.glob("*.safetensors"))
    )


def test_declared_convention_is_the_probes_configured_reading(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """Ambiguous ids with --aux-convention output-of: the probe's configured reading is the declared one (ids + 1),
    the reading the static findings use, not a re-detection without it."""
    draft, target = pair
    ambiguous = tmp_path / "ambiguous"
    shutil.copytree(draft, ambiguous)
    config = json.loads((ambiguous / "config.json").read_text())
    for key in ("eagle_convert", "eagle_config"):
        config.pop(key)
    config["eagle_aux_hidden_state_layer_ids"] = [3, 5, 8]  # neither convention's defaults, no producer
    (ambiguous / "config.json").write_text(json.dumps(config))
    plain = verify_checkpoint(ambiguous, target=target, level="target", token_ids=TOKENS, probe_steps=2)
    assert plain.probe is not None and plain.probe.result.configured == "ids as input-to"
    report = verify_checkpoint(
        ambiguous, target=target, level="target", token_ids=TOKENS, probe_steps=2, aux_convention="output-of"
    )
    assert report.probe is not None
    result = report.probe.result
    assert result.configured == "configured"
    assert result.row(result.configured).hidden_states == [4, 6, 9]  # output-of: ids + 1
    assert report.to_dict()["probe"]["rows"][0]["hidden_states"] == [4, 6, 9]
    assert not [f for f in report.findings if f.rule_id == "EC713"]  # no longer ambiguous: declared


def test_path_entry_points_still_work(pair: tuple[Path, Path]) -> None:
    """The library's path-taking functions open the pair themselves and run the same code."""
    from eagle_convert.probe.run import predict_engine_run, run_probe
    from eagle_convert.verify.forward import forward_check

    draft, target = pair
    assert forward_check(draft)[0]
    result = run_probe(draft, target, token_ids=TOKENS, steps=2)
    assert result.positions == 35 + 18 and result.row("configured").hidden_states == [2, 6, 9]
    predicted = predict_engine_run(draft, target, [TOKENS[0][:5]], 8, steps=2)
    assert predicted.cycles > 0 and len(predicted.outputs[0]) == 8


def test_normalize_auto_reads_the_draft_once(
    pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``normalize --aux-convention auto`` opens the draft once, parses its config once and detects once: the probe
    measures on the draft already opened and detected (and the target's config already read), and the detection
    under the measured convention is derived from that one detection (before: two opens, three detections)."""
    from eagle_convert.cli.main import main
    from eagle_convert.probe import run as probe_run

    draft, target = pair
    measured = probe_run.measure_convention_on
    seen: list[object] = []

    def measure(loaded: probe_run.LoadedDraft, *args: Any, **kwargs: Any) -> tuple[str, str]:
        seen.append(loaded)
        try:
            return measured(loaded, *args, **kwargs)
        except UsageError:  # random weights: the probe cannot tell the conventions apart
            return "input-to", "measured (stand-in): input-to"

    monkeypatch.setattr(probe_run, "measure_convention_on", measure)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    counts = Counts(monkeypatch, draft, target)
    args = ["normalize", str(draft), str(tmp_path / "out"), "--target", str(target), "--aux-convention", "auto"]
    code = main([*args, "--token-ids", str(tokens), "--device", "cpu", "--dtype", "float32", "--dry-run", "--json"])
    assert code == 0
    assert len(seen) == 1
    assert counts.calls["draft opened"] == 1
    assert counts.calls["draft config parsed"] == 1
    assert counts.calls["detect"] == 1
    assert counts.calls["target config parsed"] == 1
    assert counts.calls["draft shard opened"] <= len(list(draft.glob("*.safetensors")))
    assert max(counts.tensors.values()) == 1, counts.tensors


def test_measured_convention_is_derived_from_the_one_detection(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """The spec under a measured convention equals a detection with that convention declared, but for the evidence,
    and its findings are the declared detection's."""
    from eagle_convert.draft.detect import detect, with_measured_convention
    from eagle_convert.read.checkpoint import open_checkpoint

    draft, target = pair
    ambiguous = tmp_path / "ambiguous"
    shutil.copytree(draft, ambiguous)
    config = json.loads((ambiguous / "config.json").read_text())
    for key in ("eagle_convert", "eagle_config"):
        config.pop(key)
    config["eagle_aux_hidden_state_layer_ids"] = [3, 5, 8]
    (ambiguous / "config.json").write_text(json.dumps(config))
    ckpt, target_cfg = open_checkpoint(ambiguous), TargetConfig.from_path(target)
    plain = detect(ckpt, target_cfg)
    assert plain.aux.convention == "ambiguous" and "EC101" in {f.rule_id for f in plain.findings}
    for convention in ("output-of", "input-to"):
        derived = with_measured_convention(plain, convention, "measured")
        declared = detect(ckpt, target_cfg, convention)
        assert derived.aux.evidence == ["measured"]
        assert derived.aux.hidden_state_indices == declared.aux.hidden_state_indices
        assert sorted(map(repr, derived.findings)) == sorted(map(repr, declared.findings))

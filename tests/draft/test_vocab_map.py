"""d2t holding target ids (EC414) and the identity d2t/t2d on an equal-vocabulary draft (EC412): verify says what
the engines will do with them, normalize writes what they expect, and the two agree (issue 39).

Every engine reads d2t as offsets (target = draft + d2t[draft]). verl-SpeCo 0.1.0 shipped d2t = arange(Vd), target
ids, which the engines serve as draft i -> target 2i and which, with Vd <= V/2, passed every d2t/t2d rule before
EC414. The demo's trained pair ships the identity d2t/t2d with draft_vocab_size == vocab_size, which vLLM 0.33
refuses at load (EC412); normalize used to keep it, so its output failed `verify --engine vllm`."""

from __future__ import annotations

import random
import shutil
from itertools import pairwise
from pathlib import Path

import pytest
from safetensors import safe_open

from eagle_convert.draft.vocab_map import MIN_EXPECTED_ADJACENT, absolute_ids, as_offsets, is_identity
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.normalize.profiles import PROFILE_ENGINES
from eagle_convert.releases import RELEASES
from eagle_convert.rules.registry import RULES
from eagle_convert.verify.run import verify_checkpoint
from fixtures.broken import CANONICAL, CORPUS, Broken, _drop, _edit, write_broken
from fixtures.layouts import VD, H, V
from fixtures.tensors import vocab_map

VOCAB_RULES = {"EC404", "EC406", "EC407", "EC408", "EC409", "EC412", "EC414"}


def _case(name: str) -> Broken:
    return next(c for c in CORPUS if c.name == name)


# target ids where offsets belong, t2d marking those ids (as the trainer that wrote them computes it)
IDS_WITH_T2D = Broken("d2t-ids-t2d", "EC414", CANONICAL, tensors=_edit("d2t", fill="d2t_ids"), level="tensors")
# the same ids without t2d: only their order tells (a 128-of-256 vocabulary keeps ~64 adjacent pairs; these none)
IDS_ALONE = Broken(
    "d2t-ids-alone",
    "EC414",
    CANONICAL,
    tensors=lambda specs: _drop("t2d")(_edit("d2t", fill="d2t_ids")(specs)),
    level="tensors",
)
# draft_vocab_size == vocab_size with d2t all zero but a t2d marking half the vocabulary: not the identity pair
EQUAL_VOCAB_HALF_T2D = Broken(
    "d2t-equal-vocab-half-t2d",
    "EC412",
    CANONICAL,
    config=lambda c: c.update(draft_vocab_size=V),
    tensors=lambda specs: _edit("lm_head.weight", shape=(V, H))(_edit("d2t", shape=(V,))(specs)),
)


def _releases_of(profile: str) -> str:
    return ",".join(r.name for r in RELEASES.values() if r.engine in PROFILE_ENGINES[profile])


def _tensor(path: Path, name: str) -> list[int] | None:
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        return [int(v) for v in f.get_tensor(name).tolist()] if name in f.keys() else None


def _vocab_errors(path: Path, target: Path, engine: str) -> set[str]:
    report = verify_checkpoint(path, target=target, level="tensors", engine=engine, compute_hashes=False)
    return {f.rule_id for f in report.findings if f.severity == "error"}


# ---- the rule: when d2t can only be target ids ---------------------------------------------------------------------


def test_target_ids_are_told_from_offsets_by_their_evidence() -> None:
    rng = random.Random(39)
    kept = sorted(rng.sample(range(4096), 1024))  # a 1024-of-4096 vocabulary: ~256 adjacent pairs expected
    assert any(b == a + 1 for a, b in pairwise(kept))
    assert absolute_ids(as_offsets(kept), None, 4096) is None  # offsets repeat where kept ids are adjacent
    assert "strictly increase" in (absolute_ids(kept, None, 4096) or "")
    assert "t2d marks exactly" in (absolute_ids(kept, [int(t in set(kept)) for t in range(4096)], 4096) or "")
    assert "verl-SpeCo" in (absolute_ids(list(range(1024)), None, 4096) or "")  # its default, however small
    # a small draft vocabulary in a large one keeps no adjacent pair by chance: strictly increasing says nothing
    sparse = sorted(rng.sample(range(100_000), 16))
    assert 16 * 15 / 100_000 < MIN_EXPECTED_ADJACENT and absolute_ids(sparse, None, 100_000) is None
    assert absolute_ids([0, 5, 5, 9], None, 16) is None and absolute_ids(kept, None, None) is None
    assert absolute_ids([*kept[:-1], 4096], None, 4096) is None  # an id outside the vocabulary: not ids
    assert is_identity([0] * 8, None, 8) and is_identity([0] * 8, [1] * 8, 8)
    assert not is_identity([0] * 8, [1] * 4 + [0] * 4, 8) and not is_identity([0] * 4, None, 8)


def test_the_verl_default_passed_every_other_vocabulary_rule_and_ec414_catches_it(tmp_path: Path) -> None:
    """d2t = arange(Vd) with Vd = V/2 and t2d derived from it as offsets: only EC414 says anything."""
    case = _case("d2t-target-ids")
    draft = write_broken(tmp_path / case.name, case)
    report = verify_checkpoint(draft, target=tmp_path / "targets" / "target-llama", level="tensors", engine="all")
    assert {f.rule_id for f in report.findings} == {"EC414"}, report.findings
    (found,) = report.findings
    assert found.pointer == "d2t" and "draft 127 -> 254" in found.message and "arange(128)" in found.message
    assert RULES["EC414"].fixable and RULES["EC414"].level == "tensors"


# ---- normalize writes what the engines expect, and verify agrees ---------------------------------------------------


@pytest.mark.parametrize("case", [IDS_WITH_T2D, IDS_ALONE], ids=lambda c: c.name)
def test_normalize_writes_target_ids_as_offsets(tmp_path: Path, case: Broken) -> None:
    draft = write_broken(tmp_path / case.name, case)
    target = tmp_path / "targets" / "target-llama"
    kept = vocab_map(V, VD)
    assert _tensor(draft, "d2t") == kept  # the trainer's ids, as written
    assert _vocab_errors(draft, target, "all") == {"EC406", "EC414"}  # read as offsets, the last ids overshoot
    for profile in PROFILE_ENGINES:
        out = tmp_path / f"out-{profile}"
        report = normalize_checkpoint(draft, out, profile=profile, target=target)
        (converted,) = [a for a in report.tensors if a.target == "d2t"]
        assert converted.action == "convert" and "EC414" in converted.why
        assert _tensor(out, "d2t") == [t - i for i, t in enumerate(kept)]
        mask = _tensor(out, "t2d")
        assert mask is not None and [i for i, m in enumerate(mask) if m] == kept
        assert not [f for f in report.findings if f.severity == "error"]
        assert _vocab_errors(out, target, _releases_of(profile)) == set(), profile
        shutil.rmtree(out)


def test_the_verl_default_is_converted_and_normalize_says_what_verify_will(tmp_path: Path) -> None:
    """arange(Vd) as target ids is draft i -> target i: written as zero offsets, the draft vocabulary is the first Vd
    tokens, which verify reports (EC409) and normalize's report says beforehand."""
    case = _case("d2t-target-ids")
    draft = write_broken(tmp_path / case.name, case)
    target = tmp_path / "targets" / "target-llama"
    report = normalize_checkpoint(draft, tmp_path / "out", target=target)
    assert _tensor(tmp_path / "out", "d2t") == [0] * VD
    said = {f.rule_id for f in report.findings if f.severity == "error"}
    assert said == {"EC409"} == _vocab_errors(tmp_path / "out", target, "all") & VOCAB_RULES


def test_normalize_drops_the_identity_pair_an_equal_vocabulary_draft_ships(tmp_path: Path) -> None:
    """The demo's case: draft_vocab_size == vocab_size with d2t all zero and t2d all true; vLLM 0.33 refuses the d2t.
    Every profile's output passes verify for every release of the profile's engines."""
    case = _case("d2t-equal-vocab")
    draft = write_broken(tmp_path / case.name, case)
    target = tmp_path / "targets" / "target-llama"
    assert _vocab_errors(draft, target, "all") == {"EC412"}
    for profile in PROFILE_ENGINES:
        out = tmp_path / f"out-{profile}"
        report = normalize_checkpoint(draft, out, profile=profile, target=target)
        dropped = {a.source for a in report.tensors if a.action == "drop"}
        assert dropped == {"d2t", "t2d"} and _tensor(out, "d2t") is None and _tensor(out, "t2d") is None
        assert _vocab_errors(out, target, _releases_of(profile)) == set(), profile
    assert RULES["EC412"].fixable


def test_normalize_keeps_an_equal_vocabulary_pair_that_is_not_the_identity(tmp_path: Path) -> None:
    draft = write_broken(tmp_path / EQUAL_VOCAB_HALF_T2D.name, EQUAL_VOCAB_HALF_T2D)
    target = tmp_path / "targets" / "target-llama"
    report = normalize_checkpoint(draft, tmp_path / "out", profile="vllm", target=target)
    assert not [a for a in report.tensors if a.action == "drop"]
    assert _vocab_errors(tmp_path / "out", target, "vllm") == {"EC408", "EC412"}  # what verify still says

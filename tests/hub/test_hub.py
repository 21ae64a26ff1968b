"""The Hub helper against a loopback Hub (tests/hubserver.py) through the real huggingface_hub client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eagle_convert.errors import EagleConvertError, GateFailed, HeaderError, UnsafePathError
from eagle_convert.hub.publish import pull_checkpoint, push_checkpoint
from eagle_convert.inspect_api import inspect_checkpoint
from eagle_convert.normalize.plan import normalize_checkpoint
from eagle_convert.verify.run import verify_checkpoint
from fixtures.broken import CORPUS, write_broken
from fixtures.generate import write_layout
from fixtures.layouts import LAYOUTS
from tests import cli_process
from tests.conftest import ROOT
from tests.hubserver import FakeHub, Fault, isolate_hf_env

TOKEN = "hf_loopback_secret_token"


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    import huggingface_hub.constants

    isolate_hf_env(monkeypatch, tmp_path / "hf-home")  # no network but 127.0.0.1, a private cache
    server = FakeHub(tmp_path / "hub-store", token=TOKEN).start()
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", server.endpoint)
    # huggingface_hub derives its download URLs from HF_ENDPOINT at import time: point that template here too.
    monkeypatch.setattr(
        huggingface_hub.constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        server.endpoint + "/{repo_id}/resolve/{revision}/{filename}",
    )
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    yield server
    server.stop()


@pytest.fixture()
def clean_draft(fx: Path, tmp_path: Path) -> Path:
    out = tmp_path / "clean"
    normalize_checkpoint(fx / "layouts-sharded" / "specforge-mha-eagle3.1", out, target=fx / "targets" / "target-llama")
    return out


def _without_location(doc: dict[str, object]) -> dict[str, object]:
    doc = json.loads(json.dumps(doc))
    doc.pop("path")
    doc.pop("revision")
    return doc


def test_remote_inspect_reads_headers_only_and_matches_local(hub: FakeHub, fx: Path) -> None:
    local = fx / "layouts-sharded" / "torchspec-mla"
    sha = hub.add_repo("org/mla-draft", local)
    report = inspect_checkpoint("org/mla-draft")
    assert report.checkpoint.revision == sha
    assert _without_location(report.to_dict()) == _without_location(inspect_checkpoint(local).to_dict())
    sizes = {p.name: p.stat().st_size for p in local.glob("*.safetensors")}
    weight_gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith(".safetensors")]
    assert weight_gets and all(r.range for r in weight_gets)  # never a full-file GET
    for name, size in sizes.items():
        sent = sum(r.bytes_sent for r in weight_gets if r.path.endswith("/" + name))
        assert sent < size / 4, (name, sent, size)


def test_remote_verify_pins_revision_and_hashes(hub: FakeHub, clean_draft: Path) -> None:
    import hashlib

    sha = hub.add_repo("org/clean", clean_draft)
    report = verify_checkpoint("org/clean@main")
    assert report.status == "pass" and report.revision == sha
    for f in report.files:
        assert f.sha256 == hashlib.sha256((clean_draft / f.name).read_bytes()).hexdigest(), f.name
    with pytest.raises(EagleConvertError, match="--level static"):
        verify_checkpoint("org/clean", level="tensors")


def test_push_of_a_failing_draft_uploads_nothing(hub: FakeHub, tmp_path: Path) -> None:
    case = next(c for c in CORPUS if c.name == "no-lm-head")
    broken = write_broken(tmp_path / "broken", case)
    with pytest.raises(GateFailed) as info:
        push_checkpoint(broken, "org/bad", target=tmp_path / "targets" / "target-llama")
    assert info.value.exit_code == 1 and "nothing was uploaded" in info.value.message
    assert not [r for r in hub.requests if r.method == "POST"]  # no repo created, no commit


def test_push_then_pull_round_trip(hub: FakeHub, fx: Path, clean_draft: Path, tmp_path: Path) -> None:
    dry = push_checkpoint(
        clean_draft,
        "org/published",
        target=fx / "targets" / "target-llama",
        dry_run=True,
        base_model="org/target-model",
    )
    assert not [r for r in hub.requests if r.method == "POST"]
    names = {f.name for f in dry.files}
    verified = {p.name for p in clean_draft.iterdir()}
    assert names == verified | {"README.md", "verify-report.json"}
    assert 'base_model: "org/target-model"' in dry.card and "eagle3" in dry.card and "hs[2, 6, 9]" in dry.card

    done = push_checkpoint(
        clean_draft, "org/published", target=fx / "targets" / "target-llama", base_model="org/target-model"
    )
    commits = hub.commits("org/published")
    pushed = [c for c in commits if c.sha == done.commit]
    assert len(pushed) == 1 and pushed[0].parent == done.parent_commit
    assert {k for k in pushed[0].files if k != ".gitattributes"} == names
    assert json.loads(pushed[0].files["verify-report.json"])["status"] == "pass"

    downloads = len([r for r in hub.requests if r.method == "GET" and "/resolve/" in r.path])
    listed = pull_checkpoint("org/published", tmp_path / "pulled", dry_run=True)
    assert listed.dry_run and {f.name for f in listed.files} == verified and not (tmp_path / "pulled").exists()
    assert [f.size for f in listed.files] == [(clean_draft / f.name).stat().st_size for f in listed.files]
    assert len([r for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]) == downloads
    pulled = pull_checkpoint("org/published", tmp_path / "pulled")
    for name in verified:
        assert (tmp_path / "pulled" / name).read_bytes() == (clean_draft / name).read_bytes(), name
    assert not (tmp_path / "pulled" / "README.md").exists()  # pull takes only what a draft needs
    assert pulled.revision == done.commit


def test_push_refuses_to_replace_without_force_and_can_open_a_pr(hub: FakeHub, clean_draft: Path) -> None:
    push_checkpoint(clean_draft, "org/twice")
    head = hub.head("org/twice")
    with pytest.raises(EagleConvertError, match="already holds a draft"):
        push_checkpoint(clean_draft, "org/twice")
    pr = push_checkpoint(clean_draft, "org/twice", create_pr=True, base_model="org/new-target")  # a new card
    assert pr.pr_url and hub.head("org/twice") == head
    replaced = push_checkpoint(clean_draft, "org/twice", force=True, base_model="org/new-target")
    assert hub.head("org/twice") == replaced.commit != head


@pytest.mark.parametrize(
    ("kind", "count", "ok"),
    [
        ("429", 1, True),
        ("500", 1, True),
        ("500", 20, False),
        ("truncate", 1, True),
        ("truncate", 20, False),
        ("bad-range", 1, False),
    ],
)
def test_faults_give_a_clear_error_or_a_retry(
    hub: FakeHub, clean_draft: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, count: int, ok: bool
) -> None:
    """A fault the retries outlast is read through; one they do not is one clear error, nothing pulled. The waits
    between tries are counted, not slept: 0.5 s doubled each time (a 429's Retry-After: 1 s instead), MAX_TRIES tries
    in all."""
    import time
    from types import SimpleNamespace

    from eagle_convert.read import hub_store

    waits: list[float] = []
    monkeypatch.setattr(hub_store, "time", SimpleNamespace(monotonic=time.monotonic, sleep=waits.append))
    hub.add_repo("org/flaky", clean_draft)
    hub.faults.append(Fault("*/resolve/*.safetensors", kind, count=count, method="GET"))
    if ok:
        assert inspect_checkpoint("org/flaky").spec.producer == "canonical"
        assert waits == pytest.approx([1.0 if kind == "429" else hub_store.BASE_WAIT_S] * count, abs=0.05)
        return
    with pytest.raises(EagleConvertError) as info:
        inspect_checkpoint("org/flaky")
    assert "\n" not in info.value.message and "org/flaky" in info.value.message
    if kind == "bad-range":
        return  # full-file downloads send no Range header
    assert waits == pytest.approx([0.5, 1.0, 2.0], abs=0.05)  # every retry taken, each wait twice the last
    hub.faults.append(Fault("*/resolve/*.safetensors", kind, count=count, method="GET"))
    with pytest.raises(EagleConvertError):
        pull_checkpoint("org/flaky", tmp_path / "pulled")
    assert not (tmp_path / "pulled").exists()


def test_repos_that_lie_are_refused_remotely_and_never_pulled(hub: FakeHub, tmp_path: Path) -> None:
    for name, error in (("index-parent-shard", UnsafePathError), ("header-longer-than-file", HeaderError)):
        from fixtures.generate import write_malformed

        src = write_malformed(tmp_path / name, name)
        hub.add_repo(f"org/{name}", {p.name: p.read_bytes() for p in src.iterdir() if p.is_file()})
        with pytest.raises(error):
            inspect_checkpoint(f"org/{name}")
        with pytest.raises(EagleConvertError):
            pull_checkpoint(f"org/{name}", tmp_path / f"pulled-{name}")
        assert not (tmp_path / f"pulled-{name}").exists()


def test_pull_skips_pickle_unless_allowed(hub: FakeHub, fx: Path, tmp_path: Path) -> None:
    draft = fx / "pickle" / "eagle-official-bin"
    hub.add_repo("org/official", draft)
    with pytest.raises(EagleConvertError, match="no safetensors weights") as info:
        pull_checkpoint("org/official", tmp_path / "a")
    assert "--allow-pickle" in (info.value.hint or "")
    assert not (tmp_path / "a").exists()


def test_normalize_accepts_a_repo_id(hub: FakeHub, fx: Path, tmp_path: Path) -> None:
    hub.add_repo("org/specforge", fx / "layouts" / "specforge-mha")
    report = normalize_checkpoint("org/specforge", tmp_path / "out", target_family="llama")
    assert report.written and inspect_checkpoint(tmp_path / "out").spec.producer == "canonical"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # the pulled staging copy is gone


def _cli(hub: FakeHub, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "COLUMNS": "200", **env}
    full.pop("HF_TOKEN", None)
    return cli_process.run(
        [sys.executable, "-m", "eagle_convert", *args], capture_output=True, text=True, cwd=ROOT, env=full, timeout=120
    )


def test_cli_private_repo_token_is_used_and_never_printed(hub: FakeHub, clean_draft: Path) -> None:
    hub.add_repo("org/private", clean_draft, private=True)
    denied = _cli(hub, "inspect", "org/private", "--token", "hf_wrong_token_value")
    assert denied.returncode == 2 and denied.stderr.startswith("Error: ")
    assert "hf_wrong_token_value" not in denied.stderr + denied.stdout
    allowed = _cli(hub, "inspect", "org/private", "--json", "--token", TOKEN)
    assert allowed.returncode == 0, allowed.stderr
    assert TOKEN not in allowed.stdout + allowed.stderr
    assert json.loads(allowed.stdout)["revision"] == hub.head("org/private")
    verified = _cli(hub, "verify", "org/private", "--json", "--token", TOKEN)
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["checkpoint"]["revision"] == hub.head("org/private")
    assert TOKEN not in verified.stdout + verified.stderr


def test_offline_mode_is_a_clear_error(hub: FakeHub, clean_draft: Path, tmp_path: Path) -> None:
    hub.add_repo("org/any", clean_draft)
    for args in (["inspect", "org/any"], ["pull", "org/any", str(tmp_path / "x")], ["verify", "org/any"]):
        result = _cli(hub, *args, HF_HUB_OFFLINE="1")
        assert result.returncode == 2 and "HF_HUB_OFFLINE" in result.stderr.splitlines()[0], result.stderr
    assert not (tmp_path / "x").exists()
    assert not [r for r in hub.requests if "org/any" in r.path and r.method == "GET"]


def test_local_path_wins_over_repo_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_layout(tmp_path / "org" / "draft", LAYOUTS["specforge-mha"])
    assert inspect_checkpoint("org/draft").checkpoint.revision is None


def test_an_interrupted_pull_resumes(hub: FakeHub, clean_draft: Path, tmp_path: Path) -> None:
    sha = hub.add_repo("org/resume", clean_draft)
    hub.faults.append(Fault("*/resolve/*model-00002*", "500", count=50, method="GET"))
    with pytest.raises(EagleConvertError):
        pull_checkpoint("org/resume", tmp_path / "draft")
    staging = tmp_path / f".draft.pull-{sha[:16]}"
    assert not (tmp_path / "draft").exists() and staging.is_dir()  # kept, to resume from
    hub.faults.clear()
    before = len(hub.requests)
    pull_checkpoint("org/resume", tmp_path / "draft")
    fetched = [r.path for r in hub.requests[before:] if r.method == "GET" and "/resolve/" in r.path]
    assert any("model-00002" in p for p in fetched)
    assert not any("model-00001" in p for p in fetched)  # already complete: not downloaded again
    assert not staging.exists()
    for p in clean_draft.iterdir():
        assert (tmp_path / "draft" / p.name).read_bytes() == p.read_bytes()


def test_an_hf_scheme_that_went_through_a_path_argument_still_names_the_hub() -> None:
    """typer hands path arguments over as pathlib.Path, which spells hf://owner/name as hf:/owner/name."""
    from eagle_convert.read.hub_store import hub_repo_ref, parse_repo_ref

    for text in ("hf://owner/name@main", str(Path("hf://owner/name@main"))):
        assert parse_repo_ref(text) == ("owner/name", "main") == hub_repo_ref(text)


def test_the_card_of_a_trtllm_verified_draft_gives_its_launch_lines(hub: FakeHub, fx: Path, tmp_path: Path) -> None:
    # a draft trained on hs[4, 7, 10] (SpecForge ids [3, 6, 9]): TensorRT-LLM feeds its default hs[2, 6, 9] unless
    # the deployment says eagle3_layers_to_capture [3, 6, 9]; verified with that setting, the card carries it
    draft = write_layout(tmp_path / "draft", LAYOUTS["specforge-mha"])
    config = json.loads((draft / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [3, 6, 9]
    (draft / "config.json").write_text(json.dumps(config))
    target = fx / "targets" / "target-llama"
    with pytest.raises(GateFailed):  # the setting unset: EC114, nothing is pushed
        push_checkpoint(draft, "org/trt", target=target, engine="trtllm", dry_run=True)
    dry = push_checkpoint(
        draft,
        "org/trt",
        target=target,
        engine="trtllm",
        dry_run=True,
        deployment={"eagle3_layers_to_capture": [3, 6, 9]},
    )
    assert "trtllm-serve <target-model> --extra_llm_api_options extra_llm_api_options.yaml" in dry.card
    assert "  eagle3_layers_to_capture: [3, 6, 9]" in dry.card and "speculative_model_dir: org/trt" in dry.card
    assert "vllm serve" not in dry.card  # only the engines verified

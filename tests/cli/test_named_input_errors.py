"""What was an internal error, or a pass on bad data, is a named input error (issue 38): a symlink that loops where a
file is read, an index naming a shard longer than a file name can be, a server reporting a count as a word or
measuring nothing; and every string from input that reaches Markdown is escaped.

Each case: exit 2 (AttachError for a server), one ``Error:`` line naming the file (or the server) and the cause,
a ``Hint:``, never "internal error" or a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eagle_convert.errors import AttachError
from tests import cli_process
from tests.conftest import ROOT, one_error
from tests.engine.test_hostile_servers import SGLANG_GOOD, _attach, _serve, _Sglang, _Vllm

DRAFT = ROOT / "fixtures" / "smollm2-eagle3"
DEADLINE_S = 120


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "eagle_convert", *args]
    return cli_process.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=DEADLINE_S,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _one_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert "internal error" not in one_error(done, *needles)


def _sharded(out: Path) -> Path:
    """The SmolLM2 draft with its weights as the one shard of an index."""
    shutil.copytree(DRAFT, out)
    (out / "model.safetensors").rename(out / "model-00001-of-00001.safetensors")
    from eagle_convert.read.safetensors_header import read_header

    tensors = read_header(out / "model-00001-of-00001.safetensors").tensors
    index = {
        "metadata": {"total_size": sum(t.nbytes for t in tensors)},
        "weight_map": dict.fromkeys((t.name for t in tensors), "model-00001-of-00001.safetensors"),
    }
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    return out


def _loop(path: Path) -> None:
    """Make ``path`` a symbolic link to itself."""
    path.unlink(missing_ok=True)
    path.symlink_to(path.name)


# ---- a symlink that loops -------------------------------------------------------------------------------------------

LOOPS = {  # where the loop is -> (checkpoint, the path given, the file the Error line names)
    "the weights file": lambda tmp: (
        _loop_in(shutil.copytree(DRAFT, tmp / "d"), "model.safetensors"),
        "model.safetensors",
    ),
    "config.json": lambda tmp: (_loop_in(shutil.copytree(DRAFT, tmp / "d"), "config.json"), "config.json"),
    "the index": lambda tmp: (_loop_in(_sharded(tmp / "d"), "model.safetensors.index.json"), "index.json"),
    "a shard the index names": lambda tmp: (
        _loop_in(_sharded(tmp / "d"), "model-00001-of-00001.safetensors"),
        "model-00001-of-00001.safetensors",
    ),
    "the path given": lambda tmp: (_loop_in(tmp, "draft.safetensors") / "draft.safetensors", "draft.safetensors"),
}


def _loop_in(directory: Path | str, name: str) -> Path:
    _loop(Path(directory) / name)
    return Path(directory)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="symbolic links")
@pytest.mark.parametrize("command", ["inspect", "verify", "normalize"])
@pytest.mark.parametrize("where", list(LOOPS))
def test_a_symlink_loop_is_a_named_input_error(tmp_path: Path, where: str, command: str) -> None:
    path, named = LOOPS[where](tmp_path)
    args = {"inspect": [], "verify": ["--no-hash"], "normalize": [str(tmp_path / "out")]}[command]
    done = _cli(command, str(path), *args)
    _one_error(done, named, "is a symbolic link that loops")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["normalize", "verify --output"])
def test_an_output_that_is_a_symlink_loop_is_named(tmp_path: Path, command: str) -> None:
    out = tmp_path / "out"
    _loop(out)
    args = [str(out)] if command == "normalize" else ["--no-hash", "--output", str(out)]
    _one_error(_cli(command.split()[0], str(DRAFT), *args), str(out), "is a symbolic link that loops: nothing written")
    assert out.is_symlink()


def test_a_target_config_that_loops_is_a_named_input_error(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    _loop(target / "config.json")
    done = _cli("verify", str(DRAFT), "--target", str(target), "--no-hash")
    _one_error(done, "target/config.json", "cannot read target config", "symbolic links")


def test_a_dangling_symlink_given_as_the_path_is_named(tmp_path: Path) -> None:
    (tmp_path / "draft").symlink_to(tmp_path / "gone")
    _one_error(_cli("inspect", str(tmp_path / "draft")), "draft", "symbolic link to a file that does not exist")


# ---- a shard name no file can have ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["x" * 300 + ".safetensors", "\u00e9" * 125 + ".safetensors"],  # 312 bytes; 262 bytes in 137 characters
    ids=["300-characters", "multibyte-over-255-bytes"],
)
def test_an_index_naming_a_shard_longer_than_a_file_name_is_named(tmp_path: Path, name: str) -> None:
    draft = _sharded(tmp_path / "d")
    index = json.loads((draft / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = name
    (draft / "model.safetensors.index.json").write_text(json.dumps(index))
    size = len(name.encode())
    for command in ("inspect", "verify"):
        _one_error(_cli(command, str(draft)), "model.safetensors.index.json", f"of {size} bytes, longer than a file")


def test_a_shard_name_of_255_bytes_is_read_as_a_name(tmp_path: Path) -> None:
    """At the limit the name is only a name: a missing shard is named as missing, as any other."""
    draft = _sharded(tmp_path / "d")
    index = json.loads((draft / "model.safetensors.index.json").read_text())
    name = "y" * (255 - len(".safetensors")) + ".safetensors"
    index["weight_map"][next(iter(index["weight_map"]))] = name
    (draft / "model.safetensors.index.json").write_text(json.dumps(index))
    _one_error(_cli("inspect", str(draft)), "index.json", "named by the index does not exist")


# ---- servers: counts that are words, runs that measured nothing -----------------------------------------------------


class _SglangSays(_Sglang):
    """The SGLang fake, with ``info`` merged into its /server_info and ``output_ids`` as every answer's ids."""

    info: dict[str, Any] = {}  # noqa: RUF012
    output_ids: Any = None

    def do_GET(self) -> None:
        if self.path == "/server_info":
            info = {"model_path": "/m/target", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}
            self._json(200, {**info, "speculative_draft_model_path": "/m/draft", "version": "0.5.23", **self.info})
        else:
            super().do_GET()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        new = body["sampling_params"]["max_new_tokens"]
        ids = list(range(new)) if self.output_ids is None else self.output_ids
        self._json(200, {"text": "", "output_ids": ids, "meta_info": {"completion_tokens": new, **self.meta}})


SERVERS_SAY_THREE = {
    "sglang completion_tokens": (_SglangSays, {"meta": {**SGLANG_GOOD, "completion_tokens": "three"}}),
    "sglang speculative_num_steps": (_SglangSays, {"meta": SGLANG_GOOD, "info": {"speculative_num_steps": "three"}}),
    "sglang output_ids": (_SglangSays, {"meta": SGLANG_GOOD, "output_ids": ["three"]}),
    "sglang completion_tokens 7.5": (_SglangSays, {"meta": {**SGLANG_GOOD, "completion_tokens": 7.5}}),
}


@pytest.mark.parametrize("case", list(SERVERS_SAY_THREE))
def test_a_count_reported_as_a_word_is_a_server_fault(case: str) -> None:
    handler, attrs = SERVERS_SAY_THREE[case]
    with _serve(handler, **attrs) as url, pytest.raises(AttachError) as error:
        _attach(url)
    assert "reported impossible numbers" in error.value.message and "not a" in error.value.message, error.value.message


@pytest.mark.parametrize("field", ["completion_tokens", "token_ids"])
def test_a_vllm_answer_with_words_for_numbers_is_a_server_fault(field: str) -> None:
    def three(handler: _Vllm) -> None:
        body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
        n = body["max_tokens"]
        choice = {"token_ids": ["three"] if field == "token_ids" else list(range(n)), "finish_reason": "length"}
        usage = {"completion_tokens": "three" if field == "completion_tokens" else n}
        type(handler).answered += 1
        handler._json(200, {"choices": [choice], "usage": usage})

    with _serve(_Vllm, routes={"/v1/completions": three}) as url, pytest.raises(AttachError) as error:
        _attach(url)
    assert "reported impossible numbers" in error.value.message and "'three'" in error.value.message


NOTHING = {"spec_verify_ct": 0, "spec_num_correct_drafts": 0, "spec_correct_drafts_histogram": []}


def test_an_sglang_server_that_verified_nothing_is_an_error() -> None:
    with _serve(_Sglang, meta=NOTHING) as url, pytest.raises(AttachError) as error:
        _attach(url)
    assert "verified no draft during the run" in error.value.message


def test_verify_against_a_server_that_measured_nothing_exits_2(fx: Path, tmp_path: Path) -> None:
    """It passed with exit 0: a gate that measured nothing said the draft was fine."""
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([[1, 2, 3], [4, 5, 6, 7]]))
    draft, target = fx / "layouts" / "specforge-mha", fx / "targets" / "target-llama" / "config.json"
    with _serve(_Sglang, meta=NOTHING) as url:
        done = _cli(
            "verify", str(draft), "--target", str(target), "--engine-url", url, "--token-ids", str(ids), "--json",
            "--no-hash",
        )  # fmt: skip
    _one_error(done, url, "verified no draft during the run")
    assert json.loads(done.stdout)["status"] == "error"


# ---- Markdown: the GitHub step summary and the model card ------------------------------------------------------------

HOSTILE_NAMES = [
    "<img src=x onerror=alert(1)>.weight",
    "a``<b>bold</b>``c.weight",
    "![track](http://example.invalid/pixel.png).weight",
    "[click](http://example.invalid).weight",
    "**strong** _em_ ~~gone~~ `code`.weight",
    "<script>alert(1)</script>|cell|.weight",
]


def _html_tags(markdown: str) -> set[str]:
    """The HTML tags a CommonMark renderer with GitHub's tables makes of ``markdown`` (raw HTML passed through)."""
    import re

    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough").render(markdown)
    return set(re.findall(r"<([a-zA-Z][\w-]*)", html))


def test_the_step_summary_shows_hostile_names_as_text(tmp_path: Path) -> None:
    from tests.read.test_bounded_inputs import CONFIG, _shard

    draft = tmp_path / "d"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(CONFIG))
    _shard(draft / "model.safetensors", HOSTILE_NAMES)
    summary = tmp_path / "summary.md"
    done = _cli("verify", str(draft), "--no-hash", "--format", "json", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert done.returncode == 1, done.stderr
    text = summary.read_text(encoding="utf-8")
    tags = _html_tags(text)
    # the tool's own: headings, emphasis of the counts, the tables, code spans, <br>, <details> and its list
    assert tags <= {"h2", "h3", "p", "strong", "table", "thead", "tbody", "tr", "th", "td", "code", "br", "details",
                    "summary", "ul", "li", "blockquote"}, tags  # fmt: skip
    rows = [line for line in text.splitlines() if line.startswith("| EC")]
    assert all(line.count("|") - line.count("\\|") == 6 for line in rows)


def test_the_model_card_escapes_what_it_quotes(tmp_path: Path) -> None:
    """The card quotes the draft's rope settings and its file names: both come from the checkpoint."""
    from eagle_convert.draft.detect import detect
    from eagle_convert.hub.model_card import render_card
    from eagle_convert.read.checkpoint import open_checkpoint
    from eagle_convert.read.digest import FileDigest
    from eagle_convert.verify.report import VerifyReport

    draft = shutil.copytree(DRAFT, tmp_path / "d")
    config = json.loads((draft / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "linear", "factor": 2.0, "note": HOSTILE_NAMES[0] + HOSTILE_NAMES[2]}
    (draft / "config.json").write_text(json.dumps(config))
    spec = detect(open_checkpoint(draft))
    files = [FileDigest(name, 1, "0" * 64) for name in HOSTILE_NAMES]
    report = VerifyReport(str(draft), "static", "vllm", "error", "pass", files=files)
    card = render_card("org/draft", spec, report, None, None)
    assert not _html_tags(card) & {"img", "script", "a", "b", "em", "del"}, _html_tags(card)

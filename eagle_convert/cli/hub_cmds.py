"""`eagle-convert pull REPO OUT` and `eagle-convert push DIR REPO`."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import typer

from eagle_convert.cli.options import chosen_engines, engine_option, fail_level_option, level_option
from eagle_convert.releases import ENGINES_HELP, RECORDED_HELP

TOKEN_HELP = "Hub token (default: HF_TOKEN or the huggingface_hub login); never printed."


def pull(
    repo: str = typer.Argument(..., metavar="REPO", help="owner/name[@revision]"),
    out: Path = typer.Argument(..., metavar="OUT", help="Directory to create (renamed into place when complete)."),
    allow_pickle: bool = typer.Option(False, "--allow-pickle", help="Also download .bin/.pt weights."),
    tokenizer: bool = typer.Option(False, "--tokenizer", help="Also download tokenizer files."),
    force: bool = typer.Option(False, "--force", help="Replace an existing OUT that holds a checkpoint's files only."),
    token: str | None = typer.Option(None, "--token", help=TOKEN_HELP),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="List the files a pull would download (sizes, sha256); download and write nothing."
    ),
    as_json: bool = typer.Option(False, "--json", help="Write the file list (with sha256) as JSON."),
) -> None:
    """Download only what a draft needs, check sizes and sha256 against the Hub, then validate it."""
    from eagle_convert.hub.publish import pull_checkpoint
    from eagle_convert.render.json_output import write_json

    report = pull_checkpoint(
        repo, out, allow_pickle=allow_pickle, tokenizer=tokenizer, token=token, force=force, dry_run=dry_run
    )
    if as_json:
        write_json(asdict(report))
    elif report.dry_run:
        total = sum(f.size for f in report.files)
        _write_lines(
            [
                f"would pull {report.repo_id}@{report.revision} into {report.out}: {len(report.files)} file(s), "
                f"{total / 2**20:.1f} MiB (nothing downloaded)",
                *(f"  {f.name}  {f.size} bytes  {f.sha256 or '(git blob)'}" for f in report.files),
            ]
        )
    else:
        _write_lines(
            [
                f"pulled {report.repo_id}@{report.revision} into {report.out}: "
                f"{len(report.files)} file(s), sizes and sha256 checked"
            ]
        )


def push(
    directory: Path = typer.Argument(..., metavar="DIR", help="The draft checkpoint to publish."),
    repo: str = typer.Argument(..., metavar="REPO", help="owner/name"),
    target: Path | None = typer.Option(None, "--target", metavar="PATH", help="Target model dir or config.json."),
    base_model: str | None = typer.Option(None, "--base-model", help="The target's Hub id, for the card's metadata."),
    engine: str | None = engine_option(f"{ENGINES_HELP} {RECORDED_HELP}"),
    level: str = level_option("verify level that must pass."),
    fail_level: str = fail_level_option("Lowest severity that blocks."),
    strict: bool = typer.Option(False, "--strict", help="verify --strict."),
    engine_arg: list[str] | None = typer.Option(
        None,
        "--engine-arg",
        metavar="KEY=VALUE",
        help="A deployment setting verify reads: eagle3_layers_to_capture=[1,5,9] for a trtllm release (the card's "
        "launch lines give the one that feeds the trained states), platform or pipeline_parallel_size for a vllm "
        "release; the value is JSON. Repeatable.",
        show_default=False,
    ),
    create_pr: bool = typer.Option(False, "--create-pr", help="Open a pull request instead of committing to main."),
    private: bool = typer.Option(False, "--private", help="Create the repo private."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the exact files and card; upload nothing."),
    force: bool = typer.Option(
        False, "--force", help="Replace a draft already at the repo's head (verify still runs)."
    ),
    message: str | None = typer.Option(None, "--message", help="Commit message."),
    token: str | None = typer.Option(None, "--token", help=TOKEN_HELP),
    as_json: bool = typer.Option(False, "--json", help="Write the push report as JSON."),
) -> None:
    """Publish a draft only if it passes verify: weights, config, card and report in one commit."""
    from eagle_convert.cli.settings import load_settings
    from eagle_convert.hub.publish import push_checkpoint
    from eagle_convert.real_engine.engine_args import parse_engine_args
    from eagle_convert.render.json_output import write_json

    report = push_checkpoint(
        directory,
        repo,
        target=target,
        base_model=base_model,
        engine=chosen_engines(engine, load_settings(Path.cwd())),
        level=level,
        fail_level=fail_level,
        strict=strict,
        deployment=parse_engine_args(engine_arg or ()),  # checked by verify's request
        create_pr=create_pr,
        private=private,
        dry_run=dry_run,
        force=force,
        token=token,
        message=message,
    )
    if as_json:
        write_json(asdict(report))
        return
    # plain writes, never through rich: the card preview is the exact card (no re-wrapping, no markup)
    lines = [f"{'would upload' if dry_run else 'uploaded'} to {report.repo_id}:"]
    lines += [f"  {f.name}  {f.size} bytes  sha256 {f.sha256}" for f in report.files]
    if dry_run:
        lines += ["", "--- README.md ---", "", report.card]
    else:
        lines.append(f"commit {report.commit} (parent {report.parent_commit})")
        lines += [f"pull request {report.pr_url}"] if report.pr_url else []
    _write_lines(lines)


def _write_lines(lines: list[str]) -> None:
    """``lines`` on stdout, plain (never through rich), each line within them escaped as every line from input is
    (render/escape.py: a name, a commit or a URL the Hub answered cannot act on the terminal)."""
    from eagle_convert.render.escape import one_line

    text = "\n".join(lines).removesuffix("\n")  # the card ends with its own newline
    sys.stdout.write("".join(one_line(line) + "\n" for line in text.split("\n")))


def register(app: typer.Typer) -> None:
    app.command("pull")(pull)
    app.command("push")(push)

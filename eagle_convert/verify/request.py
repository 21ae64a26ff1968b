"""verify's request: every option of a run, typed and frozen, checked whole before any checkpoint is opened.

Each option is declared once, on its field here (its type, default, help and flag: eagle_convert/options.py); the
verify command's options are derived from these fields (cli/options.py), with ``[tool.eagle-convert]`` giving the
defaults it names. A library caller builds the same request, or passes the options flat as the command line names
them (``VerifyRequest.build(**options)``). :meth:`VerifyRequest.validate` raises every usage error first (exit 2, an
``Error:`` and a ``Hint:``): a value outside its choices or range, conflicting options, options that do not apply to
the level, the URL's shape, unreadable or invalid user files (token ids, prompts, engine settings), token ids past the
target's vocabulary, a draft given as the target. It reads the user's own files and the target's config, never the
draft: what it returns, a :class:`CheckedRequest`, carries what it read, so nothing is read twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from eagle_convert.draft.aux_layers import CONVENTIONS
from eagle_convert.engines import DTYPE_AUTO, ENGINE_PANEL, AttachedServer, new_tokens_option
from eagle_convert.errors import (
    REFERENCE_TARGET_PACKAGES,
    EagleConvertError,
    UsageError,
    require_packages,
    require_torch,
)
from eagle_convert.options import build, check, given, group, option
from eagle_convert.probe.text import TEXTS as PROBE_TEXTS
from eagle_convert.probe.text import ProbeText
from eagle_convert.read.config import TargetConfig
from eagle_convert.read.hub_store import parse_repo_ref
from eagle_convert.reference.budget import MIN_POSITIONS as PROBE_POSITIONS
from eagle_convert.reference.budget import PROBE_STEPS
from eagle_convert.reference.compute import ComputeRequest as ComputeRequest
from eagle_convert.releases import (
    DEFAULT_ENGINES,
    ENGINES_HELP,
    ENGINES_METAVAR,
    RECORDED_HELP,
    Release,
    complete_engines,
    engine_level_engine,
    recorded_releases,
    resolve_engines,
    served_engine,
)
from eagle_convert.rules.registry import LEVELS, RULES, Level

if TYPE_CHECKING:
    from eagle_convert.real_engine.attached import AttachedServer
    from eagle_convert.real_engine.base import EngineSettings

# One default per option, in one place: the fields' defaults below, which the command line takes.
DEFAULT_LEVEL = LEVELS[0]
FailLevel = Literal["error", "warning"]
FAIL_LEVELS: tuple[FailLevel, ...] = get_args(FailLevel)
DEFAULT_FAIL_LEVEL = FAIL_LEVELS[0]
Oracle = Literal["transformers"]  # --oracle: what the reference target is checked against (verify/forward.py)
ORACLES: tuple[Oracle, ...] = get_args(Oracle)

# verify -h: its options in panels (drawn by cli/formatting.py, as the help stays plain)
CHECKS = "What to check"
OUTPUT_PANEL = "Output"
PROBE = "Probe (--level forward, target)"
HUB = "Hub"
ENGINE_DTYPE_AUTO_HELP = (
    f"At --level engine, {DTYPE_AUTO} is the engine's auto: float32 on a CPU (exact against the float32 reference), "
    "the model's own dtype on a GPU."
)


def rule_items(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(i.strip().upper() for i in items if i.strip())


def _rows(token_ids: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(row) for row in token_ids)


@dataclass(frozen=True)
class ProbeRequest:
    """What the acceptance probe (``--level target`` and above) runs on."""

    token_ids: tuple[tuple[int, ...], ...] | None = option(
        None, flag="--token-ids", cli=False, parse=_rows, help="Prompts as token ids (the library's --token-ids)."
    )
    token_ids_file: Path | None = option(  # read by validate
        None,
        flag="--token-ids",
        metavar="FILE",
        help="--level target: a JSON list of token-id lists to probe with (default: the target's own continuations of "
        "varied prompts through its chat template, see --probe-text).",
    )
    reference_hidden_states: Path | None = option(
        None,
        metavar="FILE",
        help="--level target: a safetensors file of aux states saved by a trainer or engine (token_ids [T], "
        "hidden_states [K, T, Ht]); reports which target boundaries they are.",
    )
    oracle: Oracle | None = option(
        None,
        help="--level target: also check the reference target (transformers' model with its weights streamed from "
        "the checkpoint) against this implementation loaded whole in memory (transformers' from_pretrained).",
    )
    prompts: Path | None = option(  # one prompt per line, read by validate
        None,
        metavar="FILE",
        help="--level target: text prompts, one per line, tokenized with the target's tokenizer.json and continued by "
        "the target.",
    )
    steps: int = option(PROBE_STEPS, name="probe_steps", min=1, max=16, help="--level target: draft chain length.")
    text: ProbeText = option(
        PROBE_TEXTS[0],
        name="probe_text",
        help="--level target without --token-ids: the target's own continuations of the prompts, greedy "
        "(acceptance exactly as greedy speculative decoding) or sampled at temperature 1.",
    )
    positions: int = option(
        PROBE_POSITIONS,
        name="probe_positions",
        min=16,
        help="--level target: positions to score at least; while a comparison is undecided, more text up to 4 times "
        "as many.",
    )

    def given(self) -> dict[str, bool]:
        """Each probe option by its flag: whether it was set away from its default."""
        return given(self)


@dataclass(frozen=True)
class InProcessEngine:
    """``--level engine`` starting the engine itself, in its own environment."""

    python: Path | None = option(
        None,
        name="engine_python",
        metavar="PATH",
        panel=ENGINE_PANEL,
        help="--level engine: the Python of the engine environment (default: $EAGLE_CONVERT_ENGINE_PYTHON, else the "
        "venv in the current directory, .venv-engine or .venv-sglang, else the one `eagle-convert engine-env` builds).",
    )
    new_tokens: int = new_tokens_option()
    args: tuple[str, ...] = option(  # as given
        (),
        name="engine_arg",
        metavar="KEY=VALUE",
        repeat=True,
        show_default=False,
        panel=ENGINE_PANEL,
        help="--level engine: a setting of the engine in its own Python name (vLLM's LLM(...)/EngineArgs, SGLang's "
        "ServerArgs), e.g. tensor_parallel_size=2; the value is JSON when it parses, else text. Repeatable; validated "
        "by the engine before it loads anything. At every level, the deployment settings that decide what a selected "
        "release does with the draft: eagle3_layers_to_capture=[1,5,9] (trtllm: what TensorRT-LLM feeds it), "
        "platform=rocm and pipeline_parallel_size=2 (vllm: whether the target class captures).",
    )
    config_file: Path | None = option(  # read by validate
        None,
        name="engine_config",
        metavar="FILE",
        panel=ENGINE_PANEL,
        help="--level engine (the deployment settings: every level): engine settings as one JSON (.json) or YAML "
        "mapping, the same keys as --engine-arg, which wins over it.",
    )
    settings: Mapping[str, Any] = field(default_factory=dict)  # the engine's settings, given in the library


@dataclass(frozen=True)
class VerifyRequest:
    """One verify run, as asked: each field one option of the verify command."""

    target: Path | None = option(
        None, metavar="PATH", panel=CHECKS, help="Target model directory or config.json (N, family, rope, positions)."
    )
    engine: str | None = option(  # None: the releases a normalized draft records it was written for, else deployed
        None,
        setting="engine",
        metavar=ENGINES_METAVAR,
        complete=complete_engines,
        panel=CHECKS,
        help=f"{ENGINES_HELP} {RECORDED_HELP} --level engine runs SGLang when only SGLang releases are selected, "
        "else vLLM.",
    )
    level: Level = option(
        DEFAULT_LEVEL,
        panel=CHECKS,
        help="static: config and headers; tensors: also values; forward: the draft's forward; target: the probe; "
        "engine: also the draft in a real engine (`eagle-convert engine-env` builds one).",
    )
    strict: bool = option(False, panel=CHECKS, help="Ambiguous aux-id convention, missing ids and pickle are errors.")
    fail_level: FailLevel = option(
        DEFAULT_FAIL_LEVEL, setting="fail-level", panel=CHECKS, help="Lowest severity that fails [error]."
    )
    select: tuple[str, ...] = option(
        (),
        setting="select",
        metavar="RULES",
        parse=rule_items,
        panel=CHECKS,
        help="Only these rules (ids or prefixes, comma-separated).",
    )
    ignore: tuple[str, ...] = option(
        (),
        setting="ignore",
        metavar="RULES",
        parse=rule_items,
        panel=CHECKS,
        help="Skip these rules (ids or prefixes).",
    )
    compute_hashes: bool = option(
        True,
        flag="--no-hash",
        negate=True,
        panel=OUTPUT_PANEL,
        help="Skip the sha256 manifest of the checkpoint files.",
    )
    hub_token: str | None = option(  # never printed
        None,
        name="token",
        repr=False,
        panel=HUB,
        help="Hub token for private repos (default: HF_TOKEN or the login); never printed.",
    )
    aux_convention: str | None = option(  # a typo ('output_of') would leave the trained states unknown
        None,
        choices=CONVENTIONS,
        label="aux-layer convention",
        panel=CHECKS,
        help="Declare what the aux-layer ids mean (as the trainer used them), as inspect.",
    )
    probe: ProbeRequest = group(ProbeRequest(), panel=PROBE)
    compute: ComputeRequest = group(
        ComputeRequest(), panel=PROBE, when="--level forward/target", more={"dtype": ENGINE_DTYPE_AUTO_HELP}
    )
    engine_run: InProcessEngine | AttachedServer | None = group(None)  # None: the engine level with its defaults
    # the deployment settings that decide what a release feeds, at every level (TensorRT-LLM's
    # eagle3_layers_to_capture): given in the library, or as --engine-arg / --engine-config keys (gate/deployment.py)
    deployment: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, **options: Any) -> VerifyRequest:
        """The request from the options flat, as the command line names them (``probe_steps=4``, ``token=...``,
        ``token_ids=[[...]]`` or ``token_ids_file=PATH``); ``engine_run`` and ``deployment`` as they are."""
        return build(cls, options, "verify")

    @property
    def server(self) -> AttachedServer | None:
        """``--engine-url``: the running server the engine level measures the draft on."""
        return self.engine_run if isinstance(self.engine_run, AttachedServer) else None

    def validate(self) -> CheckedRequest:
        """Every usage error of the request, before any checkpoint is opened (exit 2 with a hint); the user's own
        files and the target's config read once, here."""
        check(self)  # every declared value: its choices, its range
        releases = resolve_engines(self.engine or DEFAULT_ENGINES)
        server = self.server
        if server is not None:  # --engine selects releases; the server is theirs when they are one engine's
            from eagle_convert.real_engine.attached import check_url

            engine = server.engine or (served_engine(releases) if self.engine else None)
            server = replace(server, url=check_url(server.url), engine=engine)
        level = self.level
        if server is not None:
            if level not in (DEFAULT_LEVEL, "engine"):
                raise UsageError(f"--engine-url measures the draft at --level engine, not --level {level}")
            level = "engine"  # --engine-url implies the engine level
        select, ignore = parse_rule_list(self.select), parse_rule_list(self.ignore)
        depth = LEVELS.index(level)
        named = [name for name, given in self.probe.given().items() if given]
        if named and depth < LEVELS.index("target"):
            raise UsageError(
                f"{', '.join(named)} {'sets' if len(named) == 1 else 'set'} the probe, which --level {level} does "
                "not run",
                hint="add --level target (or engine), or leave the probe options out",
            )
        if server is not None and self.target is None:
            raise UsageError("--engine-url needs --target: the target's config.json (its weights are optional)")
        if level in ("target", "engine") and self.target is None:
            raise UsageError(f"--level {level} runs the target model: pass --target DIR (with its weights)")
        if self.probe.prompts is not None and self.target is None:
            raise UsageError("--prompts needs --target (its tokenizer.json tokenizes them)")
        in_process = self.engine_run if isinstance(self.engine_run, InProcessEngine) else None
        _check_engine_run(in_process or server, level)
        deployment, engine_given = _deployment(self.deployment, in_process, releases)
        engine_only = {k: v for k, v in engine_given.items() if k not in deployment}
        if engine_only and level != "engine":
            raise UsageError(
                "--engine-arg and --engine-config set the engine of --level engine only",
                hint=_below_engine_hint(engine_only),
            )
        # The user's own files, each read once (a missing or empty file is their mistake: exit 2 before any work).
        from eagle_convert.probe.text import check_token_ids, read_prompts, read_token_ids

        token_ids = [list(row) for row in self.probe.token_ids] if self.probe.token_ids is not None else None
        if self.probe.token_ids_file is not None:
            token_ids = read_token_ids(self.probe.token_ids_file)
        prompts = read_prompts(self.probe.prompts) if self.probe.prompts is not None and token_ids is None else None
        engine_settings = None
        if level == "engine" and server is None:
            engine_settings = _engine_settings(in_process or InProcessEngine(), releases, engine_given)
        elif server is not None:  # the attached run's settings: what it asks the server for
            from eagle_convert.real_engine.base import EngineSettings

            engine_settings = EngineSettings(new_tokens=server.new_tokens)
        torch_here = _torch_here()
        torch_needed = depth >= LEVELS.index("tensors") and not (server is not None and not torch_here)
        if torch_needed:
            require_torch(f"--level {level}")  # tensor values and forward passes need the reference extra
        target_cfg = TargetConfig.from_path(self.target) if self.target is not None else None  # not a draft
        weights = target_cfg is not None and target_cfg.has_weights
        if torch_needed and level in ("target", "engine") and weights:  # the reference target runs here
            require_packages(f"--level {level}", REFERENCE_TARGET_PACKAGES)
        if engine_settings is not None and server is None:  # fail fast, before the probe runs, without the engine
            _engine_installed(engine_settings)
        if level in ("target", "engine") and server is None and not weights:
            raise UsageError(
                f"--level {level} runs the target model, but --target has no safetensors weights (config only)",
                path=self.target,
                hint="pass the target's checkpoint directory with its *.safetensors, or use --level tensors with a "
                "config-only target",
            )
        if token_ids is not None and target_cfg is not None and target_cfg.vocab_size:
            check_token_ids(token_ids, target_cfg.vocab_size)
        return CheckedRequest(
            self, level, releases, select, ignore, target_cfg, token_ids, prompts, engine_settings, server,
            probe_here=torch_here, deployment=deployment, engine_source="given" if self.engine else "default",
        )  # fmt: skip


@dataclass(frozen=True)
class CheckedRequest:
    """A request that passed :meth:`VerifyRequest.validate`, with what validation read: what every level runs on."""

    request: VerifyRequest
    level: str  # as run (--engine-url: engine)
    releases: list[Release]
    select: tuple[str, ...]
    ignore: tuple[str, ...]
    target: TargetConfig | None  # --target as read: its config, its folder, whether it has weights
    token_ids: list[list[int]] | None
    prompts: list[str] | None  # the text prompts as read (--prompts without --token-ids)
    engine_settings: EngineSettings | None  # --level engine: the engine started here, or the attached run's
    server: AttachedServer | None  # --engine-url
    probe_here: bool = True  # torch is importable: the tensor, forward and probe levels can run here
    deployment: Mapping[str, Any] = field(default_factory=dict)  # checked deployment settings every view reads
    # who chose the releases: "given" (--engine, [tool.eagle-convert] engine), "default" (deployed) or "draft" (the
    # engines a normalized draft records it was written for, which stand in for the default: with_recorded)
    engine_source: str = "given"

    @property
    def selection(self) -> str:
        """The releases as --engine spells them: as asked, ``deployed`` by default, the release names the draft's
        record chose (what re-runs the same check)."""
        if self.engine_source == "draft":
            return ",".join(r.name for r in self.releases)
        return self.request.engine or DEFAULT_ENGINES

    def with_recorded(self, config: Mapping[str, Any] | None) -> CheckedRequest:
        """This request for a checkpoint whose config is ``config``: where no engine was asked for and the draft
        records the engines it was normalized for, their releases instead of the deployed ones."""
        recorded = recorded_releases(config) if self.engine_source == "default" else []
        if not recorded:
            return self
        settings = self.engine_settings
        if settings is not None and self.server is None:  # the engine level runs the recorded engines' runner
            settings = _runner_settings(settings, recorded)
            _engine_installed(settings)
        return replace(self, releases=recorded, engine_source="draft", engine_settings=settings)

    @property
    def depth(self) -> int:
        return LEVELS.index(self.level)

    @property
    def engines(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.engine for r in self.releases))

    def check_source(self, path: str | Path) -> None:
        """What the level can read from ``path``, known from its name alone: a Hub repo is verified statically."""
        request = self.request
        if parse_repo_ref(str(path)) is not None and self.level != DEFAULT_LEVEL:
            raise UsageError(
                f"--level {self.level} reads tensor values; a Hub repo is verified with --level static",
                hint=f"`eagle-convert pull {path} DIR` first, then `eagle-convert verify DIR --level {self.level}"
                + (f" --target {request.target}" if request.target is not None else "")
                + (f" --engine {self.selection}" if self.engine_source != "default" else "")
                + "`",
            )


def parse_rule_list(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """'EC101,EC2' or ['EC101', 'EC2'] -> ('EC101', 'EC2'); a prefix selects every id that starts with it."""
    out = rule_items(value)
    unknown = [i for i in out if not any(r.startswith(i) for r in RULES)]
    if unknown:
        raise UsageError(f"no rule id starts with {', '.join(unknown)}", hint="run `eagle-convert rules` for the list")
    return out


def _torch_here() -> bool:
    try:
        require_torch("")
    except EagleConvertError:
        return False
    return True


def _deployment(
    given: Mapping[str, Any], engine: InProcessEngine | None, releases: list[Release]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the deployment settings every view reads, checked; the engine settings left for the engine level), the
    user's --engine-config and --engine-arg read once: a deployment key of a selected release (TensorRT-LLM's
    eagle3_layers_to_capture) is taken out of the engine settings at every level."""
    from eagle_convert.gate.deployment import check_deployment, split_settings

    deployment = check_deployment(given, releases)
    if engine is None or not (engine.args or engine.config_file or engine.settings):
        return deployment, {}
    from eagle_convert.real_engine.engine_args import engine_args

    from_engine, rest = split_settings({**engine.settings, **engine_args(engine.args, engine.config_file)}, releases)
    return {**deployment, **from_engine}, rest


def _below_engine_hint(settings: Mapping[str, Any]) -> str:
    from eagle_convert.gate.deployment import DEPLOYMENT_KEYS

    read: dict[str, list[str]] = {}
    for engine, keys in DEPLOYMENT_KEYS.items():
        for key in keys:
            if key in settings:
                read.setdefault(key, []).append(engine)
    if read:
        key, engines = next(iter(read.items()))
        return (
            f"{key} is read at every level only when a {' or '.join(engines)} release is selected "
            f"(--engine {engines[0]}@X.Y)"
        )
    return "add --level engine, or leave the engine settings out"


def _check_engine_run(run: InProcessEngine | AttachedServer | None, level: str) -> None:
    """The engine run's own options, each used by the path taken or refused: ``--engine-tokens`` /
    ``--engine-python`` only where an engine runs (never dropped at a lower level)."""
    if run is None or level == "engine" or not isinstance(run, InProcessEngine):
        return
    unused = [name for name, set_ in given(run).items() if set_ and name in ("--engine-tokens", "--engine-python")]
    if unused:
        raise UsageError(
            f"{', '.join(unused)} {'sets' if len(unused) == 1 else 'set'} the engine level's run, which --level "
            f"{level} does not run",
            hint="add --level engine (or --engine-url URL), or leave the engine options out",
        )


def _engine_settings(engine: InProcessEngine, releases: list[Release], settings: dict[str, Any]) -> EngineSettings:
    """The in-process engine's settings: the user's engine settings (read once by validate, less the deployment
    settings), and the engine that runs them, decided here once for the selected releases."""
    from eagle_convert.real_engine import EngineSettings

    return _runner_settings(
        EngineSettings(python=engine.python, new_tokens=engine.new_tokens, engine_args=settings), releases
    )


def _engine_installed(settings: EngineSettings) -> None:
    """EngineNotInstalledError (exit 2) before any work when the engine that runs the engine level has no
    environment (its own: SGLang's is not vLLM's)."""
    from eagle_convert.real_engine import engine_python

    engine_python(settings.python, engine=settings.engine)


def _runner_settings(settings: EngineSettings, releases: list[Release]) -> EngineSettings:
    """``settings`` for the engine that runs the engine level for ``releases`` (the one home of that decision),
    the user's engine settings checked by that engine's own names."""
    runner = engine_level_engine(releases)
    if settings.engine_args:
        from eagle_convert.real_engine.engine_args import check_engine_args

        check_engine_args(runner, dict(settings.engine_args))
    return replace(settings, engine=runner)

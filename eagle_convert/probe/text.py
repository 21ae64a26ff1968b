"""The probe's text: prompts through the target's chat template, and the target's own greedy continuations.

Default design: DEFAULT_PROMPTS (128 short instructions on 16 subjects), each rendered as one user turn through
the target's chat template (``chat_template.jinja`` or ``tokenizer_config.json``, rendered with jinja2) and tokenized
with its ``tokenizer.json``; the target continues each greedily for up to NEW_TOKENS tokens (or until its
end-of-sequence token), ROUND prompts at a time. Greedy text is what greedy speculative decoding sees, so acceptance
measured along it is the engines' acceptance. A target without a tokenizer gets seeded random one-token prompts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from eagle_convert.errors import InputError, UsageError, check_choice
from eagle_convert.read.jsonstrict import load_json_object
from eagle_convert.read.regular import read_text, refuse_pointer_file
from eagle_convert.reference.budget import NEW_TOKENS as NEW_TOKENS  # new tokens per prompt (one place)
from eagle_convert.reference.budget import ROUND as ROUND  # prompts per generation round
from eagle_convert.schemas import TOKEN_IDS, violation
from eagle_convert.version import docs_url

_SUBJECTS = (
    "tides", "the Great Wall of China", "octopuses", "compound interest", "thunderstorms", "the violin",
    "bicycles", "the Renaissance", "antibiotics", "hurricanes", "sourdough", "the speed of light",
    "elephants", "spreadsheets", "the Amazon river", "paper money",
)  # fmt: skip
_TEMPLATES = (
    "Explain how {} works in simple terms.",
    "Write a short story about {}.",
    "Give me three surprising facts about {}.",
    "Describe the history of {} in a few paragraphs.",
    "Write a friendly email to a colleague about {}.",
    "What are common misconceptions about {}?",
    "Compose a limerick about {}.",
    "How would you teach a class about {}? Give a plan.",
)
DEFAULT_PROMPTS = tuple(t.format(s) for t in _TEMPLATES for s in _SUBJECTS)  # 128; each round spans two templates


ProbeText = Literal[
    "greedy", "sampled"
]  # the target's own continuations of the prompts: greedy, or sampled at temperature 1
TEXTS: tuple[ProbeText, ...] = get_args(ProbeText)


def check_text(text: str) -> str:
    """``text`` when it is one of :data:`TEXTS`; a usage error naming the choices otherwise."""
    return check_choice("probe text", text, TEXTS)


@dataclass(frozen=True)
class Tokenizer:
    """The target's tokenizer (``tokenizers``) and chat template, when it has them."""

    encoder: Any
    template: str | None
    specials: dict[str, str]

    def prompt_ids(self, text: str) -> list[int]:
        """``text`` as one user turn through the chat template (as is when there is none)."""
        if self.template is not None:
            text = _render(self.template, text, self.specials)
        return list(self.encoder.encode(text, add_special_tokens=self.template is None).ids)


def load_tokenizer(target_dir: Path) -> Tokenizer | None:
    """The target's tokenizer, or None when it has no ``tokenizer.json``."""
    directory = target_dir if target_dir.is_dir() else target_dir.parent
    vocab_file = directory / "tokenizer.json"
    if not vocab_file.is_file():
        return None
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise UsageError(
            "reading the target's tokenizer needs the tokenizers package", hint="pip install tokenizers"
        ) from None
    settings: dict[str, Any] = {}
    config = directory / "tokenizer_config.json"
    if config.is_file():
        settings = load_json_object(config, InputError, "tokenizer_config.json")
    template = settings.get("chat_template")
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        template = read_text(jinja, "the chat template")
    specials = {k: v for k, v in settings.items() if k.endswith("_token") and isinstance(v, str)}
    refuse_pointer_file(vocab_file)  # the tokenizers library would only say it is not JSON
    return Tokenizer(HFTokenizer.from_file(str(vocab_file)), template if isinstance(template, str) else None, specials)


def _render(template: str, text: str, specials: dict[str, str]) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def refuse(message: str) -> None:
        raise UsageError(f"the target's chat template refused the prompt: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    messages = [{"role": "user", "content": text}]
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=True, raise_exception=refuse, **specials
    )


def read_token_ids(path: Path) -> list[list[int]]:
    """``--token-ids FILE``: a JSON list of token-id lists (non-negative integers)."""
    from eagle_convert.read.jsonstrict import JsonSyntaxError, loads_strict

    try:
        value = loads_strict(read_text(path, "token ids"))
    except JsonSyntaxError as exc:
        raise InputError(f"cannot read token ids: {exc}", path=path, hint=exc.hint) from None
    wrong = violation(value, TOKEN_IDS)
    if wrong is not None:
        raise InputError(
            f"token ids{wrong.where()}: {wrong.reason}",
            path=path,
            hint="write a JSON list of token-id lists, e.g. [[1, 15043, 29892], [1, 450, 4996]] "
            f"(the schema: {docs_url('eagle_convert/schemas/token-ids.schema.json')})",
        )
    return list(value)


def check_token_ids(ids: list[list[int]], vocab_size: int) -> None:
    """Every id of ``--token-ids`` inside the target's vocabulary: one past it is the user's mistake (a list made for
    another tokenizer), a UsageError before any work, never a finding against the draft."""
    for n, row in enumerate(ids):
        bad = next((i for i in row if i >= vocab_size), None)
        if bad is not None:
            raise UsageError(
                f"--token-ids: id {bad} (in list {n}) is past the target's vocabulary of {vocab_size} ids",
                hint="write the token ids with the target's own tokenizer, or pass --prompts to tokenize text",
            )


def read_prompts(path: Path) -> list[str]:
    lines = [line for line in read_text(path, "prompts").splitlines() if line.strip()]
    if not lines:
        raise InputError("no prompts in the file", path=path, hint="write one prompt per line")
    return lines


def prompt_pool(target_dir: Path, vocab: int, prompts: list[str] | None = None) -> list[list[int]]:
    """Token ids of ``prompts`` (default DEFAULT_PROMPTS) through the target's chat template; seeded random one-token
    prompts when the target has no tokenizer (an error when prompts were given)."""
    tokenizer = load_tokenizer(target_dir)
    if tokenizer is None:
        if prompts is not None:
            raise InputError(
                "the target has no tokenizer.json to tokenize --prompts with",
                path=target_dir,
                hint="pass --token-ids FILE instead",
            )
        return _seeded_one_token_prompts(vocab, len(DEFAULT_PROMPTS))
    return [tokenizer.prompt_ids(p) for p in (prompts if prompts is not None else DEFAULT_PROMPTS)]


def _seeded_one_token_prompts(vocab: int, count: int) -> list[list[int]]:
    """``count`` one-token prompts drawn from ``vocab`` with seed 0: torch's generator where torch is here (the ids
    every earlier run used), else Python's own, so that ``--engine-url`` runs from the core install (issue 40)."""
    try:
        import torch
    except ImportError:
        import random

        draw = random.Random(0)
        return [[draw.randrange(vocab)] for _ in range(count)]
    g = torch.Generator().manual_seed(0)
    return [[int(t)] for t in torch.randint(0, vocab, (count,), generator=g)]

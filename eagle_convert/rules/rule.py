"""The one record a rule is: everything about a rule id, declared once (the topic modules beside this one hold the
records, :mod:`eagle_convert.rules.registry` the table of them)."""

from __future__ import annotations

from dataclasses import dataclass

from eagle_convert import engines
from eagle_convert.version import docs_url

# the modelled engines (eagle_convert/engines.py): a rule concerns all of them unless it names some
ALL_ENGINES = engines.NAMES


@dataclass(frozen=True)
class Rule:
    """Everything about one rule, in one record: the registry is the only place a rule's facts live."""

    id: str
    name: str
    severity: str  # the severity of its findings (``--strict`` raises strict_error rules to errors)
    summary: str
    level: str = "static"  # the lowest verify level that runs it
    fixable: bool = False  # `eagle-convert normalize` resolves it
    fix: str = ""  # what to do about a finding (every fixable rule names normalize)
    strict_error: bool = False  # `verify --strict` makes its findings errors (a gate that cannot tell must not pass)
    needs_headers: bool = False  # compares tensor headers with the config: skipped when the weights are pickle
    needs_target: bool = False  # compares the draft with the target: skipped without --target
    blocks_normalize: bool = False  # an error of this rule means normalize cannot convert without guessing
    engines: tuple[str, ...] = ALL_ENGINES  # the engines whose behaviour it concerns

    @property
    def docs(self) -> str:
        """Where the rule is documented, as a URL (docs/rules.md is generated from this registry)."""
        return docs_url("docs/rules.md", self.id.lower())


# the fix of a rule normalize resolves by rewriting names or config
REWRITES = "run `eagle-convert normalize SRC OUT`: it rewrites this"

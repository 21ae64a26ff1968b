"""The rule registry: every finding the tool can report has a stable id here.

Ids are a public contract (users select and ignore them in CI): never renumber, only add. Groups:
EC0xx identity and files, EC1xx aux layers, EC2xx EAGLE3.1 and norm flags, EC3xx tensors and shapes,
EC4xx vocabulary mapping, EC5xx config fields, EC6xx tensor values, EC7xx measured (forward, probe, engine).
Each rule's record lives in the module of what it checks (``identity``, ``aux_layers``, ``flags``, ``config``,
``tensors``, ``vocabulary``, ``measured``); this module holds the table of them, the lookups and what normalize fixes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from eagle_convert.rules import aux_layers, config, flags, identity, measured, tensors, vocabulary
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.rule import Rule

# each verify level runs the rules of the levels before it
Level = Literal["static", "tensors", "forward", "target", "engine"]
LEVELS: tuple[Level, ...] = get_args(Level)

# The order of `eagle-convert rules`, `--json` and docs/rules.md, a public listing: the blocks in the order the rules
# were added. A new rule goes at the end of its block's tuple, or in a new block at the end of this one.
_RULES: tuple[Rule, ...] = (
    *identity.DRAFT_AND_FILES,  # EC001-EC014
    *aux_layers.IDS,  # EC101-EC108
    *flags.EAGLE3_1,  # EC201-EC208
    *config.CLASS_AND_KEYS,  # EC011-EC021
    *aux_layers.CAPTURE,  # EC109-EC116
    *flags.BIAS_AND_MLA,  # EC209-EC210
    *tensors.HEADERS,  # EC301-EC306
    *vocabulary.VOCABULARY,  # EC401-EC414
    *config.FIELDS,  # EC501-EC508
    *tensors.VALUES,  # EC601-EC605
    *measured.FORWARD_AND_PROBE,  # EC701-EC716
    *flags.ENGINE_MISREAD,  # EC211
    *measured.ENGINE_RUN,  # EC721-EC728
)

RULES: dict[str, Rule] = {rule.id: rule for rule in _RULES}


NOT_EAGLE3 = "EC001"  # the draft is not EAGLE3: normalize refuses it, so no other finding of it is fixable
NOT_EAGLE3_FIX = "not an EAGLE3 draft (EC001): normalize converts EAGLE3 drafts only; retrain or export it as EAGLE3"
# the ids contradict the provenance record: which hidden states the draft was trained on is unknown until the user
# says, so no finding that depends on them is fixable (normalize refuses the draft without --aux-convention)
RECORD_CONTRADICTED = "EC113"
DEPENDS_ON_READING = frozenset({"EC103", "EC104", "EC109"})
RECORD_CONTRADICTED_FIX = (
    "the aux-layer ids contradict eagle-convert's provenance record (EC113): normalize refuses the draft until "
    "--aux-convention output-of|input-to says which reading of the ids is true; pass it to verify as well"
)


@dataclass(frozen=True)
class Fixes:
    """What ``eagle-convert normalize`` fixes among one report's findings. The rule ids present are collected once
    (:meth:`among`), so asking about every finding of a report costs time linear in the findings (a set rebuilt per
    finding made ``inspect --json`` of 20,000 findings take 15 s)."""

    ids: frozenset[str]

    @classmethod
    def among(cls, findings: Iterable[Finding]) -> Fixes:
        return cls(frozenset(f.rule_id for f in findings))

    def refusal(self, rule_id: str) -> str | None:
        """Why normalize does not fix a finding of ``rule_id`` although the rule is fixable, or None."""
        if NOT_EAGLE3 in self.ids:
            return NOT_EAGLE3_FIX
        if RECORD_CONTRADICTED in self.ids and rule_id in DEPENDS_ON_READING:
            return RECORD_CONTRADICTED_FIX
        return None

    def fixable(self, rule_id: str) -> bool:
        """The rule's own answer, except beside EC001, where normalize refuses the draft and fixes nothing, and for
        the rules that depend on the trained hidden states beside EC113, where the ids contradict the provenance
        record."""
        rule = RULES.get(rule_id)
        return bool(rule and rule.fixable) and self.refusal(rule_id) is None

    def fields(self, rule_id: str) -> dict[str, Any]:
        """The ``fixable`` and ``fix`` fields every finding carries in JSON (unregistered ids: not fixable)."""
        rule = RULES.get(rule_id)
        refusal = self.refusal(rule_id)
        if rule is not None and rule.fixable and refusal is not None:
            return {"fixable": False, "fix": refusal}
        return {"fixable": rule.fixable if rule else False, "fix": rule.fix if rule else ""}


def fixable(rule_id: str, findings: Iterable[Finding] = ()) -> bool:
    """Whether ``eagle-convert normalize`` fixes a finding of ``rule_id`` among ``findings`` (:meth:`Fixes.fixable`;
    for one finding: a loop over a report's findings builds :class:`Fixes` once)."""
    return Fixes.among(findings).fixable(rule_id)


def fix_fields(rule_id: str, findings: Iterable[Finding] = ()) -> dict[str, Any]:
    """The ``fixable`` and ``fix`` fields of one finding of ``rule_id`` among ``findings`` (:meth:`Fixes.fields`)."""
    return Fixes.among(findings).fields(rule_id)


def find_rule(code: str) -> Rule:
    """The rule with id ``code`` (case-insensitive); a usage error naming the id otherwise."""
    from eagle_convert.errors import UsageError

    rule = RULES.get(code.strip().upper())
    if rule is None:
        raise UsageError(f"no rule {code!r}", hint="run `eagle-convert rules` for the list of rule ids")
    return rule


def finding(
    rule_id: str,
    message: str,
    *,
    severity: str | None = None,
    file: str | None = None,
    pointer: str | None = None,
    subject: str | None = None,
    expected: Any = None,
    actual: Any = None,
    engine: str | None = None,
) -> Finding:
    """A finding for a registered rule; its severity defaults to the rule's."""
    rule = RULES[rule_id]
    return Finding(rule.id, severity or rule.severity, message, file, pointer, expected, actual, subject, engine)

"""The rule registry and the one finding type every part reports with."""

from eagle_convert.rules.finding import SEVERITIES, Finding
from eagle_convert.rules.registry import LEVELS, RULES, find_rule, finding, fix_fields
from eagle_convert.rules.rule import Rule

__all__ = ["LEVELS", "RULES", "SEVERITIES", "Finding", "Rule", "find_rule", "finding", "fix_fields"]

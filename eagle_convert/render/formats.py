"""Machine formats of a `VerifyReport`: JSON, SARIF 2.1.0, JUnit XML, GitHub annotations and a Markdown summary.

Every renderer is a pure function of the report (plain strings and dicts, no rich, no torch). Rule names and
descriptions come from the live registry `rules.RULES`, so a rule added there shows up here without edits.
"""

from __future__ import annotations

import hashlib
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import quote

from eagle_convert.render.escape import markdown_code, markdown_text, one_line
from eagle_convert.render.grouping import by_release
from eagle_convert.render.json_output import dumps
from eagle_convert.rules.finding import Finding
from eagle_convert.rules.registry import RULES, Fixes
from eagle_convert.verify.report import VerifyReport
from eagle_convert.version import PROJECT_URL, TOOL

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
INFORMATION_URI = PROJECT_URL
CHECKPOINT_BASE = "CHECKPOINT"
FINGERPRINT_KEY = "eagleConvert/v1"

_SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_GITHUB_COMMAND = {"error": "error", "warning": "warning", "info": "notice"}
# Characters XML 1.0 cannot carry even escaped (C0 controls except tab/newline/CR, lone surrogates, U+FFFE/U+FFFF).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def to_json(report: VerifyReport, indent: int | None = 2) -> str:
    """The JSON contract (`VerifyReport.to_dict`), pretty-printed (``indent`` None: one line), and a newline."""
    return dumps(report.to_dict(), indent)


# --- SARIF -------------------------------------------------------------------------------------------------------


def _posix(name: str) -> str:
    return name.replace("\\", "/")


def _relative_uri(name: str) -> str:
    """A checkpoint-relative file name as a relative URI reference (percent-encoded, so `a:b` is not a scheme; a lone
    surrogate, which UTF-8 cannot encode, as the bytes surrogatepass gives it)."""
    return quote(_posix(name), safe="/", errors="surrogatepass")


def _checkpoint_uri(path: str) -> str:
    uri = Path(os.path.abspath(path)).as_uri()
    return uri if uri.endswith("/") else uri + "/"


def fingerprint(finding: Finding) -> str:
    """A stable identity for a finding across runs: sha256 of rule id, file, pointer and message."""
    parts = (finding.rule_id, finding.file or "", finding.pointer or "", finding.message)
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _sarif_rule(rule_id: str) -> dict[str, Any]:
    rule = RULES[rule_id]
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": f"{rule.id} {rule.name} (default severity: {rule.severity}). {rule.summary}"},
        "helpUri": rule.docs,
        "defaultConfiguration": {"level": _SARIF_LEVEL[rule.severity]},
        **({"help": {"text": f"Fix: {rule.fix}"}} if rule.fix else {}),
        "properties": {"fixable": rule.fixable},
    }


def _sarif_result(finding: Finding, rule_index: dict[str, int], artifact_index: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {"ruleId": finding.rule_id}
    if finding.rule_id in rule_index:
        result["ruleIndex"] = rule_index[finding.rule_id]
    result["level"] = _SARIF_LEVEL[finding.severity]
    result["message"] = {"text": finding.message}
    location: dict[str, Any] = {}
    if finding.file is not None:
        artifact: dict[str, Any] = {"uri": _relative_uri(finding.file), "uriBaseId": CHECKPOINT_BASE}
        if finding.file in artifact_index:
            artifact["index"] = artifact_index[finding.file]
        location["physicalLocation"] = {"artifactLocation": artifact}
    if finding.pointer is not None:
        location["logicalLocations"] = [{"name": finding.pointer, "kind": "member"}]
    if location:
        result["locations"] = [location]
    result["partialFingerprints"] = {FINGERPRINT_KEY: fingerprint(finding)}
    extra = {
        key: value for key, value in (("expected", finding.expected), ("actual", finding.actual)) if value is not None
    }
    if extra:
        result["properties"] = extra
    return result


def to_sarif(report: VerifyReport) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run: every registered rule, one result per finding, the hashed files as artifacts.

    File locations are relative to the uri base id CHECKPOINT, which `originalUriBaseIds` resolves to the checkpoint
    directory. A finding without a file (and without a pointer) has no location.
    """
    data = report.to_dict()
    rule_ids = list(RULES)
    rule_index = {rule_id: i for i, rule_id in enumerate(rule_ids)}
    artifact_index = {f.name: i for i, f in enumerate(report.files)}
    artifacts: list[dict[str, Any]] = []
    for digest in report.files:
        artifact: dict[str, Any] = {
            "location": {"uri": _relative_uri(digest.name), "uriBaseId": CHECKPOINT_BASE},
            "length": digest.size,
        }
        if digest.sha256 is not None:
            artifact["hashes"] = {"sha-256": digest.sha256}
        artifacts.append(artifact)
    invocation: dict[str, Any] = {"executionSuccessful": report.status != "error"}
    if report.status == "error":
        text = _error_message(report)
        if report.error is not None and report.error.hint:
            text += f" Hint: {report.error.hint}"
        invocation["toolExecutionNotifications"] = [{"level": "error", "message": {"text": text}}]
    if report.error is not None:
        invocation["exitCode"] = report.error.exit_code
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": TOOL,
                "version": data["version"],
                "informationUri": INFORMATION_URI,
                "rules": [_sarif_rule(rule_id) for rule_id in rule_ids],
            }
        },
        "originalUriBaseIds": {CHECKPOINT_BASE: {"uri": _checkpoint_uri(report.path)}},
        "invocations": [invocation],
        "artifacts": artifacts,
        "results": [_sarif_result(f, rule_index, artifact_index) for f in report.findings],
        "properties": {"status": report.status, "level": report.level, "engine": report.engine},
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def to_sarif_text(report: VerifyReport) -> str:
    """The SARIF log of :func:`to_sarif` as JSON text, with a trailing newline."""
    return dumps(to_sarif(report))


# --- JUnit -------------------------------------------------------------------------------------------------------


def _error_message(report: VerifyReport) -> str:
    """The message of the error a report stopped at (``status`` "error"), or a stand-in when it carries none."""
    return report.error.message if report.error is not None else "The checkpoint could not be verified."


def _xml_text(text: str) -> str:
    """Text XML 1.0 can carry and a terminal cannot act on: what XML forbids as U+FFFD, every other control character
    but the newlines of a multi-line text escaped (``one_line``)."""
    return "\n".join(one_line(line) for line in _XML_INVALID.sub("\ufffd", text).split("\n"))


def _finding_line(finding: Finding) -> str:
    """One line per finding in a testcase's text, whatever its strings hold."""
    where = finding.pointer or finding.file
    line = f"{finding.severity} {where}: {finding.message}" if where else f"{finding.severity}: {finding.message}"
    return one_line(line)


def _rule_name(report: VerifyReport, rule_id: str) -> str:
    if rule_id in RULES:
        return RULES[rule_id].name
    return next((c.name for c in report.checks if c.rule_id == rule_id and c.name), "")


def to_junit(report: VerifyReport) -> str:
    """JUnit XML: one testcase per check. A check fails only when it has a finding at error severity.

    Warnings and infos never fail a testcase; they are listed in its `<system-out>`. Findings of a rule that has no
    check outcome still get a testcase, so nothing is dropped. An input error adds a testcase "input" with `<error>`.
    """
    by_rule: dict[str, list[Finding]] = {}
    for finding in report.findings:
        by_rule.setdefault(finding.rule_id, []).append(finding)
    cases: list[tuple[str, str, str, str]] = [(c.rule_id, c.name, c.outcome, c.reason) for c in report.checks]
    checked = {c.rule_id for c in report.checks}
    cases += [(rule_id, _rule_name(report, rule_id), "fail", "") for rule_id in by_rule if rule_id not in checked]

    suite = ET.Element("testsuite", name=_xml_text(report.path))
    failures = skipped = errors = 0
    for rule_id, name, outcome, reason in cases:
        label = f"{rule_id} {name}".strip()
        case = ET.SubElement(suite, "testcase", classname=f"{TOOL}.{rule_id}", name=_xml_text(label))
        findings = by_rule.get(rule_id, [])
        errored = [f for f in findings if f.severity == "error"]
        if outcome == "skipped":
            skipped += 1
            ET.SubElement(case, "skipped", message=_xml_text(reason or "skipped"))
        elif outcome == "fail" and errored:
            failures += 1
            more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
            failure = ET.SubElement(case, "failure", message=_xml_text(errored[0].message + more), type="error")
            failure.text = _xml_text("\n".join(_finding_line(f) for f in findings))
        elif findings:
            ET.SubElement(case, "system-out").text = _xml_text("\n".join(_finding_line(f) for f in findings))
    if report.status == "error":
        errors += 1
        case = ET.SubElement(suite, "testcase", classname=f"{TOOL}.input", name="input")
        element = ET.SubElement(case, "error", message=_xml_text(_error_message(report)), type="input")
        if report.error is not None and report.error.hint:
            element.text = _xml_text(f"Hint: {report.error.hint}")
    counts = {"tests": str(len(suite)), "failures": str(failures), "errors": str(errors), "skipped": str(skipped)}
    suite.attrib.update(counts)
    root = ET.Element("testsuites", {"name": f"{TOOL} verify", **counts})
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# --- GitHub workflow commands ------------------------------------------------------------------------------------


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _display_path(report: VerifyReport, name: str, cwd: str) -> str:
    full = os.path.join(report.path, name)
    try:
        return _posix(os.path.relpath(full, cwd))
    except ValueError:  # another drive on Windows: no relative path exists
        return _posix(os.path.abspath(full))


def github_annotations(report: VerifyReport, *, cwd: str | None = None) -> str:
    """One GitHub Actions workflow command per finding (`::error`, `::warning`, `::notice`), escaped.

    `file=` is the finding's file relative to `cwd` (default: the current directory), as Actions resolves it against
    the workspace. An input error becomes one more `::error` line, so a failed run never annotates nothing.
    """
    base = os.getcwd() if cwd is None else cwd
    lines: list[str] = []
    for finding in report.findings:
        props = []
        if finding.file is not None:
            props.append(f"file={_escape_property(_display_path(report, finding.file, base))}")
        props.append(f"title={_escape_property(f'{finding.rule_id} {_rule_name(report, finding.rule_id)}'.strip())}")
        command = _GITHUB_COMMAND.get(finding.severity, "warning")
        lines.append(f"::{command} {','.join(props)}::{_escape_data(finding.message)}")
    if report.status == "error":
        message = _error_message(report)
        lines.append(f"::error title={_escape_property(f'{TOOL} verify')}::{_escape_data(message)}")
    return _lines(lines)


def _lines(lines: list[str]) -> str:
    """Each line ended by a newline and kept one line whatever its strings hold: every control character left in it
    (a workflow command's CR and LF are already GitHub's %0D and %0A) written as a ``one_line`` escape, so no line
    forges a second one."""
    return "".join(one_line(line) + "\n" for line in lines)


# --- concise -----------------------------------------------------------------------------------------------------


def to_concise(report: VerifyReport, *, named: bool = False) -> str:
    """One greppable line per finding, ``PATH[:POINTER]: RULE [*] SEVERITY MESSAGE`` (``[*]``: normalize fixes
    it; a finding several releases share: one line naming them all), then one summary line, as ruff's concise
    output; an input error is one ``PATH: error: MESSAGE`` line. ``named`` (several checkpoints in one run): the
    summary line starts with ``PATH: `` too."""
    lines, fixes = [], Fixes.among(report.findings)
    for f in by_release(report.findings):  # one line for a finding several releases share
        where = os.path.join(report.path, f.file) if f.file else report.path
        pointer = f":{f.pointer}" if f.pointer else ""
        mark = " [*]" if fixes.fixable(f.rule_id) else ""
        lines.append(f"{where}{pointer}: {f.rule_id}{mark} {f.severity} {' '.join(f.message.split())}")
    if report.status == "error":
        lines.append(f"{report.path}: error: {report.error.message if report.error else 'could not be verified'}")
    else:
        s = report.summary()
        lines.append(
            (f"{report.path}: " if named else "")
            + f"{report.status.upper()} {s['errors']} error(s), {s['warnings']} warning(s), {s['infos']} info "
            f"(level {report.level}, engine {report.engine}, fail level {report.fail_level})"
        )
    return _lines(lines)


# --- Markdown ----------------------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    """Text safe in a GFM table cell (or any inline Markdown): :func:`markdown_text`."""
    return markdown_text(text)


def _md_code(text: str | None, *, table: bool = True) -> str:
    """A code span (:func:`markdown_code`); nothing for no text."""
    return markdown_code(text, table=table) if text else ""


def _md_plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_STATUS_HEADING = {"pass": "✅ passed", "fail": "❌ failed", "error": "⚠️ could not verify"}
_OUTCOME_MARK = {"pass": "✅", "fail": "❌", "skipped": "⏭️"}


def markdown_summary(report: VerifyReport) -> str:
    """A Markdown summary for `$GITHUB_STEP_SUMMARY`: verdict, counts, findings, checks run and the hash manifest."""
    counts = report.summary()
    heading = _STATUS_HEADING.get(report.status, report.status)
    out = [f"## eagle-convert verify {heading}: {_md_code(report.path, table=False)}", ""]
    settings = " · ".join(
        f"{label} {_md_code(value, table=False)}"
        for label, value in (("level", report.level), ("engine", report.engine), ("fails at", report.fail_level))
    )
    out.append(
        f"**{_md_plural(counts['errors'], 'error')}**, {_md_plural(counts['warnings'], 'warning')}, "
        f"{_md_plural(counts['infos'], 'info')} · {settings}"
    )
    out.append("")
    if report.status == "error":
        out.append(f"> **Error:** {_md_cell(_error_message(report))}")
        if report.error is not None and report.error.hint:
            out.append(f"> **Hint:** {_md_cell(report.error.hint)}")
        out.append("")

    out += ["### Findings", ""]
    if report.findings:
        out += ["| Rule | Severity | File | Pointer | Message |", "|---|---|---|---|---|"]
        for f in report.findings:
            rule = _md_cell(f"{f.rule_id} {_rule_name(report, f.rule_id)}".strip())
            cells = (rule, f.severity, _md_code(f.file), _md_code(f.pointer), _md_cell(f.message))
            out.append("| " + " | ".join(cells) + " |")
    else:
        out.append("No findings.")
    out.append("")

    tally = {o: sum(c.outcome == o for c in report.checks) for o in ("pass", "fail", "skipped")}
    out.append("<details>")
    out.append(
        f"<summary>{_md_plural(len(report.checks), 'check')} run: {tally['pass']} passed, {tally['fail']} failed,"
        f" {tally['skipped']} skipped</summary>"
    )
    out.append("")
    for c in report.checks:
        line = f"- {_OUTCOME_MARK.get(c.outcome, '')} {_md_cell(c.rule_id)} {_md_cell(c.name)}: {c.outcome}"
        out.append(line + (f" ({_md_cell(c.reason)})" if c.reason else ""))
    if not report.checks:
        out.append("No checks ran.")
    out += ["", "</details>", ""]

    out += ["### SHA-256 manifest", ""]
    if report.files:
        out += ["| File | Size (bytes) | SHA-256 |", "|---|--:|---|"]
        for d in report.files:
            digest = _md_code(d.sha256) if d.sha256 is not None else "not computed"
            out.append(f"| {_md_code(d.name)} | {d.size} | {digest} |")
    else:
        out.append("No files.")
    return "\n".join(out) + "\n"


__all__ = ["fingerprint", "github_annotations", "markdown_summary", "to_json", "to_junit", "to_sarif"]

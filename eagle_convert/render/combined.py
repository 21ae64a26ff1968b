"""Several verify reports (``eagle-convert verify A B ...``) as one document per format.

One report keeps the single-report formats of ``render.formats`` exactly. Several become: a JSON array of the
reports (eagle_convert/schemas/verify-reports.schema.json); one SARIF run holding every checkpoint's results, each
checkpoint under its own uri base id (code scanning takes one run per tool); one JUnit ``<testsuites>`` with a
``<testsuite>`` per checkpoint; and the line formats (GitHub annotations, concise, the Markdown summary) one after
the other.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from functools import partial
from typing import Any

from eagle_convert.render import formats
from eagle_convert.render.json_output import dumps
from eagle_convert.verify.report import VerifyReport
from eagle_convert.version import TOOL

_STATUS_RANK = ("pass", "fail", "error")


def to_json(reports: list[VerifyReport], indent: int | None = 2) -> str:
    """A JSON array of the reports, in the order the paths were given (``indent`` None: one line)."""
    return dumps([r.to_dict() for r in reports], indent)


def _rebase(node: Any, old: str, new: str) -> Any:
    """``node`` with every ``"uriBaseId": old`` replaced by ``new`` (artifact locations, in artifacts and results)."""
    if isinstance(node, dict):
        return {k: (new if k == "uriBaseId" and v == old else _rebase(v, old, new)) for k, v in node.items()}
    if isinstance(node, list):
        return [_rebase(v, old, new) for v in node]
    return node


def to_sarif(reports: list[VerifyReport]) -> dict[str, Any]:
    """One SARIF 2.1.0 run for every checkpoint: the n-th checkpoint's files under uri base id ``CHECKPOINT<n>``
    (1-based), its artifacts and results appended (artifact indexes shifted), and one invocation that fails when
    any checkpoint could not be verified."""
    runs = [formats.to_sarif(r)["runs"][0] for r in reports]
    merged: dict[str, Any] = {
        "tool": runs[0]["tool"],
        "originalUriBaseIds": {},
        "invocations": [],
        "artifacts": [],
        "results": [],
    }
    notifications: list[dict[str, Any]] = []
    exit_codes: list[int] = []
    for n, (report, run) in enumerate(zip(reports, runs, strict=True), start=1):
        base = f"{formats.CHECKPOINT_BASE}{n}"
        run = _rebase(run, formats.CHECKPOINT_BASE, base)
        merged["originalUriBaseIds"][base] = run["originalUriBaseIds"][formats.CHECKPOINT_BASE]
        offset = len(merged["artifacts"])
        merged["artifacts"] += run["artifacts"]
        for result in run["results"]:
            for location in result.get("locations", []):
                artifact = location.get("physicalLocation", {}).get("artifactLocation", {})
                if "index" in artifact:
                    artifact["index"] += offset
            merged["results"].append(result)
        invocation = run["invocations"][0]
        for note in invocation.get("toolExecutionNotifications", []):
            notifications.append({**note, "message": {"text": f"{report.path}: {note['message']['text']}"}})
        if "exitCode" in invocation:
            exit_codes.append(invocation["exitCode"])
    invocation = {"executionSuccessful": all(r.status != "error" for r in reports)}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    if exit_codes:
        invocation["exitCode"] = max(exit_codes)
    merged["invocations"] = [invocation]
    merged["properties"] = {
        "status": worst_status(reports),
        "level": reports[0].level,
        "engine": reports[0].engine,
        "checkpoints": [{"path": r.path, "status": r.status} for r in reports],
    }
    return {"$schema": formats.SARIF_SCHEMA, "version": formats.SARIF_VERSION, "runs": [merged]}


def to_junit(reports: list[VerifyReport]) -> str:
    """One ``<testsuites>`` holding each checkpoint's ``<testsuite>`` (named by its path), with summed counts."""
    root = ET.Element("testsuites", name=f"{TOOL} verify")
    for report in reports:
        root.extend(ET.fromstring(formats.to_junit(report)).findall("testsuite"))
    for count in ("tests", "failures", "errors", "skipped"):
        root.set(count, str(sum(int(suite.get(count, "0")) for suite in root)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def joined(render: Callable[[VerifyReport], str]) -> Callable[[list[VerifyReport]], str]:
    """A line format of one report applied to each report in turn (annotations, concise lines, summaries)."""
    return lambda reports: "".join(render(r) for r in reports)


def worst_status(reports: list[VerifyReport]) -> str:
    """``error`` over ``fail`` over ``pass``."""
    return max((r.status for r in reports), key=_STATUS_RANK.index)


def to_sarif_text(reports: list[VerifyReport]) -> str:
    return dumps(to_sarif(reports))


# --format NAME with several reports (human: the JSON array to --output, as one report writes its JSON there)
RENDERERS: dict[str, Callable[[list[VerifyReport]], str]] = {
    "human": to_json,
    "json": to_json,
    "github": joined(formats.github_annotations),
    "sarif": to_sarif_text,
    "junit": to_junit,
    "concise": joined(partial(formats.to_concise, named=True)),  # each summary line names its checkpoint
}

"""``eagle-convert normalize`` for people: the plan or what was written, the config changes, the tensors that
changed and the findings."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from eagle_convert.render import detail
from eagle_convert.render.cells import human_bytes, kv_row, kv_table
from eagle_convert.render.findings_table import render_findings

if TYPE_CHECKING:  # the report's module is imported by the command that makes it
    from eagle_convert.normalize.plan import NormalizeReport


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_normalize(report: NormalizeReport, console: Console, verbosity: int = 0) -> None:
    """The plan or what was written, config changes, tensors and findings (-q: one summary line)."""
    if verbosity < 0:
        console.print(detail.normalize_summary(report), soft_wrap=True)
        return
    doc = report.to_dict()
    verb = "Plan (dry run, nothing written)" if report.dry_run else "Written"
    head = kv_table(f"{verb}: {report.source} -> {report.out}")
    kv_row(head, "source", f"{report.producer} layout {report.layout}")
    kv_row(head, "profile", report.profile)
    sem = doc["semantics"]
    kv_row(head, "trained on", f"hs{sem['hidden_states']}" if sem["hidden_states"] else "engine defaults (no ids)")
    kv_row(
        head,
        "ids written",
        f"top-level {doc['config'].get('eagle_aux_hidden_state_layer_ids')}, "
        f"eagle_config {(doc['config'].get('eagle_config') or {}).get('eagle_aux_hidden_state_layer_ids')}",
    )
    kv_row(head, "files", ", ".join(doc["files"]))
    kv_row(head, "bytes", human_bytes(doc["total_bytes"]))
    console.print(head)
    console.print()
    if doc["config_changes"]:
        changes = Table(title="Config changes", title_justify="left")
        for column in ("key", "old", "new", "why"):
            changes.add_column(column, overflow="fold")
        for c in doc["config_changes"]:
            old = "(absent)" if c["change"] == "added" else _short(c["old"])
            new = "(removed)" if c["change"] == "removed" else _short(c["new"])
            changes.add_row(c["key"], old, new, c["why"])
        console.print(changes)
    else:
        console.print("Config changes: none (the config already says everything explicitly)")
    console.print()
    moved = [t for t in doc["tensors"] if t["action"] != "keep"]
    title = f"Tensors: {len(doc['tensors'])} ({len(moved)} changed)"
    if moved:
        table = Table(title=title, title_justify="left")
        for column in ("action", "source", "target", "why"):
            table.add_column(column, overflow="fold")
        for t in moved:
            table.add_row(t["action"], t["source"] or "-", t["target"] or "-", t["why"])
        console.print(table)
    else:
        console.print(f"{title}: every tensor keeps its name and bytes")
    console.print()
    render_findings(console, report.findings)
    if (verdicts := detail.verify_verdicts(report)) is not None:
        console.print()
        console.print(verdicts)

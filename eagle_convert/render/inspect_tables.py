"""``eagle-convert inspect`` for people: the draft's overview, its aux-layer ids as each release reads them, its
dimensions and vocabulary, its tensors by module, its findings and the summary line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from eagle_convert.render import detail
from eagle_convert.render.cells import human_bytes, kv_row, kv_table, plain
from eagle_convert.render.findings_table import render_findings

if TYPE_CHECKING:  # the report's module is imported by the command that makes it
    from eagle_convert.inspect_api import InspectReport


def render_inspect(report: InspectReport, console: Console, verbosity: int = 0) -> None:
    """The draft's tables, its findings and the summary line (-q: the summary line only; -v: also every tensor)."""
    if verbosity < 0:
        console.print(detail.inspect_summary(report), soft_wrap=True)
        return
    doc = report.to_dict()
    fmt = doc["format"]

    overview = kv_table(f"Draft checkpoint {report.path}")
    kv_row(overview, "producer", f"{fmt['producer']} ({fmt['confidence']} confidence)")
    for line in fmt["evidence"]:
        kv_row(overview, "", f"- {line}")
    kv_row(overview, "architectures", ", ".join(doc["architectures"]) or None)
    kv_row(
        overview,
        "weights",
        f"{fmt['weight_format']}, {len(fmt['shards']) or len(fmt['pickle_files'])} file(s)"
        + (", sharded" if fmt["sharded"] else "")
        + (f" ({', '.join(fmt['pickle_files'])}, not read)" if fmt["weight_format"] == "pickle" else ""),
    )
    kv_row(overview, "layer prefix", fmt["layer_prefix"])
    kv_row(overview, "draft layers", fmt["num_draft_layers"] or "unknown (no layer tensors, no num_hidden_layers)")
    kv_row(overview, "attention", f"{doc['attention'].upper()} ({doc['attention_evidence']})")
    kv_row(overview, "EAGLE version", doc["eagle_version"] + ("  [MoE draft]" if doc["moe"] else ""))
    for name, value in doc["flags"].items():
        kv_row(overview, name, f"{str(value).lower()} ({doc['flag_sources'][name]})")
    console.print(overview)
    console.print()
    if doc["eagle_version"] != "eagle1":  # EAGLE-1/2 drafts read no aux hidden states
        _render_aux(doc, console)
    _render_dims(doc, console)
    _render_tensors(doc, console)
    if verbosity > 0 and doc["tensors"]["items"]:
        console.print(detail.tensors_table(doc))
        console.print()
    if report.findings:
        render_findings(console, report.findings)
    console.print(detail.inspect_summary(report), soft_wrap=True)


def _render_aux(doc: dict[str, Any], console: Console) -> None:
    aux = doc["aux_layers"]
    layers = kv_table("Aux-layer ids")
    kv_row(layers, "ids", aux["ids"])
    kv_row(layers, "location", aux["location"])
    kv_row(layers, "convention", f"{aux['convention']} ({aux['confidence']} confidence)")
    for line in aux["evidence"]:
        kv_row(layers, "", f"- {line}")
    kv_row(layers, "trained on", f"hs{aux['hidden_state_indices']}" if aux["hidden_state_indices"] else None)
    for convention, picked in aux["readings"].items():
        kv_row(layers, f"if {convention}", f"hs{picked}")
    for engine, read in aux["engines"].items():
        if "@" not in engine:
            continue  # "vllm"/"sglang" repeat the newest releases, listed by name below
        picked = f"hs{read['hidden_state_indices']}" if read["hidden_state_indices"] is not None else "unknown"
        unchecked = "" if engine in doc["engines"] else "  (not checked: not in --engine)"
        kv_row(layers, engine, f"reads {read['ids_from']} ({read['rule']}) -> {picked}{_setting(read)}{unchecked}")
    target = doc["target"]
    kv_row(
        layers,
        "target",
        f"family {target['family'] or '?'} from {target['family_source']}; N={target['num_hidden_layers'] or '?'}",
    )
    kv_row(layers, "K aux states", f"{doc['num_aux_hidden_states']} ({doc['num_aux_hidden_states_source']})")
    console.print(layers)
    console.print()


def _setting(read: dict[str, Any]) -> str:
    """What a release that takes its capture from the deployment needs there to feed the trained states."""
    if read.get("capture_impossible"):
        return f"; no setting feeds the trained states: {read['capture_impossible']}"
    setting = read.get("capture_setting")
    return "".join(f"; set {k}: {v}" for k, v in setting.items()) if setting else ""


def _render_dims(doc: dict[str, Any], console: Console) -> None:
    vocab = doc["vocab"]
    mla = doc["attention"] == "mla"
    dims = kv_table("Dimensions and vocabulary")
    for key, value in doc["dims"].items():
        if key == "head_dim" and mla and not doc["dims"]["head_dim_explicit"]:
            continue  # hidden_size / heads means nothing for MLA: its head dims are the qk_*/v_head_dim rows
        if value is not None and key != "draft_vocab_size_key":
            kv_row(dims, key, value)
    kv_row(dims, "target_hidden_size (effective)", doc["target_hidden_size"])
    kv_row(
        dims,
        "vocab",
        f"V={plain(vocab['vocab_size'])}, Vd={plain(vocab['draft_vocab_size'])} "
        f"(draft_vocab_size {vocab['draft_vocab_size_key']}), d2t={plain(vocab['has_d2t'])}, "
        f"t2d={plain(vocab['has_t2d'])}, lm_head={plain(vocab['has_lm_head'])}, "
        f"embed_tokens={plain(vocab['has_embed_tokens'])}",
    )
    console.print(dims)
    console.print()


def _render_tensors(doc: dict[str, Any], console: Console) -> None:
    tensors = doc["tensors"]
    if tensors["count"]:
        table = Table(title=f"Tensors: {tensors['count']}, {human_bytes(tensors['total_bytes'])}", title_justify="left")
        table.add_column("module")
        table.add_column("tensors", justify="right")
        table.add_column("dtypes")
        table.add_column("size", justify="right")
        for g in tensors["groups"]:
            table.add_row(g["group"], str(g["count"]), ", ".join(g["dtypes"]), human_bytes(g["bytes"]))
        console.print(table)
        console.print()

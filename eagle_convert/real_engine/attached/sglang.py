"""SGLang's HTTP server (SGLang 0.5.23): described by ``/server_info``, asked with its native ``/generate``.

Acceptance is read from the per-request fields of ``/generate``'s ``meta_info`` (``spec_verify_ct``,
``spec_num_correct_drafts``, ``spec_correct_drafts_histogram``; ``srt/managers/tokenizer_manager.py:3138-3201``),
which count this request only, so other traffic cannot mix in.
"""

from __future__ import annotations

import time
from typing import Any

from eagle_convert.errors import AttachError
from eagle_convert.real_engine.attached.checks import count, fault, missing, optional_count, token_ids
from eagle_convert.real_engine.attached.client import Endpoint
from eagle_convert.real_engine.attached.protocol import MAX_POSITIONS, Counts, EngineProtocol, ServerInfo, send_all


def describe(server: Endpoint, info: Any, metrics: str | None, timeout: float) -> ServerInfo:
    """SGLang 0.5.23: ``/server_info`` is ``ServerArgs.resolved_dict()`` plus ``version``
    (``srt/entrypoints/http_server.py:863-894``, ``srt/utils/common.py:3584-3593``); the speculative fields are
    ``srt/arg_groups/fields/spec.py:31-66``."""
    if not isinstance(info, dict) or "model_path" not in info:
        raise missing(server, "/server_info", "model_path")
    method = info.get("speculative_algorithm")
    steps = info.get("speculative_num_steps")
    return ServerInfo(
        url=server.url,
        engine="sglang",
        version=str(info.get("version", "unknown")),
        model=str(info.get("served_model_name") or info["model_path"]),
        model_path=str(info["model_path"]),
        speculative=bool(method),
        method=str(method) if method else None,
        draft_path=info.get("speculative_draft_model_path"),
        num_speculative_tokens=optional_count(server, "/server_info", "speculative_num_steps", steps),
        reported_by=["/server_info"],
        not_reported=None if method else "its /server_info has speculative_algorithm null",
    )


def measure(
    server: Endpoint, info: ServerInfo, prompts: list[list[int]], new_tokens: int, concurrency: int, timeout: float
) -> Counts:
    """SGLang 0.5.23's native ``/generate`` (``srt/entrypoints/http_server.py:928-935``) with ``input_ids``; each
    answer's ``meta_info`` carries this request's speculative counts (``tokenizer_manager.py:3138-3201``):
    ``spec_verify_ct`` (verify steps = drafts), ``spec_num_correct_drafts`` (accepted draft tokens, no bonus),
    ``spec_num_proposed_drafts`` (= verify steps x (speculative_num_draft_tokens - 1)) and
    ``spec_correct_drafts_histogram`` (histogram[n] = steps that accepted exactly n draft tokens;
    ``schedule_batch.py:1566-1572``)."""

    def send(prompt: list[int]) -> dict[str, Any]:
        body = {
            "input_ids": prompt,
            "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True},
        }
        answer = server.json("/generate", body, timeout, "during the run")
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        needed = ("spec_verify_ct", "spec_num_correct_drafts", "completion_tokens")
        if not isinstance(meta, dict) or any(k not in meta for k in needed):
            raise missing(server, "/generate", "meta_info." + ", meta_info.".join(needed))
        if count(server, "/generate", "meta_info.completion_tokens", meta["completion_tokens"]) != new_tokens:
            raise AttachError(
                f"{server.url}/generate generated {meta['completion_tokens']} tokens, not the {new_tokens} asked for "
                f"(finish_reason {meta.get('finish_reason')!r})",
                hint="lower the number of new tokens below the server's --context-length minus the prompt",
            )
        return {"token_ids": token_ids(server, "/generate", "output_ids", answer.get("output_ids")), "meta": meta}

    started = time.perf_counter()
    answers = send_all(prompts, concurrency, send)
    wall = time.perf_counter() - started
    drafts, accepted, proposed, histogram = 0, 0, 0, [0] * (MAX_POSITIONS + 1)
    longest = 0
    for m in (a["meta"] for a in answers):
        verify = count(server, "/generate", "meta_info.spec_verify_ct", m["spec_verify_ct"])
        correct = count(server, "/generate", "meta_info.spec_num_correct_drafts", m["spec_num_correct_drafts"])
        drafts, accepted = drafts + verify, accepted + correct
        proposed += count(
            server, "/generate", "meta_info.spec_num_proposed_drafts", m.get("spec_num_proposed_drafts", 0)
        )
        steps = m.get("spec_correct_drafts_histogram") or []
        if not isinstance(steps, list) or len(steps) > MAX_POSITIONS + 1:
            size = len(steps) if isinstance(steps, list) else type(steps).__name__
            raise fault(server, "/generate", f"meta_info.spec_correct_drafts_histogram is {size} entries long")
        counts = [count(server, "/generate", f"spec_correct_drafts_histogram[{n}]", v) for n, v in enumerate(steps)]
        # one entry per verify step, at the number of drafts it accepted (SGLang 0.5.23
        # srt/managers/scheduler_components/batch_result_processor.py:832-836)
        weighted = sum(n * c for n, c in enumerate(counts))
        if steps and (sum(counts) != verify or weighted != correct):
            raise fault(
                server,
                "/generate",
                f"meta_info.spec_correct_drafts_histogram ({sum(counts)} steps, {weighted} drafts accepted) disagrees "
                f"with spec_verify_ct {verify} and spec_num_correct_drafts {correct}",
            )
        for n, c in enumerate(counts):
            histogram[n] += c
        longest = max(longest, len(counts))
    if drafts == 0:
        raise AttachError(
            f"the SGLang server at {server.url} verified no draft during the run (every answer's "
            "meta_info.spec_verify_ct is 0): it measured nothing",
            hint="serve the target with the draft (--speculative-algorithm EAGLE3); ask for more than one new token",
        )
    # a step that accepted n draft tokens accepted one at each of positions 0..n-1: suffix sums, linear time
    width = max(info.num_speculative_tokens or 0, longest - 1)
    per_position, tail = [0] * width, 0
    for p in range(min(width, MAX_POSITIONS), 0, -1):
        tail += histogram[p]
        per_position[p - 1] = tail
    if info.num_speculative_tokens and accepted > drafts * info.num_speculative_tokens:
        raise fault(
            server,
            "/generate",
            f"{accepted} accepted drafts over {drafts} verify steps of {info.num_speculative_tokens} draft tokens",
        )
    return Counts(
        outputs=[a["token_ids"] for a in answers],
        drafts=drafts,
        draft_tokens=proposed,
        accepted_tokens=accepted,
        accepted_per_position=per_position,
        measured_from="sglang per-request meta_info (this run's requests only)",
        foreign_traffic=[],
        wall_s=wall,
    )


PROTOCOL = EngineProtocol(
    engine="sglang",
    describe=describe,
    measure=measure,
    serve_with="SGLang --speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFT",
)

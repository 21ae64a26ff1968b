"""Runs inside an SGLang environment (``scripts/engine-env --sglang``), one SGLang start-up per draft, in one of two
modes (see sglang_runner). Imports nothing from eagle-convert but the kernel stand-in (``sglang_standin/``).

``load`` (a CPU, ``SGLANG_USE_CPU_ENGINE=1``): SGLang's own Scheduler is built in this process, as its
``run_scheduler_process`` builds it (sglang/srt/managers/scheduler.py; the lines below are 0.5.23's, and
:data:`LAUNCHES` has the releases whose launch is written here): parallel init (gloo, world size 1), the target
``TpModelWorker`` (the target's ``load_weights``), ``EAGLEWorkerV2`` with its draft worker (the draft's
``load_weights``). Its next step, the KV-cache pool (``Scheduler.init_memory_pools``), calls the first CPU kernel
(``sgl_kernel.copy_all_layer_kv_cache_cpu``, the pool's warm-up copy); the stand-in raises there and the worker
takes the half-built Scheduler from that frame. It then runs the rest of start-up that needs no kernel, in the
Scheduler's order: the end of the draft's ``alloc_memory_pool`` (``init_token_map``, ``init_lm_head``:
eagle_worker_v2.py:243-257), and the target's ``init_attention_backends`` (model_runner.py:1105-1117), whose first
statement is ``configure_aux_hidden_state_capture``: the target's ``set_eagle3_layers_to_capture`` with the ids
SGLang read. Its next statement builds the attention backend, which needs the pool, and fails; that failure is
where the run stops. A failure inside the capture set-up itself (a target class without EAGLE3 capture, a layer
index out of range) is SGLang's refusal and ends the process with SGLang's error.

The result says what SGLang read and built, all taken off its objects: the ids, the target's
``layers_to_capture``, the draft module's switches, and where each tensor of the draft's file went (found by value
in the draft's parameters; fused ``qkv_proj``/``gate_up_proj`` by row slices). Nothing is decoded.

``decode`` (a GPU with SGLang's kernels): greedy EAGLE3 decoding with SGLang's offline ``Engine``, and the target
alone for comparison. Untested on CPU machines.

In both modes the user's settings (``engine_args``, ``ServerArgs`` fields) go over the engine level's
(:func:`server_kwargs`) and SGLang's ``ServerArgs`` validates them first (:func:`validate`): a refusal is written as
``settings_error`` before anything is loaded. The result reports every keyword SGLang ran with, read back from its
``ServerArgs`` (:func:`settings`).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STANDIN = Path(__file__).resolve().with_name("sglang_standin")  # holds the stand-in ``sgl_kernel`` package
POOL_TOKENS = 1024  # the KV pool SGLang sizes (and allocates) before its first kernel call: small, it is never used
NOT_MEASURED = (
    "acceptance not measured: SGLang's CPU kernels (sgl-kernel CPU build) are not on the package index; the run stops "
    "after the draft is loaded and the aux capture is configured"
)


# ------------------------------------------------------------------------------------------------------- decode


def _generate(engine: Any, prompts: list[list[int]], max_tokens: int) -> list[dict[str, Any]]:
    params = {"temperature": 0.0, "max_new_tokens": max_tokens, "ignore_eos": True}
    out: list[dict[str, Any]] = engine.generate(input_ids=prompts, sampling_params=params)
    return out


def decode(request: dict[str, Any]) -> dict[str, Any]:
    import sglang

    refused = validate(request)
    if refused is not None:  # before any model is loaded
        return {"version": sglang.__version__, "mode": "decode", "settings_error": refused}
    kwargs = server_kwargs(request)
    started = time.perf_counter()
    engine = sglang.Engine(**kwargs)
    loaded = time.perf_counter()
    outputs = _generate(engine, request["prompts"], request["max_tokens"])
    generate_s = time.perf_counter() - loaded
    ran_with = settings(getattr(engine, "server_args", None), kwargs)
    engine.shutdown()
    result: dict[str, Any] = {
        "version": sglang.__version__,
        "mode": "decode",
        "outputs": [list(o["output_ids"]) for o in outputs],
        "completion_tokens": sum(int(o["meta_info"]["completion_tokens"]) for o in outputs),
        "verify_steps": sum(int(o["meta_info"].get("spec_verify_ct", 0)) for o in outputs),
        "load_s": round(loaded - started, 3),
        "generate_s": round(generate_s, 3),
        "settings": ran_with,
        "not_observed": [DECODE_NOT_OBSERVED],
    }
    if request.get("baseline"):
        alone = sglang.Engine(**server_kwargs(request, with_draft=False))
        alone_outputs = _generate(alone, request["prompts"], request["max_tokens"])
        result["baseline_outputs"] = [list(o["output_ids"]) for o in alone_outputs]
        alone.shutdown()
    result["peak_rss_mib"] = _peak_rss_mib()
    return result


# ------------------------------------------------------------------------------------------------- settings

DECODE_NOT_OBSERVED = (
    "aux hidden states fed to the draft, the draft's flags and per-position acceptance: SGLang's Engine runs the model "
    "in scheduler processes of its own, out of reach of an in-process hook, and reports no per-position counts"
)
# What the load path needs: one rank of world size 1 on the CPU (the launch below builds rank 0 only)
LOAD_ONE_RANK = ("tp_size", "pp_size", "dp_size", "ep_size", "nnodes")


def server_kwargs(request: dict[str, Any], with_draft: bool = True) -> dict[str, Any]:
    """The keywords of ``ServerArgs`` / ``Engine``: the engine level's, the user's ``engine_args`` over them (the
    speculative keys, which the user may not set, last)."""
    kwargs: dict[str, Any] = {"model_path": request["target"], "skip_tokenizer_init": True, "dtype": request["dtype"]}
    if request.get("mode") == "load":
        # the attention backend is SGLang's CPU default (intel_amx on x86: platform_hook.py:158-166)
        kwargs.update(device="cpu", disable_cuda_graph=True, max_total_tokens=POOL_TOKENS)
    kwargs.update(request.get("engine_args", {}))
    if with_draft:
        kwargs.update(
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=request["drafts"][0],
            speculative_num_steps=request["k"],
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=request["k"] + 1,
        )
    return kwargs


def validate(request: dict[str, Any]) -> dict[str, Any] | None:
    """SGLang's own validation of the keywords, before any model is loaded: ``ServerArgs(**kwargs)`` as released
    (an unknown key: its TypeError). In ``load`` mode also what the one-rank CPU launch cannot take (a device other
    than the CPU, more than one rank). None when they pass; else ``{"message", "key", "close"}``."""
    import dataclasses
    import difflib

    from sglang.srt.server_args import ServerArgs

    # its fields: a msgspec Struct's in 0.5.23 (server_args.py:551), a dataclass's in earlier releases
    names = getattr(ServerArgs, "__struct_fields__", None) or [f.name for f in dataclasses.fields(ServerArgs)]
    known = sorted(n for n in names if not n.startswith("_"))
    user = request.get("engine_args", {})
    unknown = [k for k in user if k not in known]
    try:
        ServerArgs(**server_kwargs(request))
    except Exception as exc:  # noqa: BLE001 (any refusal by SGLang's argument class is reported as SGLang's own)
        key = unknown[0] if unknown else None
        close = difflib.get_close_matches(key, known, n=3) if key else []
        return {"message": f"{type(exc).__name__}: {' '.join(str(exc).split())}", "key": key, "close": close}
    if request.get("mode") == "load":
        for key in LOAD_ONE_RANK:
            if user.get(key, 1) != 1:
                return {
                    "message": f"{key}={user[key]}: the CPU load path builds SGLang's rank 0 of world size 1 (no CPU "
                    "kernels to decode with); more ranks need the decode mode (--device cuda with SGLang's CUDA build)",
                    "key": key,
                    "close": [],
                }
        if user.get("device", "cpu") != "cpu":
            return {"message": f"device={user['device']}: the load path runs on the CPU", "key": "device", "close": []}
    return None


def settings(server_args: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every keyword the engine ran with, each read back from its ``ServerArgs`` (after resolution) where it has
    that field, as JSON; else as passed."""
    out: dict[str, Any] = {}
    for key, passed in kwargs.items():
        value = getattr(server_args, key, passed) if server_args is not None else passed
        out[key] = value if value is None or isinstance(value, bool | int | float | str) else passed
    return out


# --------------------------------------------------------------------------------------------------------- load


def load(request: dict[str, Any]) -> dict[str, Any]:
    """SGLang's start-up on a CPU up to the aux capture; what it read and built (the module docstring)."""
    (draft,) = request["drafts"]
    sgl_kernel = _import_sglang_cpu()
    import sglang
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.model_executor.model_runner_components import attention_backend_setup
    from sglang.srt.server_args import ServerArgs

    launch = LAUNCHES.get(sglang.__version__)
    if launch is None:
        raise RuntimeError(f"no start-up sequence for SGLang {sglang.__version__} (known: {', '.join(LAUNCHES)})")
    refused = validate(request)
    if refused is not None:  # before any model is loaded
        return {"version": sglang.__version__, "mode": "load", "settings_error": refused}
    started = time.perf_counter()
    kwargs = server_kwargs(request)
    server_args = ServerArgs(**kwargs)
    try:
        construct = launch(server_args)  # resolve_once and check_server_args: SGLang's checks of every value
    except Exception as exc:
        if not request.get("engine_args"):
            raise
        message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"  # before any model is loaded
        return {"version": sglang.__version__, "mode": "load", "settings_error": {"message": message}}
    scheduler = _build_until_first_kernel(Scheduler, construct, sgl_kernel.StandinCalled)
    eagle = scheduler.draft_worker.draft_worker  # EAGLEWorkerV2 -> EagleDraftWorker
    eagle.init_token_map()
    eagle.init_lm_head()
    target_runner = scheduler.tp_worker.model_runner
    _init_attention_backends_until_the_pool(target_runner, attention_backend_setup.configure_aux_hidden_state_capture)
    load_s = time.perf_counter() - started

    target, built = target_runner.model, eagle.draft_runner.model
    return {
        "version": sglang.__version__,
        "mode": "load",
        "settings": settings(server_args, kwargs),
        "not_measured": NOT_MEASURED,
        "target_class": type(target).__name__,
        "ids_read": _ids(target_runner.spec_aux_config.eagle_aux_hidden_state_layer_ids),
        "layers_to_capture": _layers_to_capture(target),
        "draft": _built_draft(built, target),
        "tensors": placements(Path(draft), built),
        "standin_calls": list(sgl_kernel.CALLS),
        "load_s": round(load_s, 3),
        "peak_rss_mib": _peak_rss_mib(),
    }


def _import_sglang_cpu() -> Any:
    """Import SGLang's CPU path (with the stand-in ``sgl_kernel`` first on the path); the stand-in module."""
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"  # SGLang's CPU platform (sglang/srt/platforms/__init__.py:50)
    if str(STANDIN) not in sys.path:
        sys.path.insert(0, str(STANDIN))
    import sgl_kernel  # SGLang's CPU path imports its *_cpu kernels at import time

    if not getattr(sgl_kernel, "STANDIN", False):  # an sgl_kernel imported before this one would win
        raise RuntimeError(f"{sgl_kernel.__file__} is not eagle-convert's stand-in: uninstall sgl-kernel")
    import sglang.srt.managers.scheduler  # noqa: F401 (the whole import chain, once, before any fork)

    return sgl_kernel


def _launch_0_5_23(server_args: Any) -> Callable[[], Any]:
    """What SGLang 0.5.23 does before it builds the Scheduler: Engine._launch_subprocesses (entrypoints/engine.py,
    less _set_envs_and_config: NCCL/CUDA variables and ulimit, which nothing here reads), then run_scheduler_process
    (managers/scheduler.py) for rank 0 of world size 1. Returns the Scheduler's construction."""
    from sglang.srt.managers.scheduler import Scheduler, configure_scheduler_process
    from sglang.srt.plugins import load_plugins
    from sglang.srt.runtime_context import SpawnRanks, publish, spawn_world_rank
    from sglang.srt.server_args import PortArgs
    from sglang.srt.utils import configure_logger

    configure_logger(server_args)
    server_args.resolve_once()
    load_plugins()
    server_args.check_server_args()
    port_args = PortArgs.init_new(server_args)
    ranks = SpawnRanks(world_rank=spawn_world_rank(server_args, tp_rank=0, pp_rank=0), dp_rank=None, gpu_id=0)
    publish(server_args, role="scheduler", ranks=ranks)
    configure_scheduler_process(server_args, 0)
    return lambda: Scheduler(server_args, port_args)


def _launch_0_5_16(server_args: Any) -> Callable[[], Any]:
    """The same for SGLang 0.5.16, whose scheduler takes its ranks as arguments (no runtime context to publish)."""
    from sglang.srt.managers.scheduler import Scheduler, configure_scheduler_process
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import PortArgs
    from sglang.srt.utils import configure_logger

    configure_logger(server_args)
    server_args.check_server_args()
    port_args = PortArgs.init_new(server_args)
    load_plugins()
    # gpu_id, tp_rank, attn_cp_rank, moe_dp_rank, moe_ep_rank, pp_rank, dp_rank
    dp_rank = configure_scheduler_process(server_args, 0, 0, 0, 0, 0, 0, None)
    # gpu_id, tp_rank, moe_ep_rank, pp_rank, attn_cp_rank, moe_dp_rank, dp_rank
    return lambda: Scheduler(server_args, port_args, 0, 0, 0, 0, 0, 0, dp_rank)


LAUNCHES: dict[str, Callable[[Any], Callable[[], Any]]] = {"0.5.23": _launch_0_5_23, "0.5.16": _launch_0_5_16}


def _build_until_first_kernel(
    scheduler_class: Any, construct: Callable[[], Any], standin_called: type[BaseException]
) -> Any:
    """The Scheduler as released (``construct``), stopped by the first stand-in kernel it calls; the Scheduler as
    far as it got (taken from its ``__init__`` frame), with its target and draft workers built."""
    try:
        return construct()  # a build with real kernels goes all the way
    except standin_called as exc:
        tb, scheduler = exc.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code is scheduler_class.__init__.__code__:
                scheduler = tb.tb_frame.f_locals["self"]
            tb = tb.tb_next
        if scheduler is None or getattr(scheduler, "draft_worker", None) is None:
            raise RuntimeError(f"SGLang called a CPU kernel before its draft worker was built: {exc}") from exc
        return scheduler


def _init_attention_backends_until_the_pool(runner: Any, configure: Any) -> None:
    """The target runner's ``init_attention_backends``: its first statement configures the aux capture; the
    statements after it build the attention backend on the KV pool that was never built, and fail. A failure in the
    capture set-up itself is SGLang's verdict on the pair, and is raised."""
    try:
        runner.init_attention_backends()
    except Exception as exc:
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is configure.__code__:
                raise
            tb = tb.tb_next
        print(f"[eagle-convert] stopped after the aux capture set-up: {type(exc).__name__}: {exc}", file=sys.stderr)


def _ids(ids: Any) -> list[int] | None:
    return None if ids is None else [int(i) for i in ids]


def _layers_to_capture(target: Any) -> list[int] | None:
    """The capture set the target's ``set_eagle3_layers_to_capture`` stored (on the inner model for most classes)."""
    for holder in (getattr(target, "model", None), target, getattr(target, "language_model", None)):
        captured = getattr(holder, "layers_to_capture", None) if holder is not None else None
        if captured is not None:
            return [int(i) for i in captured]
    return None


def _built_draft(model: Any, target: Any) -> dict[str, Any]:
    inner = model.model
    fc = getattr(inner, "fc", None)
    hot = getattr(model, "hot_token_id", None)
    return {
        "class": type(model).__name__,
        "num_aux": _opt_int(getattr(inner, "num_aux_hidden_states", None)),
        "fc_shape": list(fc.weight.shape) if fc is not None else None,
        "fc_norm": getattr(inner, "fc_norm", None) is not None,
        "input_norm": getattr(inner, "input_norm", None) is not None,
        "norm_output": bool(getattr(inner, "norm_output", False)),
        "norm_before_residual": _norm_before_residual(inner),
        "lm_head": "shared" if _shares_head(model, target) else "loaded",
        "hot_token_id": None if hot is None else int(hot.shape[0]),
        "num_layers": len(inner.layers) if hasattr(inner, "layers") else 1,
    }


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _norm_before_residual(inner: Any) -> bool | None:
    """The switch where the draft class has one (SGLang's Llama draft layer reads none: None)."""
    layers = getattr(inner, "layers", None) or [getattr(inner, "midlayer", None)]
    values = {getattr(layer, "norm_before_residual", None) for layer in layers if layer is not None}
    values.discard(None)
    return bool(values.pop()) if values else None


def _shares_head(model: Any, target: Any) -> bool:
    """Whether the draft's lm_head weight is the target's own tensor (its lm_head, or its embedding when tied)."""
    head = getattr(getattr(model, "lm_head", None), "weight", None)
    if head is None:
        return False
    ours = [getattr(getattr(target, "lm_head", None), "weight", None)]
    ours.append(getattr(getattr(getattr(target, "model", None), "embed_tokens", None), "weight", None))
    return any(t is not None and t.data_ptr() == head.data_ptr() and t.shape == head.shape for t in ours)


# --------------------------------------------------------------------------------------------- tensor placement


def placements(draft: Path, model: Any) -> dict[str, dict[str, Any]]:
    """For each tensor in the draft's safetensors files: the parameter of the built draft that holds its values
    (``rows``: [start, stop) when it is a row slice of a fused parameter), or ``param`` None when none does.

    A tensor whose elements are all equal (a unit norm weight) proves nothing by value, so it counts only in a
    parameter whose name ends like its own (e.g. ``fc_norm.1.weight``); ``d2t`` is found in ``hot_token_id``,
    which SGLang computes from it as ``d2t + arange``."""
    import torch
    from safetensors import safe_open

    params = dict(model.named_parameters())
    hot = getattr(model, "hot_token_id", None)
    if hot is not None:
        params["hot_token_id"] = hot.cpu() - torch.arange(hot.shape[0], device="cpu")  # = d2t (llama_eagle3.py)
    out: dict[str, dict[str, Any]] = {}
    for shard in sorted(draft.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            for name in f.keys():
                out[name] = _place(name, f.get_tensor(name), params)
    return out


def _place(name: str, tensor: Any, params: dict[str, Any]) -> dict[str, Any]:
    distinctive = tensor.numel() > 1 and not bool((tensor == tensor.reshape(-1)[0]).all())
    best: tuple[tuple[bool, int], str, list[int] | None] | None = None
    for pname, param in params.items():
        score = _common_suffix(name, pname)
        if not distinctive and score < 2:
            continue
        span = _span(tensor, param.detach())
        if span is None:
            continue
        rows = None if param.shape == tensor.shape else list(span)
        rank = (rows is None, score)  # a whole parameter first, then the closer name
        if best is None or rank > best[0]:
            best = (rank, pname, rows)
    if best is None:
        return {"param": None, "rows": None}
    return {"param": best[1], "rows": best[2]}


def _common_suffix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(reversed(a.split(".")), reversed(b.split(".")), strict=False):
        if x != y:
            break
        n += 1
    return n


def _span(tensor: Any, param: Any) -> tuple[int, int] | None:
    """The rows [a, b) of ``param`` that equal ``tensor`` (the whole of it for an equal shape), or None."""
    import torch

    if param.dim() != tensor.dim() or param.shape[1:] != tensor.shape[1:]:
        return None
    value = tensor.to(device=param.device, dtype=param.dtype)
    if param.shape == value.shape:
        return (0, param.shape[0] if param.dim() else 0) if torch.equal(param, value) else None
    r = value.shape[0]
    if param.dim() == 0 or param.shape[0] < r:
        return None
    first = (param == value[0]).reshape(param.shape[0], -1).all(dim=1).nonzero().flatten().tolist()
    for a in first:
        if a + r <= param.shape[0] and torch.equal(param[a : a + r], value):
            return (a, a + r)
    return None


def _peak_rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run(request: dict[str, Any]) -> None:
    result = load(request) if request.get("mode", "decode") == "load" else decode(request)
    Path(request["result_path"]).write_text(json.dumps(result), encoding="utf-8")


def main(argv: list[str]) -> int:
    """``python -m ...sglang_worker REQUEST.json [REQUEST.json ...]``. One request runs in this process. Several
    (``load`` requests only, each with its own ``result_path`` and ``log_path``) share one import of SGLang: each
    runs in a child forked after the import, since SGLang's start-up publishes process-wide state (its runtime
    context, the gloo group) that a second start-up in the same process would find taken. Exit 1 when any failed."""
    requests = [json.loads(Path(a).read_text(encoding="utf-8")) for a in argv[1:]]
    if len(requests) == 1:
        run(requests[0])
        return 0
    if any(r.get("mode") != "load" for r in requests):
        raise SystemExit("several requests in one process: load mode only")
    _import_sglang_cpu()
    failed = 0
    for request in requests:
        pid = os.fork()
        if pid == 0:  # the child: one start-up, its output in the request's log
            code = 1
            try:
                with open(request["log_path"], "wb") as log:
                    os.dup2(log.fileno(), 1)
                    os.dup2(log.fileno(), 2)
                run(request)
                code = 0
            except BaseException:  # noqa: BLE001 (the child reports any failure in its log and exits 1)
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        failed += os.waitstatus_to_exitcode(status) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

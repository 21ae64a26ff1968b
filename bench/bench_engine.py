"""Benchmark: the engine level against the probe on the same pair, in time and memory.

    .venv/bin/python bench/bench_engine.py [--tokens 64]
    .venv/bin/python bench/bench_engine.py --variants [--tokens 64]   # the conformance variants, measured
    .venv/bin/python bench/bench_engine.py --attached [--engine-url URL] [--concurrency 8] [--tokens 64]

The pair is fixtures/engine_pair.py (SmolLM2-135M-Instruct and its EAGLE3 draft). Two runs of the CLI, each in its
own process, as a user runs them:

* ``--level target``: every lower level plus the default probe (the target's greedy text from its default prompts,
  at least 4,096 positions, reference models in float32 on the CPU);
* ``--level engine``: the same, plus vLLM (the engine environment's Python, a child process) generating greedily
  from the first 8 of those prompts, ``--tokens`` new tokens each, with the draft and then the target alone, and
  the probe on that same run.

Reports wall time of each, the engine run's own load and generation times, and peak resident memory: of the
eagle-convert process (probe and reference matching) and of the engine process (from the report).

``--variants`` instead runs every config variant of the conformance test (fixtures/engine_pair.py) in one engine
process on the same 8 prompts and prints, per variant, the hidden states vLLM fed the draft, the flags it
built and the acceptance it measured.

``--attached`` times ``verify --engine-url``'s client (eagle_convert/real_engine/attached/) against the in-process
engine level on the same 8 prompts and tokens, side by side: the attached run against a server that already serves
the pair (``--engine-url``; without it the benchmark starts one, tests/vllm_server.py, and reports its start-up),
and the in-process run (a child process that imports vLLM, loads the pair and generates). Both measure acceptance
from the same spec-decode counters, so the figures must agree.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from eagle_convert.read.config import TargetConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_reference import _cpu  # noqa: E402
from fixtures.engine_pair import engine_pair  # noqa: E402


def _verify(
    level: str, draft: Path, target: Path, options: argparse.Namespace
) -> tuple[float, float, dict[str, object]]:
    """(wall seconds, peak RSS MiB of the eagle-convert process, the JSON report)."""
    args = [sys.executable, "-m", "eagle_convert", "verify", str(draft), "--level", level, "--target", str(target)]
    args += ["--engine", options.engine, "--engine-tokens", str(options.tokens), "--device", options.device]
    args += ["--json", "--no-hash"] + (["--engine-python", options.engine_python] if options.engine_python else [])
    t0 = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"verify --level {level} failed: {r.stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far
    return wall, peak, json.loads(r.stdout)


def variants(tokens: int) -> int:
    import tempfile

    from eagle_convert.real_engine import EngineSettings, engine_prompts, fed_hidden_states, observe
    from eagle_convert.real_engine.base import acceptance
    from fixtures.engine_pair import VARIANTS, variant

    target, draft = engine_pair()
    settings = EngineSettings(new_tokens=tokens, baseline=False)
    with tempfile.TemporaryDirectory() as tmp:
        drafts = [variant(draft, v, Path(tmp) / f"v{i}") for i, v in enumerate(VARIANTS)]
        prompts = engine_prompts(TargetConfig.from_path(target), settings)
        t0 = time.perf_counter()
        observations = observe(target, drafts, prompts, settings, Path(tmp))
        wall = time.perf_counter() - t0
        fed = fed_hidden_states(target, observations)
    print(f"{_cpu()}; {len(VARIANTS)} engines in one process, {len(prompts)} prompts x {tokens} tokens: {wall:.0f} s")
    print("| variant | hidden states fed | flags on | mean acceptance length | accept rate, positions 1/2/3 |")
    print("|---|---|---|---|---|")
    for v, o, matches in zip(VARIANTS, observations, fed, strict=True):
        mean, rates = acceptance(o.drafts, o.accepted_tokens, o.accepted_per_position)
        on = ", ".join(k for k, val in o.flags.items() if val is True and k != "use_aux_hidden_state") or "-"
        hs = tuple(m.boundary for m in matches)
        print(f"| {v.name} | {hs} | {on} | {mean:.3f} | {' / '.join(f'{r:.3f}' for r in rates)} |")
    return 0


def attached(tokens: int, url: str | None, concurrency: int) -> int:
    import tempfile
    from contextlib import nullcontext

    from eagle_convert.real_engine import EngineSettings, engine_prompts, observe
    from eagle_convert.real_engine.attached import run
    from eagle_convert.real_engine.base import acceptance, engine_python

    target, draft = engine_pair()
    settings = EngineSettings(new_tokens=tokens, baseline=False)
    prompts = engine_prompts(TargetConfig.from_path(target), settings)
    with tempfile.TemporaryDirectory() as tmp:
        if url is None:
            from tests.vllm_server import vllm_server

            t0 = time.perf_counter()
            server: Any = vllm_server(engine_python(), target, draft, Path(tmp), args=("--no-enable-prefix-caching",))
        else:
            server, t0 = nullcontext(url), time.perf_counter()
        with server as running:
            started = time.perf_counter() - t0
            address = running if isinstance(running, str) else running.url
            t1 = time.perf_counter()
            remote = run(address, None, prompts, tokens, concurrency=concurrency, timeout=600.0, draft=draft)
            attach_wall = time.perf_counter() - t1
        t2 = time.perf_counter()
        (local,) = observe(target, [draft], prompts, settings, Path(tmp))
        local_wall = time.perf_counter() - t2
    mean, rates = acceptance(local.drafts, local.accepted_tokens, local.accepted_per_position)
    print(f"{_cpu()}, {platform.python_version()}; pair {target.name} + {draft.name}; {len(prompts)} prompts x "
          f"{tokens} new tokens, k={settings.steps}")  # fmt: skip
    if url is None:
        print(f"server start-up (python -m vllm.entrypoints.openai.api_server, to /health 200): {started:.1f} s")
    print("| run | wall s | generation s | mean acceptance length | accept rate per position | drafts |")
    print("|---|---|---|---|---|---|")
    print(f"| --engine-url, concurrency {concurrency} | {attach_wall:.1f} | {remote.wall_s:.1f} | "
          f"{remote.mean_acceptance_length:.4f} | {' / '.join(f'{r:.3f}' for r in remote.acceptance_per_position)} | "
          f"{remote.drafts} |")  # fmt: skip
    print(f"| in-process engine level | {local_wall:.1f} | {local.generate_s:.1f} | {mean:.4f} | "
          f"{' / '.join(f'{r:.3f}' for r in rates)} | {local.drafts} |")  # fmt: skip
    print(f"attached / in-process: wall {attach_wall / local_wall:.2f}, generation "
          f"{remote.wall_s / local.generate_s:.2f}")  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--attached", action="store_true", help="time --engine-url against the in-process level")
    parser.add_argument("--engine-url", default=None, help="with --attached: a server that serves the pair already")
    parser.add_argument("--concurrency", type=int, default=8, help="with --attached: requests in flight")
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--engine-python", default=None, help="the engine environment's Python [.venv-engine]")
    parser.add_argument("--device", default="cpu", help="where the reference models run (cpu, cuda)")
    args = parser.parse_args()
    if args.variants:
        return variants(args.tokens)
    if args.attached:
        return attached(args.tokens, args.engine_url, args.concurrency)
    target, draft = engine_pair()
    probe_wall, probe_rss, probe_doc = _verify("target", draft, target, args)
    engine_wall, _, engine_doc = _verify("engine", draft, target, args)
    run = engine_doc["engine_run"]
    assert isinstance(run, dict)
    probe = probe_doc["probe"]
    assert isinstance(probe, dict)
    print(f"{_cpu()}, {platform.python_version()}; pair {target.name} + {draft.name}")
    print(f"--level target: {probe_wall:7.1f} s, eagle-convert peak RSS {probe_rss:6.0f} MiB "
          f"(probe: {probe['positions']} positions)")  # fmt: skip
    print(f"--level engine: {engine_wall:7.1f} s (+{engine_wall - probe_wall:.1f} s for the engine run: vLLM import, "
          f"load {run['load_s']:.1f} s, generate {run['generate_s']:.1f} s for {run['tokens']} tokens, then the "
          f"capture, the target alone and the matching), engine peak RSS {run['peak_rss_mib']:.0f} MiB")  # fmt: skip
    rate = run["tokens"] / run["generate_s"] if run["generate_s"] else 0.0
    print(f"engine: {rate:.1f} tokens/s with the draft, mean acceptance length {run['mean_acceptance_length']:.3f}, "
          f"probe on the same run {run['probe_acceptance_length']:.3f}, probe on its own text "
          f"{probe['rows'][0]['acceptance_length']:.3f}; engine / probe time "
          f"{engine_wall / probe_wall:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

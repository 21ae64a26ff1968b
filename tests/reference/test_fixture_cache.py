"""The built-fixture cache (fixtures/cache.py) builds an entry once when several processes ask at once (pytest-xdist's
workers each reach for the trained pair and SmolLM2), and no caller reads it half-written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

ASK = """
import sys, time
from pathlib import Path
from fixtures.cache import built_once

out, log = Path(sys.argv[1]), Path(sys.argv[2])

def build(tmp):
    with open(log, "a") as f:
        f.write("built\\n")
    time.sleep(1.0)  # long enough that the other caller arrives while this one builds
    (tmp / "payload").write_text("whole")

got = built_once(out, lambda p: (p / "payload").is_file(), build)
print((got / "payload").read_text())
"""


def test_concurrent_callers_build_once_and_all_read_the_whole_entry(tmp_path: Path) -> None:
    out, log = tmp_path / "cache" / "entry", tmp_path / "builds.log"
    callers = [
        subprocess.Popen([sys.executable, "-c", ASK, str(out), str(log)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [c.communicate(timeout=60)[0].strip() for c in callers]
    assert outputs == ["whole"] * 3
    assert log.read_text().splitlines() == ["built"]  # one build for three callers
    assert sorted(p.name for p in out.parent.iterdir()) == [".entry.lock", "entry"]  # no temporary left behind

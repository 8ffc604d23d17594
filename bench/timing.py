"""What the benchmark scripts share: run one audit command from an empty runs directory and time it."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_audit(args: list[str], *, entry: str = "audit.lira") -> tuple[float, list[float], dict]:
    """Run `python -m <entry> <args> --runs-dir <empty dir> --quiet`. Returns the wall time of the
    whole command, the seconds each shadow run took inside its worker, and summary.json."""
    with tempfile.TemporaryDirectory() as runs_dir:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", entry, *args, "--runs-dir", runs_dir, "--quiet"], check=True)
        wall = time.perf_counter() - start
        per_run = [json.loads(p.read_text())["wall_s"] for p in Path(runs_dir).glob("*/runs/*.json")]
        summary = json.loads(next(Path(runs_dir).glob("*/audit/summary.json")).read_text())
        return wall, per_run, summary

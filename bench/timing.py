"""What the benchmark scripts share: run one audit command into a runs directory (an empty one: timed)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def audit_into(where: Path | str, args: list[str], *, entry: str = "audit.lira", timeout: float | None = None) -> dict:
    """Run `python -m <entry> <args> --runs-dir <where> --quiet` (a second call re-scores the store there;
    killed after `timeout` seconds: subprocess.TimeoutExpired). Returns summary.json."""
    subprocess.run(
        [sys.executable, "-m", entry, *args, "--runs-dir", str(where), "--quiet"], check=True, timeout=timeout
    )
    return json.loads(next(Path(where).glob("*/audit/summary.json")).read_text())


def timed_audit(
    args: list[str], *, entry: str = "audit.lira", timeout: float | None = None
) -> tuple[float, list[float], dict]:
    """Run `python -m <entry> <args> --runs-dir <empty dir> --quiet` (killed after `timeout` seconds:
    subprocess.TimeoutExpired). Returns the wall time of the whole command, the seconds each shadow
    run took inside its worker, and summary.json."""
    with tempfile.TemporaryDirectory() as runs_dir:
        start = time.perf_counter()
        summary = audit_into(runs_dir, args, entry=entry, timeout=timeout)
        wall = time.perf_counter() - start
        per_run = [json.loads(p.read_text())["wall_s"] for p in Path(runs_dir).glob("*/runs/*.json")]
        return wall, per_run, summary


def verdict_cells(summary: dict) -> tuple[str, str, str]:
    """(bound, ceiling, verdict) cells of a table row from summary.json's `verdict`: the one ε lower
    bound the verdict rests on, paid for (the attack chosen on the reference runs at the full
    confidence, or the largest of every attack's bounds at a split confidence), never a maximum
    of per-attack bounds each at its own confidence."""
    from audit.reporting.verdict import summary_verdict

    found = summary.get("verdict")
    if not found:
        return "- (no ε bound)", "-", "-"
    verdict = summary_verdict(summary)
    word = {
        "epsilon_violated": "violated",
        "epsilon_consistent": "consistent",
        "epsilon_not_testable": "not testable",
        "no_epsilon_claim": "-",
    }[verdict.kind]
    return (f"{found['eps_lower']:.2f} ({found['attack']}, {found['rule']})", f"{found['eps_ceiling']:.2f}", word)

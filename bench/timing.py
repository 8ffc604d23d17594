"""The benchmark scripts' one runner: every `python -m audit.<command>` a script runs is built here, and
what an audit wrote is read back as the package reads it, an `audit.AuditResult` (`audit.load`), never
as summary.json's keys. Each command runs in a subprocess of its own (isolation, a timeout, its wall
time) and its failure raises `subprocess.CalledProcessError`."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import audit
from audit.reporting.verdict import EPSILON_CONSISTENT, EPSILON_NOT_TESTABLE, EPSILON_VIOLATED
from audit.result import AuditResult

#: the audit commands a script may run: `python -m audit.<command>`
COMMANDS = ("lira", "loss", "ganleak", "release", "compare")
#: the commands that keep their experiments under `--runs-dir` and write an audited store
AUDITS = ("lira", "loss", "ganleak", "release")


@dataclass(frozen=True)
class AuditOutcome:
    """One audit command's outcome: `store`, the experiment directory it wrote (`timed_audit`'s is
    removed once it returns); `result`, the audit that store holds; `wall_s`, the whole command's
    seconds (imports, Ray's start, training, scoring); `run_seconds`, the seconds each run the store
    holds took in its worker (`runs/*.json`'s `wall_s`, in file order); `argv`, the command as run,
    from `-m`."""

    store: Path
    result: AuditResult
    wall_s: float
    run_seconds: tuple[float, ...]
    argv: tuple[str, ...]


def command_line(command: str, args: list[str]) -> list[str]:
    """`python -m audit.<command> <args>` with this interpreter; ValueError for a command not in COMMANDS."""
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {', '.join(COMMANDS)}, got {command!r}")
    return [sys.executable, "-m", f"audit.{command}", *map(str, args)]


def run(command: str, args: list[str], *, timeout: float | None = None, show: bool = True) -> float:
    """Run `python -m audit.<command> <args>` (killed after `timeout` seconds: subprocess.TimeoutExpired;
    `show=False` discards what it prints to stdout) and return its wall seconds. For `compare`, what
    a script keeps of the comparison is what it printed or the `--out` file it named: audit has no
    loader for that file."""
    start = time.perf_counter()
    subprocess.run(
        command_line(command, args), check=True, timeout=timeout, stdout=None if show else subprocess.DEVNULL
    )
    return time.perf_counter() - start


def audit_into(
    where: Path | str, args: list[str], *, command: str = "lira", timeout: float | None = None, show: bool = True
) -> AuditOutcome:
    """Run `python -m audit.<command> <args> --runs-dir <where> --quiet` (a second call re-scores or
    extends the store there) and read back what it wrote: the store is the newest audited one under
    `where` (the stores of a runs directory may share it, as dpsgd's pretrained start). `timeout` and
    `show` as `run`'s."""
    if command not in AUDITS:
        raise ValueError(f"an audit's command must be one of {', '.join(AUDITS)}, got {command!r}")
    argv = [*map(str, args), "--runs-dir", str(where), "--quiet"]
    wall = run(command, argv, timeout=timeout, show=show)
    newest = max(Path(where).glob("*/audit/summary.json"), key=lambda path: path.stat().st_mtime_ns)
    store = newest.parents[1]
    seconds = tuple(json.loads(p.read_text())["wall_s"] for p in sorted((store / "runs").glob("*.json")))
    return AuditOutcome(store, audit.load(store), wall, seconds, ("-m", f"audit.{command}", *argv))


def timed_audit(args: list[str], *, command: str = "lira", timeout: float | None = None) -> AuditOutcome:
    """`audit_into` an empty temporary runs directory, so every run is trained; the directory is
    removed once it returns (`AuditOutcome.store` then names nothing)."""
    with tempfile.TemporaryDirectory() as runs_dir:
        return audit_into(runs_dir, args, command=command, timeout=timeout)


def audited_stores(runs_dir: Path, pattern: str = "*") -> list[tuple[Path, AuditResult]]:
    """(store, result) of every audited store among the directories `runs_dir.glob(pattern)` names, by path."""
    found = []
    for path in sorted(p for p in Path(runs_dir).glob(pattern) if p.is_dir()):
        try:
            found.append((path, audit.load(path)))
        except FileNotFoundError:
            pass  # not a store, or one never audited
    return found


def verdict_word(result: AuditResult) -> str:
    """The ε verdict against the claim the audit checked, in one word for a table cell ("-": none)."""
    words = {EPSILON_VIOLATED: "violated", EPSILON_CONSISTENT: "consistent", EPSILON_NOT_TESTABLE: "not testable"}
    return words.get(result.verdict.kind if result.verdict else None, "-")


def verdict_cells(result: AuditResult) -> tuple[str, str, str]:
    """(bound, ceiling, verdict) cells of a table row from the result's `bound`: the one ε lower
    bound the verdict rests on, paid for (the attack chosen on the reference runs at the full
    confidence, or the largest of every attack's bounds at a split confidence), never a maximum
    of per-attack bounds each at its own confidence; and `verdict_word`."""
    found = result.bound
    if not found:
        return "- (no ε bound)", "-", "-"
    bound = f"{found['eps_lower']:.2f} ({found['attack']}, {found['rule']})"
    return bound, f"{found['eps_ceiling']:.2f}", verdict_word(result)

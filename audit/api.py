"""The audit from Python (docs/contracts.md, "Python API"): `run` audits a victim as `python -m
audit.lira` (or `audit.loss`, `audit.ganleak`) does, with the same flags as keyword arguments and the
same lines on the terminal, and returns its `AuditResult`; `load` returns the result an audited
store holds."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Mapping

from audit.cli.shadow_audit import AuditRefused, run as run_flags
from audit.reporting.verdict import summary_verdict
from audit.result import AuditResult

#: `run`'s commands: the module whose attacks it runs
COMMANDS = ("lira", "loss", "ganleak")


def run(victim: str, *, command: str = "lira", **flags) -> AuditResult:
    """Audit `victim` as `python -m audit.<command> --victim VICTIM ...` does, each keyword a flag
    (`n_shadow=8` is `--n-shadow 8`, `quiet=True` is `--quiet`, `attack=["dcr"]` is `--attack dcr`,
    a victim's `False` its `--no-` flag), and return the result it wrote to summary.json. Progress
    and the audit's lines are shown as on the command line. AuditRefused (a ValueError, one line)
    for bad input, before any run is trained."""
    if command not in COMMANDS:
        raise AuditRefused(f"command must be one of {', '.join(COMMANDS)}, got {command!r}")
    return run_flags(victim, flags, **importlib.import_module(f"audit.{command}").command())


def load(store: str | Path) -> AuditResult:
    """The result of the audit an experiment directory (a store, `<runs-dir>/<victim>-<dataset>-<hash>`)
    holds, or of a summary.json itself. FileNotFoundError where it has none."""
    path = Path(store)
    path = path if path.is_file() else path / "audit" / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"{store}: not an audited store (no audit/summary.json)")
    return reread(json.loads(path.read_text()))


def reread(data: Mapping) -> AuditResult:
    """The result summary.json's content `data` holds, with its verdict in words against the claim it
    records: the verdict its audit printed."""
    return AuditResult.from_json(data, verdict=summary_verdict(data))

"""The audit from Python (docs/contracts.md, "Python API"): `run` audits a victim as `python -m
audit.lira` (or `audit.loss`, `audit.ganleak`) does, with the same flags as keyword arguments and the
same lines on the terminal, and returns its `AuditResult`; `load` returns the result an audited
store holds, `roc_scores` the scores its ROC curves are drawn from."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Mapping

import numpy as np

from audit.cli.shadow_audit import AuditRefused, run as run_flags
from audit.reporting.verdict import summary_verdict
from audit.result import AuditResult
from audit.results import load_audited

#: `run`'s commands: the module whose attacks it runs
COMMANDS = ("lira", "loss", "ganleak")


def run(victim: str, *, command: str = "lira", **flags) -> AuditResult:
    """Audit `victim` as `python -m audit.<command> --victim VICTIM ...` does, each keyword a flag (`n_shadow=8` is
    `--n-shadow 8`, `quiet=True` `--quiet`, `attack=["dcr"]` `--attack dcr`, `False` a `--no-` flag), with the same
    terminal lines, and return the result written to summary.json. AuditRefused (a ValueError, one line) for bad input,
    before any run is trained."""
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


def roc_scores(store: str | Path) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The scores of an experiment directory's ROC curves, read from audit/scores.npz by `audit.results`: group ->
    attack -> (member scores, non-member scores), pooled over targets. Group "all": the records the ε bound is over
    (every pool example, or the canaries); then, without canaries, the descriptive sub-groups "init" and
    "other_members"; with canaries, "natural". Raises `audit.results.ExperimentError` (one line naming the path) where
    the store is unusable."""
    audited = load_audited(store)
    groups = {"all": {a: audited.bound_scores(a) for a in audited.attacks}}
    if audited.canaries:
        natural = {a: audited.group_scores(a, "natural") for a in audited.attacks}
        groups["natural"] = {a: pair for a, pair in natural.items() if min(map(len, pair)) > 0}
    else:
        subgroups = [g for g in audited.experiment.group_masks() if g != "all"]
        groups.update({g: {a: audited.scores(a, g) for a in audited.attacks} for g in subgroups})
    return groups

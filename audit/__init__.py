"""What a user runs and reads: entry points, metrics, epsilon bounds and formal accounting.

The names below are imported on first use (PEP 562), not with the package: every command and every
Ray worker imports `audit`, and scipy.stats, which the epsilon bounds need, takes about a second to
import that a worker training runs, or a command refusing a bad flag, never uses."""

import importlib

#: the package's public names and the module that defines each
_EXPORTS = {
    "AuditResult": "audit.result",
    "load": "audit.api",
    "roc_scores": "audit.api",
    "run": "audit.api",
    "MembershipScores": "audit.stats.metrics",
    "advantage": "audit.stats.metrics",
    "auc": "audit.stats.metrics",
    "eps_hat": "audit.stats.metrics",
    "epsilon_ceiling": "audit.stats.epsilon",
    "epsilon_lower_bound": "audit.stats.epsilon",
    "one_run_audit": "audit.stats.epsilon",
    "roc": "audit.stats.metrics",
    "tpr_at_fpr": "audit.stats.metrics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'audit' has no attribute {name!r}")

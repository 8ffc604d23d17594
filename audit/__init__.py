"""What a user runs and reads: entry points, metrics, epsilon bounds and formal accounting."""

from audit.stats.epsilon import epsilon_ceiling, epsilon_lower_bound, one_run_audit
from audit.stats.metrics import MembershipScores, advantage, auc, eps_hat, roc, tpr_at_fpr

__all__ = [
    "MembershipScores",
    "advantage",
    "auc",
    "eps_hat",
    "epsilon_ceiling",
    "epsilon_lower_bound",
    "one_run_audit",
    "roc",
    "tpr_at_fpr",
]

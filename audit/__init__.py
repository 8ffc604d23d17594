"""What a user runs and reads: entry points, metrics, epsilon bounds and formal accounting."""

from audit.epsilon import Bonferroni, Split, epsilon_lower_bound
from audit.metrics import MembershipScores, advantage, auc, eps_hat, roc, tpr_at_fpr

__all__ = ["Bonferroni", "MembershipScores", "Split", "advantage", "auc", "eps_hat", "epsilon_lower_bound", "roc",
           "tpr_at_fpr"]

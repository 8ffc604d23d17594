"""The public names of the membership-inference metrics, kept where users import them
(`audit.metrics`); the code is `audit.stats.metrics`."""

from audit.stats.metrics import MembershipScores, advantage, auc, eps_hat, roc, tpr_at_fpr

__all__ = ["MembershipScores", "advantage", "auc", "eps_hat", "roc", "tpr_at_fpr"]

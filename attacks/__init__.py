"""Membership-inference attacks: pure functions from observations to scores (higher = member)."""

from attacks.dcr import dcr_scores
from attacks.lira import VARIANCES, lira_offline, lira_online, logit_confidence
from attacks.loss import cross_entropy, loss_scores

__all__ = ["VARIANCES", "cross_entropy", "dcr_scores", "lira_offline", "lira_online", "logit_confidence", "loss_scores"]

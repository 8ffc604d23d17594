"""Membership-inference attacks: pure functions from observations to scores (higher = member)."""

from attacks.dcr import dcr_scores
from attacks.lira import VARIANCES, lira_offline, lira_online, logit_confidence
from attacks.loss import cross_entropy, loss_scores
from attacks.rmia import fit_offline_a, rmia_offline, rmia_online

__all__ = [
    "VARIANCES",
    "cross_entropy",
    "dcr_scores",
    "fit_offline_a",
    "lira_offline",
    "lira_online",
    "logit_confidence",
    "loss_scores",
    "rmia_offline",
    "rmia_online",
]

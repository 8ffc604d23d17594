"""`python -m audit.lira`: LiRA and RMIA (online and offline) and the loss attack against a victim, DCR
(raw, and calibrated on the shadows) against its released set where it has one, and with
`--threat-model white-box` the white-box attacks on its Gaussian mechanism's noisy sums."""

from __future__ import annotations

import sys

from attacks.registry import attack_names
from audit.cli.shadow_audit import main as audit_main


def command() -> dict:
    """The command's own settings of `audit.cli.shadow_audit.main` (and `audit.run`)."""
    return dict(
        prog="python -m audit.lira",
        attacks=attack_names("model", "release", "mechanism"),
        description="Audit a victim pipeline with LiRA and RMIA (online, offline), the loss attack and, for "
        "victims that release a synthetic set, distance-to-closest-record attacks on that set "
        "(raw and calibrated on the shadows); with --threat-model white-box, the white-box attacks on a DP victim's "
        "noisy sums.",
    )


def main(argv: list[str] | None = None) -> int:
    return audit_main(argv, **command())


if __name__ == "__main__":
    sys.exit(main())

"""`python -m audit.loss`: the loss-threshold attack against a victim."""

from __future__ import annotations

import sys

from audit.cli.shadow_audit import main as audit_main


def command() -> dict:
    """The command's own settings of `audit.cli.shadow_audit.main` (and `audit.run`)."""
    return dict(
        prog="python -m audit.loss",
        attacks=("loss",),
        description="Audit a victim pipeline with the loss-threshold attack.",
    )


def main(argv: list[str] | None = None) -> int:
    return audit_main(argv, **command())


if __name__ == "__main__":
    sys.exit(main())

"""`python -m audit.ganleak`: the GAN-Leaks attacks against a generator victim (one whose class sets
`stores_recon_loss`: `victims.base.generator_victim_names`), beside the loss attack, LiRA and RMIA
against the downstream ConvNet trained on its samples.

ganleak_fbb, ganleak_pbb and ganleak_wb score an example by minus its reconstruction loss under
the target's generator (nearest generated sample; Powell search over the latent code; gradient
search over it); ganleak_cal subtracts the example's mean white-box loss under the OUT shadow
generators; ganleak_lira is online LiRA with minus the log white-box loss as the statistic.
"""

from __future__ import annotations

import sys

from attacks.registry import attack_names
from audit.cli.shadow_audit import main as audit_main
from victims.base import generator_victim_names

FAMILIES = ("model", "generator", "mechanism")  # the attacks' families; mechanism: with --threat-model white-box only


def command() -> dict:
    """The command's own settings of `audit.cli.shadow_audit.main` (and `audit.run`)."""
    return dict(
        prog="python -m audit.ganleak",
        attacks=attack_names(*FAMILIES),
        victims=generator_victim_names(),
        description="Audit a conditional GAN with the GAN-Leaks attacks (full black-box, partial black-box, "
        "white-box, calibrated on the OUT shadows, and LiRA on the reconstruction loss), the loss "
        "attack, LiRA and RMIA against the ConvNet trained on its samples.",
    )


def main(argv: list[str] | None = None) -> int:
    return audit_main(argv, **command())


if __name__ == "__main__":
    sys.exit(main())

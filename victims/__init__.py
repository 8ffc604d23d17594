"""The pipelines under audit: (member subset, seed, config) -> release + observations."""

from victims import cgan, datalens, dm, dpkernel, dpsgd, dsa, kip, psg, real, subset  # noqa: F401  (each module registers its victim)
from victims.base import Observations, Victim, get_victim, register_victim, victim_config, victim_names
from victims.data import DataError, Pool, load_pool

__all__ = [
    "DataError",
    "Observations",
    "Pool",
    "Victim",
    "get_victim",
    "load_pool",
    "register_victim",
    "victim_config",
    "victim_names",
]

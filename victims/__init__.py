"""The pipelines under audit: (member subset, seed, config) -> release + observations.

`victims.pipelines` holds one module per built-in victim (imported here, so every `--victim` name
is registered); the other modules of `victims` are the parts they share."""

from victims import pipelines  # noqa: F401  (imports every pipeline module, which registers its victim)
from victims.base import Observations, Victim, get_victim, register_victim, victim_config, victim_names
from victims.data import load_pool
from victims.pool import DataError, Pool

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

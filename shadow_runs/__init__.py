"""Plan who is IN each run and keep the results on disk; no victim or torch import (`audit.executor` trains)."""

from shadow_runs.plan import membership_matrix, run_seed
from shadow_runs.store import RunStore, StoreError, experiment_id

__all__ = ["RunStore", "StoreError", "experiment_id", "membership_matrix", "run_seed"]

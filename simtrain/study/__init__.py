"""Studies over many scenarios: parameter sweeps (and, later, capacity planning).

    >>> from simtrain.study import load_sweep, run_sweep, LocalExecutor
    >>> spec = load_sweep("scenarios/sweeps/quickstart_layers.yaml")
    >>> result = run_sweep(spec, "reports/quickstart_layers", executor=LocalExecutor(2))
    >>> result.rows[0]["step_time_s"], result.files["parquet"]
"""

from simtrain.study.executors import (
    DaskExecutor,
    Executor,
    LocalExecutor,
    SerialExecutor,
    make_executor,
)
from simtrain.study.journal import Journal, JournalBusy
from simtrain.study.run import SweepResult, run_sweep
from simtrain.study.spec import Point, SweepSpec, expand_range, load_sweep

__all__ = [
    "DaskExecutor",
    "Executor",
    "Journal",
    "JournalBusy",
    "LocalExecutor",
    "Point",
    "SerialExecutor",
    "SweepResult",
    "SweepSpec",
    "expand_range",
    "load_sweep",
    "make_executor",
    "run_sweep",
]

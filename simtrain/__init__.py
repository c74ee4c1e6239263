"""simtrain: simulate distributed training steps as discrete events.

    >>> import simtrain
    >>> result = simtrain.simulate(simtrain.load_scenario("scenarios/quickstart.yaml"))
    >>> result.summary["step_time_s"], len(result.timeline)
"""

from simtrain.engine.sim import SimulationDeadlock
from simtrain.errors import ScenarioError
from simtrain.scenario import Scenario, load_scenario
from simtrain.simulate import SimulationResult, simulate

__all__ = [
    "Scenario",
    "ScenarioError",
    "SimulationDeadlock",
    "SimulationResult",
    "load_scenario",
    "simulate",
]
__version__ = "0.1.0"

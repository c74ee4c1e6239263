"""How long a scenario's kernels take on a cluster's GPU: the per-op and optimizer timers
the lowering costs its tasks with."""

from __future__ import annotations

from collections.abc import Callable

from simtrain.hardware.topology import Cluster
from simtrain.scenario import Scenario
from simtrain.training import DTYPE_BYTES, optimizer_bytes_per_param
from simtrain.workload.compute import op_time
from simtrain.workload.fp8 import FP8_GATHER_RECIPES, fp8_op_time
from simtrain.workload.model import Op
from simtrain.workload.optimizer import OptimizerStep, optimizer_step


def optimizer_timer(scenario: Scenario, cluster: Cluster
                    ) -> Callable[[list[int], int], OptimizerStep]:
    """The optimizer step's kernels on one rank, from its parameter counts and shard."""
    gpu, compute, train = cluster.gpu_spec, scenario.compute, scenario.training
    per_param = optimizer_bytes_per_param(train.optimizer, train.dtype)
    grad_bytes = DTYPE_BYTES[scenario.parallelism.ddp.grad_dtype]

    def memory_time(nbytes: float) -> float:
        return op_time(Op("optimizer", "elementwise", 0.0, nbytes, None, (), 0.0), gpu,
                       compute)

    def step(numels: list[int], shards: int) -> OptimizerStep:
        return optimizer_step(numels, shards, bytes_per_param=per_param,
                              grad_bytes=grad_bytes, memory_time=memory_time,
                              kernel_issue_s=compute.host_kernel_issue)

    return step


def op_timer(scenario: Scenario, cluster: Cluster, micro_batches: int
             ) -> Callable[[Op], float]:
    """Seconds of one op on the cluster's GPU in the scenario's dtype (FP8 recipe aware)."""
    gpu, compute, train = cluster.gpu_spec, scenario.compute, scenario.training
    recipe = train.fp8_recipe
    if recipe is None:
        def timer(op: Op) -> float:
            return op_time(op, gpu, compute, train.dtype)
    else:
        dims = scenario.parallelism.dims(cluster.num_gpus)
        gather = dims.tp if dims.sp and recipe in FP8_GATHER_RECIPES else 1

        def timer(op: Op) -> float:
            return fp8_op_time(op, gpu, compute, recipe, micro_batches, gather)
    return timer

"""What a published collective time measures besides the collective: the benchmark harness.

simtrain predicts the device time of one collective (launch latency, per-step latencies,
transfer). A benchmark prints a time that also holds the host work of the program that
timed it, which decides the small-message floor of every published sweep. Three
harnesses appear in ../shared/reference/nccl_modern.yaml:

- ``nccl-tests``: nccl-tests with one process (or thread) per GPU, timing ``iters``
  back-to-back calls and dividing. The host enqueues the next call while the GPU runs the
  current one, so a call costs max(host issue, device time); one NCCL enqueue and kernel
  launch (``LAUNCH_S``) is below every device time NCCL's tables give, so this is the
  device time.
- ``nccl-tests-threads``: nccl-tests ``-g G``: one thread drives G GPUs and issues G
  enqueues and kernel launches one after another per call (ncclGroupStart/End over G
  communicators). Back to back, a call costs max(G·LAUNCH_S, device time): flat at
  G·LAUNCH_S while the device is faster than the host (Voltage Park's single-node sweep:
  33 us from 8 B to 64 KiB).
- ``torch-bench``: ml-engineering's all_reduce_bench.py: one torch.distributed.all_reduce
  timed between two CUDA events after a barrier, so the GPU is idle when the host starts
  issuing and the measured time is the host path of one eager c10d all-reduce
  (``TORCH_CALL_S``: Python, dispatcher, ProcessGroupNCCL's stream-event wait, work
  object, NCCL enqueue and launch) plus the device time.

Parameters (each fitted by benchmarks/harness_fit.py on one series, least squares on the
relative time error, and checked on the held-out series it names):

- ``LAUNCH_S`` = 4.24 us: host seconds of one NCCL enqueue + kernel launch. Range 2-10 us:
  cudaLaunchKernel alone is 2-4 us (A. Gray, NVIDIA blog "Getting Started with CUDA
  Graphs", 2019: 3.8 us per short kernel back to back), NCCL's plan and proxy hand-off
  add to it. Fitted on voltagepark-8xh100 (-g 8, stated); held out: the Azure ND sweeps
  (one all_reduce_perf per host, so -g is inferred), where GB200's 4-GPU ring is
  host-bound below 1 MiB (4 x 4.24 = 17.0 us; published 16.2-17.8 us, MAPE 4.8%).
- ``TORCH_CALL_S`` = 20.75 us: host seconds of one eager torch all-reduce between two events.
  Range 5-50 us: an eager PyTorch op costs roughly 5-20 us of CPU (H. He, "Making Deep
  Learning Go Brrrr From First Principles", 2022, "Overhead"); a c10d collective adds its
  stream synchronisation and work bookkeeping. Fitted on mlengineering-8xh200-torch;
  held out: mlengineering-p6-b200-1x8 (same script, torch 2.9.1 and NCCL 2.27.7).
"""

from __future__ import annotations

HARNESSES = ("nccl-tests", "nccl-tests-threads", "torch-bench")
LAUNCH_S = 4.24e-6
TORCH_CALL_S = 20.75e-6


def measured_time(harness: str, device_s: float, gpus_per_process: int = 1,
                  launch_s: float = LAUNCH_S, torch_call_s: float = TORCH_CALL_S) -> float:
    """Seconds ``harness`` prints for a collective whose device time is ``device_s``
    (see the module docstring); ``gpus_per_process`` is nccl-tests' -g."""
    if device_s < 0 or gpus_per_process < 1:
        raise ValueError(f"need device_s >= 0 and gpus_per_process >= 1, got {device_s}, "
                         f"{gpus_per_process}")
    if harness == "nccl-tests":
        return max(launch_s, device_s)
    if harness == "nccl-tests-threads":
        return max(gpus_per_process * launch_s, device_s)
    if harness == "torch-bench":
        return torch_call_s + device_s
    raise ValueError(f"unknown harness {harness!r}; expected one of: {', '.join(HARNESSES)}")

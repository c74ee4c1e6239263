"""Compute/communication interference: what a running collective takes from compute.

An NCCL collective is a CUDA kernel with one CTA (thread block) per channel; while it
runs beside compute on the same GPU, its CTAs hold SMs the GEMMs cannot use, and it moves
its bytes through HBM, which the memory-bound kernels share. So, while collectives run:

- SM-bound work gets the SMs left: rate 1 - s, s = min(S_max, Σ channels·sms_per_channel
  / SMs) over the rank's running collectives;
- memory-bound work gets the HBM bandwidth left: rate 1 - u, u = min(U_max, Σ hbm_factor
  · bus bytes/s / (HBM bandwidth · memory efficiency)); a collective reads what it sends
  and writes what it receives, and a reducing one also reads its local operand
  (``HBM_FACTOR``);
- a compute task of duration d whose SM-bound share is σ then takes
  d·(σ/(1 - s) + (1 - σ)/(1 - u)) (``slowed_time``); σ is the task's FLOPs at the large-GEMM
  rate over its duration (GEMMs and attention ~1, norms and elementwise ~0).

Channels: NCCL reduces a communicator's channels for small messages until every thread
has at least a threshold of bytes (src/enqueue.cc, ``topoGetAlgoInfo``/``getAlgoInfo``:
``while (nBytes < nc*nt*threadThreshold) nc--``, with nt = 512 threads for Simple and LL,
640 for LL128, and thresholds NCCL_SIMPLE_THREAD_THRESHOLD 64, NCCL_LL_THREAD_THRESHOLD 8,
NCCL_LL128_THREAD_THRESHOLD 8 bytes per thread, times nRanks for ring; src/include/
device.h). Point-to-point sends use 2 channels per peer (NCCL_NCHANNELS_PER_NET_PEER's
default), all-to-all 2 per peer up to the communicator's channels.

``NCCL_CHANNELS``: ring/tree channels of a communicator on each architecture's NVSwitch
servers, as NCCL's topology search logs them ("<n> coll channels"): its search finds
rings over the GPU's NVLink links and duplicates them (``ncclTopoPostset``), capped by
MAXCHANNELS (64 in NCCL 2.26.2's binary, docs/collectives.md; 32 in older releases). The
values are the commonly logged ones on DGX/HGX systems, not read in the reference data;
range 2-32; ``compute.comm_channels`` overrides them. SM counts
come from the GPU catalogue (shared/reference/hardware.yaml ``sms``: A100 108, H100 132).
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.comm.model import busbw_factor

NCCL_CHANNELS: dict[str, int] = {
    "volta": 12, "ampere": 24, "hopper": 32, "blackwell": 32, "cdna3": 16,
}
NCCL_THREADS = {"simple": 512, "ll": 512, "ll128": 640}
NCCL_THREAD_THRESHOLD = {"simple": 64, "ll": 8, "ll128": 8}
P2P_CHANNELS_PER_PEER = 2
# HBM bytes per bus byte: read to send + write received (+ read the local operand).
HBM_FACTOR = {"all_reduce": 3.0, "reduce_scatter": 3.0, "reduce": 3.0}
# A collective never holds every SM or all of HBM: compute keeps at least this share.
MAX_SHARE = 0.9


def collective_channels(op: str, nbytes: float, nranks: int, protocol: str,
                        algorithm: str, channels: int) -> int:
    """Channels (CTAs) NCCL runs ``op`` of ``nbytes`` over ``nranks`` ranks with.

    nc starts at the communicator's ``channels`` and drops by one while nbytes < nc · nt ·
    threshold (threshold × nranks for ring), stopping at 1. Send/recv: 2 channels;
    all-to-all: 2 per peer, capped at ``channels``.
    """
    if op == "send_recv":
        return min(channels, P2P_CHANNELS_PER_PEER)
    if op in ("all_to_all", "all_to_all_v"):
        return min(channels, P2P_CHANNELS_PER_PEER * max(nranks - 1, 1))
    proto = protocol.lower() if protocol.lower() in NCCL_THREADS else "simple"
    threshold = NCCL_THREAD_THRESHOLD[proto] * (nranks if algorithm.startswith("ring") else 1)
    per_channel = NCCL_THREADS[proto] * threshold
    nc = channels
    while nc > 1 and nbytes < nc * per_channel:
        nc -= 1
    return nc


def slowed_time(duration: float, sm_bound: float, sm_share: float, hbm_share: float) -> float:
    """Seconds a compute task of ``duration`` takes while collectives hold ``sm_share`` of
    the SMs and ``hbm_share`` of HBM bandwidth: d·(σ/(1 - s) + (1 - σ)/(1 - u))."""
    s, u = min(sm_share, MAX_SHARE), min(hbm_share, MAX_SHARE)
    return duration * (sm_bound / (1.0 - s) + (1.0 - sm_bound) / (1.0 - u))


@dataclass(frozen=True)
class Interference:
    """The interference model of one GPU type (what ``simtrain.engine.sim`` asks)."""

    num_sms: int
    channels: int
    sms_per_channel: float
    hbm_bandwidth: float  # usable bytes/s (datasheet x memory efficiency)
    gemm_rate: float  # FLOP/s of a large GEMM (peak x ceiling): sigma's reference

    def load(self, op: str, nbytes: float, nranks: int, protocol: str, algorithm: str,
             seconds: float, sms: int = 0) -> tuple[float, float]:
        """(SM share, HBM share) one collective takes while it runs for ``seconds``; ``sms``
        > 0 is the SMs its kernels hold when they are not NCCL's (TE userbuffers)."""
        if nranks < 2 or seconds <= 0:
            return 0.0, 0.0
        if sms > 0:
            sm = min(sms, self.num_sms) / self.num_sms
        else:
            nc = collective_channels(op, nbytes, nranks, protocol, algorithm, self.channels)
            sm = nc * self.sms_per_channel / self.num_sms
        bus = nbytes * (1.0 if op == "send_recv" else busbw_factor(op, nranks)) / seconds
        hbm = HBM_FACTOR.get(op, 2.0) * bus / self.hbm_bandwidth
        return sm, hbm

    def sm_bound(self, flops: float, duration: float) -> float:
        """σ: the share of a task's ``duration`` its ``flops`` need at the large-GEMM rate."""
        if duration <= 0:
            return 0.0
        return min(1.0, flops / (self.gemm_rate * duration))

    def rate(self, flops: float, duration: float, sm_share: float, hbm_share: float) -> float:
        """Progress rate (work seconds per second) of a task under the given shares."""
        if sm_share <= 0 and hbm_share <= 0:
            return 1.0
        return duration / slowed_time(duration, self.sm_bound(flops, duration), sm_share,
                                      hbm_share)

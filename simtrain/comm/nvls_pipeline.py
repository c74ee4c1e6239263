"""NVLS (NVLink SHARP) as NCCL runs it: a chunked three-stage pipeline through the switch.

NCCL's NVLS all-reduce (src/device/all_reduce.h, runRing for NVLS) moves the buffer in
rounds: every channel and every rank of the NVLS group (a "head") owns one chunk per
round, and three warp groups work on consecutive rounds at once: scatter (user buffer ->
NVLS buffer), reduce + multicast (``multimem.ld_reduce`` / ``multimem.st`` through the
NVSwitch) and gather (NVLS buffer -> user buffer). Each round ends with a flag exchange
with every peer of the group. So, for n bytes over P ranks,

    t(n) = alpha + (n / R + D) · (T(R) + P · o)                                  (1)

with R = c · K the bytes of one round (chunk c per head, K = channels × P heads), T(x)
the time x bytes take through the switch on an idle NVLink (the flow model), o the flag
exchange with one peer, and D = 2 the rounds it takes to fill the three-stage pipeline.
Written for the engine: a latency alpha + D·(T(R) + P·o) and the flows stretched by
1 + P·o / T(R) (``pipeline_terms``).

Bandwidth: NCCL's own cost model treats NVLS bus bandwidth as independent of the number
of ranks (tuning.cc: NVLS busBw from bwIntra × nvlsEfficiency × 2, algBw = busBw ·
nRanks / (2(nRanks - 1)); ../shared/reference/nccl.yaml bandwidth_refinements), and the
measurements agree: 8×B200/B300 reach 830-845 GB/s, a 72-GPU GB200 NVL72 rack 835-839
(../shared/reference/nccl_modern.yaml). A GPU's link carries n + n/P per direction
(``simtrain.comm.in_network``), so a bus gain g (busbw / link bandwidth at infinite chunk
size) becomes the wire factor 2(P-1) / ((P+1)·g) (``wire_factor``); g can be at most
2(P-1)/(P+1) (1.56 at P = 8: the switch doing all the reduction at wire speed).

Sources and status of each parameter (fitted ones: least squares on relative time error,
sizes >= 1 MiB; benchmarks/nvls_fit.py reproduces them):

- D = 2: three pipeline stages (scatter, reduce/multicast, gather) in all_reduce.h.
- chunk rule (``nvls_chunk``): NCCL enqueue.cc caps the NVLS chunk at 128 KiB and halves
  it to 64/32/16 KiB below 64/8/2 rounds of data. VERIFIED against NCCL 2.26.2's
  libnccl.so.2 (nvidia-nccl-cu12 2.26.2 wheel, disassembled; the library keeps its
  symbols): ncclParamNvlsChunkSize defaults to 0x20000, and calcCollChunking takes
  chunk = min(chunk, comm->nvlsChunkSize), then with concurrentOps = nChannels x
  nvls.nHeads lowers it to 64 KiB if nBytes < 64 x concurrentOps x chunk, to 32 KiB if
  < 8x, to 16 KiB if < 2x, each test with the chunk the previous one left. (Across nodes
  it also caps the chunk at 32 KiB where NCCL's modelled NVLS bandwidth is under 150 GB/s;
  simtrain's NVLS runs inside one NVLink domain.) heads = P is simtrain's reading of
  nvls.nHeads on one node, not checked.
- channels (``NVLS_CHANNELS``): 16 on Hopper and 32 on Blackwell. VERIFIED against NCCL
  2.26.2: ncclNvlsInit sets nvlsChannels = compCap > 99 ? 32 : 16 when NCCL_NVLS_NCHANNELS
  is unset (-2), then bounds it by the communicator's min/max CTAs; range 1-32. (2.30.7
  moved that default elsewhere; not read.)
- o (``PEER_SYNC_S``): fitted, Hopper on the Voltage Park 8×H100 sweep (0.64 us per peer;
  held out: Azure ND H100 v5 and ND H200 v5 sweeps), Blackwell on CoreWeave's 72-GPU NVL72
  rack and the 8×B300 point (0.49 us). Physical range 0.2-2 us: one NVLink round trip
  (~1 us) per flag, overlapped across peers in part.
- g (``BUS_GAIN``): fitted with o: Hopper 1.43 (NVSwitch gen 3), Blackwell 1.31 (gen 4);
  range 1.0-1.56.
- alpha (``LATENCY_S``): fitted on Hopper, 8.2 us (launch plus the first flag wait;
  range 2-25 us; NCCL's own model lumps it into hwLat NVLS 25 us); used for Blackwell too.
"""

from __future__ import annotations

KIB = 1024
DEPTH = 2
MAX_CHUNK = 128 * KIB
# (rounds of data below which the chunk is capped, cap), in order: enqueue.cc calcCollChunking
# (verified against NCCL 2.26.2, module docstring).
_CHUNK_STEPS = ((64, 64 * KIB), (8, 32 * KIB), (2, 16 * KIB))
NVLS_CHANNELS: dict[str, int] = {"hopper": 16, "blackwell": 32}
PEER_SYNC_S: dict[str, float] = {"hopper": 0.635e-6, "blackwell": 0.485e-6}
BUS_GAIN: dict[str, float] = {"hopper": 1.428, "blackwell": 1.31}
LATENCY_S = 8.2e-6


def nvls_chunk(nbytes: float, heads: int, channels: int) -> int:
    """Chunk bytes per head: 128 KiB, halved while the message is under 64, 8, 2 rounds
    of the current chunk (``_CHUNK_STEPS``), down to 16 KiB."""
    chunk = MAX_CHUNK
    concurrent = heads * channels
    for rounds, cap in _CHUNK_STEPS:
        if nbytes < rounds * concurrent * chunk and chunk > cap:
            chunk = cap
    return chunk


def pipeline_terms(nbytes: float, round_bytes: float, seconds_per_byte: float,
                   round_sync: float, depth: int = DEPTH) -> tuple[float, float]:
    """(extra latency s, bandwidth efficiency) of equation (1) beyond alpha + T(n).

    T(R) = seconds_per_byte · R; each of n/R + depth rounds costs T(R) + round_sync, so
    the time is T(n)·(1 + sync/T(R)) + depth·(T(R) + sync): efficiency 1/(1 + sync/T(R)).
    """
    round_time = seconds_per_byte * round_bytes
    if round_time <= 0.0:
        return depth * round_sync, 1.0
    return depth * (round_time + round_sync), 1.0 / (1.0 + round_sync / round_time)


def wire_factor(ranks: int, arch: str) -> float:
    """Wire bytes per payload byte of an NVLS all-reduce: 2(P-1)/((P+1)·g), so that its
    time is 2(P-1)/P · n / (g · B) whatever P (see the module docstring)."""
    gain = BUS_GAIN.get(arch, BUS_GAIN["hopper"])
    p = max(ranks, 2)
    return 2 * (p - 1) / ((p + 1) * gain)


def nvls_overheads(nbytes: float, ranks: int, arch: str,
                   seconds_per_byte: float) -> tuple[float, float]:
    """(latency s, bandwidth efficiency) of an NVLS collective of ``nbytes`` over ``ranks``
    GPUs whose flows take ``seconds_per_byte`` on an idle NVLink: alpha plus the pipeline
    fill, and the share of bandwidth the per-round flag exchanges leave."""
    channels = NVLS_CHANNELS.get(arch, NVLS_CHANNELS["hopper"])
    sync = ranks * PEER_SYNC_S.get(arch, PEER_SYNC_S["hopper"])
    round_bytes = nvls_chunk(nbytes, ranks, channels) * ranks * channels
    fill, efficiency = pipeline_terms(nbytes, round_bytes, seconds_per_byte, sync)
    return LATENCY_S + fill, efficiency

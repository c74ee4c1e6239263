"""Would choosing algorithm and protocol by NCCL's own cost model change nccl-modern?

Run from the repository root: python benchmarks/nccl_tuner_choice.py [--all]

simtrain chooses among ring/tree/NVLS x LL/LL128/Simple by its own idle-network prediction
(NCCL's latency tables + the flows' bandwidth, simtrain.comm.model). NCCL chooses by its
tuner (src/graph/tuning.cc, NCCL 2.30.7, transcribed in ../shared/reference/nccl.yaml):
time = lat + n / algBw with

- ring: lat = baseLat + (2(P-1) - 2(N-1))·intraLat + 2(N-1)·interLat (x1.4 for multi-node
  Simple); busBw = B (LL: min(llMaxBw, B/2); LL128: 0.92·B); algBw = busBw·P/(2(P-1));
- tree: lat = baseLat + 2·((P/N - 1)·intraLat + log2(N)·interLat); busBw = 0.92·B (LL:
  min(busBw/3.8, llMaxBw); LL128: x7/9 on one node, x120/128 across nodes); algBw =
  busBw/2 x treeCorrectionFactor;
- NVLS (one node): lat = hwLat 25 us; busBw = B·nvlsEfficiency·(nCh-1)/nCh·2.

intraLat is raised to netOverhead (1 us, x3 for Simple) when the call spans nodes; llMaxBw
by GPU on one node, by host CPU across nodes. B = nChannels x per-channel bandwidth of
NCCL's topology search: the GPU's NVLink rate at topo.h's per-link figure on one or two
nodes, and on more the ring graph of NCCL 2.26.2's search (simtrain.comm.nccl_search: its
speed table and stopping rule, read from the binary, over the GPU's NVLink total and the
node's NICs behind the GPU's PCIe at NCCL's 0.75 of line rate, 48 GB/s on Gen5 x16). The
per-channel caps (perChMax*Bw x nChannels) are left out: their tables differ between NCCL
2.26.2 and the reference's 2.30.7 (docs/collectives.md, round 18), and not every series
states its version. This script is a diagnostic: it prints the points where the two
choices differ and the suite's error under each; simtrain ships its own.
"""

from __future__ import annotations

import math
import sys

from simtrain.comm.algorithms import Call
from simtrain.comm.backends import (
    _LINK_EFFICIENCY,
    _LL_ROW_BY_CPU,
    _NCCL_BASE,
    _NCCL_HW,
    _NCCL_LL_MAX,
    _NVLINK_EFFICIENCY,
    _NVLS_EFFICIENCY,
    _TREE_CORRECTION,
    PROTOCOLS,
)
from simtrain.comm.harness import measured_time
from simtrain.comm.model import CommModel, busbw_factor
from simtrain.comm.nccl_search import ring_search
from simtrain.comm.phases import servers
from simtrain.comm.validation import DEFAULT_PATH, load_series
from simtrain.hardware.topology import ClusterConfig, build_cluster

NVLS_CHANNELS = {"hopper": 16, "blackwell": 32}  # as simtrain.comm.nvls_pipeline


def nccl_time_us(algo: str, proto: str, n: float, p: int, nodes: int, arch: str, cpu: str,
                 b_intra: float, b_inter: float) -> float:
    """NCCL's predicted time (us) of an all-reduce (module docstring); inf if unavailable."""
    i = PROTOCOLS.index(proto)
    b = b_intra if nodes <= 2 else b_inter
    ll = _NCCL_LL_MAX[arch if nodes == 1 else _LL_ROW_BY_CPU[cpu]][min(nodes, 4).bit_length() - 1]
    if algo in ("ring", "tree"):
        intra = _NCCL_HW["nvlink"][algo][i]
        if nodes > 1:
            intra = max(intra, 3.0 if proto == "Simple" else 1.0)
        inter = _NCCL_HW["net"][algo][i]
    if algo == "ring":
        steps, inter_steps = 2 * (p - 1), 2 * (nodes - 1)
        lat = _NCCL_BASE["ring"][i] + (steps - inter_steps) * intra + inter_steps * inter
        lat *= 1.4 if proto == "Simple" and nodes > 1 else 1.0
        bus = {"LL": min(ll, 0.5 * b), "LL128": 0.92 * b, "Simple": b}[proto]
        alg = bus * p / (2 * (p - 1))
    elif algo == "tree":
        lat = _NCCL_BASE["tree"][i] + 2 * ((p // nodes - 1) * intra + math.log2(nodes) * inter)
        bus = 0.92 * b
        if proto == "LL":
            bus = min(bus / 3.8, ll)
        elif proto == "LL128":
            bus *= 7 / 9 if nodes == 1 else 120 / 128
        index = (int(n) >> 6).bit_length() - 1
        alg = 0.5 * bus * (_TREE_CORRECTION[proto][index] if index < 24 else 1.0)
    elif algo == "nvls" and proto == "Simple" and nodes == 1:
        ch = NVLS_CHANNELS[arch]
        lat = _NCCL_HW["nvlink"]["nvls"][2]
        alg = b_intra * _NVLS_EFFICIENCY[arch] * (ch - 1) / ch * 2 * p / (2 * (p - 1))
    else:
        return math.inf
    return lat + n / (alg * 1e3)


def main(show_all: bool) -> None:
    errors: dict[str, list[float]] = {"simtrain": [], "nccl": []}
    for s in load_series(DEFAULT_PATH):
        if s.not_expressible or s.op != "all_reduce":
            continue
        c = build_cluster(ClusterConfig(**s.cluster))
        cfg, arch = c.config, c.gpu_spec.arch
        comm = CommModel(c, "nccl", arch=arch, protocol=s.protocol)
        ranks = s.ranks or tuple(range(c.num_gpus))
        p, nodes = len(ranks), len({c.server_of(r) for r in ranks})
        b_intra = cfg.effective_nvlink_bandwidth * _NVLINK_EFFICIENCY[arch] / 1e9
        path = min(cfg.effective_pcie_bandwidth * _LINK_EFFICIENCY["pcie"], cfg.nic_bandwidth)
        b_inter = ring_search(b_intra, cfg.effective_nics_per_node, path / 1e9, 32).total
        algos = [s.algorithm] if s.algorithm != "auto" else (
            ["ring", "tree"] + ["nvls"] * cfg.effective_nvlink_sharp)
        protos = [s.protocol] if s.protocol != "auto" else list(PROTOCOLS)
        per, factor = max(len(g) for g in servers(ranks, c)), busbw_factor("all_reduce", p)
        for pt in s.points:
            if pt.busbw_gbps <= 0:
                continue
            call = Call("all_reduce", ranks, float(pt.nbytes))
            mine = comm.choose(call, s.algorithm)
            tuned = min(((nccl_time_us(a, q, pt.nbytes, p, nodes, arch, cfg.host_cpu, b_intra,
                                       b_inter), a, q) for a in algos for q in protos),
                        default=(math.inf, "", ""))
            theirs = tuned[1:] if tuned[0] < math.inf else mine[:2]
            for key, (a, q) in (("simtrain", mine[:2]), ("nccl", theirs)):
                shown = measured_time(s.harness, comm.predict(call, a, q), per)
                errors[key].append(factor * pt.nbytes / shown / 1e9 / pt.busbw_gbps - 1)
            if show_all or tuple(mine[:2]) != tuple(theirs):
                print(f"{s.id:34s} {pt.nbytes:>12d}  simtrain {mine[0]}/{mine[1]} "
                      f"{100 * errors['simtrain'][-1]:+6.1f}%   NCCL model {theirs[0]}/"
                      f"{theirs[1]} ({tuned[0]:.1f} us) {100 * errors['nccl'][-1]:+6.1f}%")
    for key, e in errors.items():
        print(f"choice by {key}: {len(e)} points, MAPE {100 * sum(map(abs, e)) / len(e):.2f}%, "
              f"mean {100 * sum(e) / len(e):+.2f}%")


if __name__ == "__main__":
    main("--all" in sys.argv[1:])

"""Cluster presets: the boxes and racks simtrain knows by name, as ClusterConfig fields.

Each preset is a dict of ``ClusterConfig`` fields in YAML spelling; a scenario's
``cluster: {preset: NAME, ...}`` merges its own fields over them. Sources per entry.
"""

from __future__ import annotations

from typing import Any

# GPU generations whose NVSwitch reduces in the network (NVLink SHARP, NVSwitch gen 3+):
# Hopper (HGX/DGX H100, H200) and Blackwell (HGX B200/B300, NVL72); NCCL's tuning.cc
# nvlsEfficiency is 0 for Volta and Ampere (reference/nccl.yaml).
NVLS_ARCHS = ("hopper", "blackwell")

# Leaf switches are taken as 64-port (NVIDIA Quantum-2 QM9700: 64 NDR ports), half down and
# half up, so 32 NIC ports per leaf; a DGX SuperPOD scalable unit is 32 servers (general
# knowledge). Rail-optimized: 32 servers per rail leaf; fat tree: 32 // nics servers.
LEAF_DOWN_PORTS = 32

# host_cpu (default intel): DGX-2, DGX H100/H200 and DGX B200 run Intel Xeon hosts (NVIDIA
# DGX datasheets; Azure's ND H100/H200 v5: Xeon 8480C, reference/nccl_modern.yaml), DGX
# A100 AMD EPYC, the NVL72 racks Grace (Arm).
# Preset dicts hold ClusterConfig fields in YAML spelling. They never pin GPU-derived numbers
# (NVLink/PCIe rates), so overriding ``gpu`` keeps the rest consistent.
CLUSTER_PRESETS: dict[str, dict[str, Any]] = {
    # DGX A100: 8x A100 80GB on NVSwitch, 8x HDR 200 Gb/s NICs, one per GPU
    # (NVIDIA/nccl#812, "DGX-A100 8x200Gbit/s IB"; reference/hardware.yaml HDR row); two
    # AMD EPYC 7742 hosts (NVIDIA DGX A100 datasheet).
    "dgx-a100": {"gpu": "a100-80gb", "gpus_per_node": 8, "intra_node": "nvswitch",
                 "nics_per_node": 8, "nic_bandwidth": "200Gbps", "fabric": "rail-optimized",
                 "host_cpu": "amd"},
    # DGX/HGX H100: 8x H100 SXM, NVLink4 via 4 NVSwitches (astra-sim HGX-H100 page), 8x CX-7
    # NDR 400 Gb/s, one per GPU (reference/hardware.yaml NDR row, nccl-tests#267).
    "dgx-h100": {"gpu": "h100-sxm", "gpus_per_node": 8, "intra_node": "nvswitch",
                 "nics_per_node": 8, "nic_bandwidth": "400Gbps", "fabric": "rail-optimized"},
    "hgx-h100": {"gpu": "h100-sxm", "gpus_per_node": 8, "intra_node": "nvswitch",
                 "nics_per_node": 8, "nic_bandwidth": "400Gbps", "fabric": "rail-optimized"},
    # DGX H200: same box as DGX H100 with H200s (8x CX-7 400G; general knowledge).
    "dgx-h200": {"gpu": "h200-sxm", "gpus_per_node": 8, "intra_node": "nvswitch",
                 "nics_per_node": 8, "nic_bandwidth": "400Gbps", "fabric": "rail-optimized"},
    # DGX B200: 8x B200 on NVLink5 (NV18, vultr HGX B200 doc), 8x 400G NICs (general knowledge).
    "dgx-b200": {"gpu": "b200", "gpus_per_node": 8, "intra_node": "nvswitch",
                 "nics_per_node": 8, "nic_bandwidth": "400Gbps", "fabric": "rail-optimized"},
    # DGX B300: 8x B300 on NVLink5 with NVLink SHARP, 8x ConnectX-8 800 Gb/s (NVIDIA DGX
    # B300 datasheet, 2025; general knowledge, not in reference/hardware.yaml).
    "dgx-b300": {"gpu": "b300", "gpus_per_node": 8, "intra_node": "nvswitch",
                 "nics_per_node": 8, "nic_bandwidth": "800Gbps", "fabric": "rail-optimized"},
    # GB200 NVL72: one NVLink domain of 72 B200s per rack (18 compute trays x 4 GPUs, two
    # Grace-Blackwell superchips of 1 Grace + 2 GPUs per tray), 1.8 TB/s NVLink5 per GPU
    # through the rack's NVSwitch trays (NVLink SHARP), and one ConnectX-7 400 Gb/s NIC
    # per GPU for scale-out (NVIDIA GB200 NVL72 product page and reference architecture;
    # general knowledge). A "node" is a rack: NCCL treats the NVLink domain as one node.
    "gb200-nvl72": {"gpu": "gb200", "gpus_per_node": 72, "intra_node": "nvswitch",
                    "gpus_per_tray": 4, "gpus_per_cpu": 2, "nics_per_node": 72,
                    "nic_bandwidth": "400Gbps", "fabric": "rail-optimized", "host_cpu": "arm"},
    # GB300 NVL72: the same rack with B300s and ConnectX-8 800 Gb/s per GPU (NVIDIA GB300
    # NVL72 product page; general knowledge).
    "gb300-nvl72": {"gpu": "gb300", "gpus_per_node": 72, "intra_node": "nvswitch",
                    "gpus_per_tray": 4, "gpus_per_cpu": 2, "nics_per_node": 72,
                    "nic_bandwidth": "800Gbps", "fabric": "rail-optimized", "host_cpu": "arm"},
    # DGX-2: 16x V100 32GB on NVSwitch, 8x EDR 100 Gb/s NICs, two GPUs per NIC (NVIDIA DGX-2
    # datasheet; the Megatron-LM 2020 calibration system, reference/calibration.yaml).
    "dgx-2": {"gpu": "v100-32gb", "gpus_per_node": 16, "intra_node": "nvswitch",
              "nics_per_node": 8, "nic_bandwidth": "100Gbps", "fabric": "rail-optimized"},
    # Generic PCIe server: 8 GPUs behind 4 PCIe Gen4 switches (2 each), two CPU sockets, one
    # shared 200G NIC. Socket link 16 GB/s is NCCL's AMD_BW (topo.h, reference/nccl.yaml).
    "pcie-a100": {"gpu": "a100-80gb-pcie", "gpus_per_node": 8, "intra_node": "pcie",
                  "pcie_switches_per_node": 4, "cpu_link_bandwidth": "16GB/s",
                  "nics_per_node": 1, "nic_bandwidth": "200Gbps", "fabric": "rail-optimized",
                  "host_cpu": "amd"},
    # Same with H100 PCIe on Gen5; socket link 22 GB/s is NCCL's SRP_QPI_BW (Sapphire Rapids).
    "pcie-h100": {"gpu": "h100-pcie", "gpus_per_node": 8, "intra_node": "pcie",
                  "pcie_switches_per_node": 4, "cpu_link_bandwidth": "22GB/s",
                  "nics_per_node": 1, "nic_bandwidth": "200Gbps", "fabric": "rail-optimized"},
}

"""GPU catalogue: published peak numbers that the compute and topology models read.

Numbers come from ``/work/shared/reference/hardware.yaml`` (sources cited per entry there and
repeated below). Where that file has no number and we filled one from the vendor datasheet
or general knowledge, the comment on the entry says so. All values are SI: FLOP/s, bytes,
bytes/s.

Conventions:
- ``peak_flops`` are *dense* tensor-core peaks (sparse figures are 2x and never used);
  "fp32" is the non-tensor FP32 rate.
- ``hbm_bytes`` uses binary GiB: vendors' "80GB" HBM is 80 GiB of DRAM (nvidia-smi shows
  81920 MiB on an A100 80GB), so GiB is the closer reading for capacity checks.
- ``nvlink_bandwidth`` / ``pcie_bandwidth`` are line rates per direction per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simtrain.hardware.power import h100_peak_ratio

_T = 1e12  # TFLOP/s -> FLOP/s
_GB = 1e9  # GB/s -> B/s (decimal, as datasheets print bandwidth)
_GIB = 2.0**30  # memory capacity

# Common spellings of dtypes, mapped to the catalogue keys.
_DTYPE_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "float8": "fp8",
    "tensorfloat32": "tf32",
}


@dataclass(frozen=True)
class GPUSpec:
    """Published peak numbers of one accelerator model."""

    name: str
    display_name: str
    arch: str
    peak_flops: dict[str, float] = field(hash=False)
    hbm_bytes: float
    hbm_bandwidth: float
    num_sms: int
    nvlink_bandwidth: float
    pcie_bandwidth: float

    def flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` ("bf16", "fp16", "fp8", "tf32", "fp32")."""
        key = dtype.strip().lower()
        key = _DTYPE_ALIASES.get(key, key)
        if key not in self.peak_flops:
            known = ", ".join(sorted(self.peak_flops))
            raise ValueError(
                f"GPU {self.name!r} has no published peak for dtype {dtype!r}; "
                f"use one of: {known}"
            )
        return self.peak_flops[key]


def _spec(
    name: str,
    display_name: str,
    arch: str,
    *,
    tflops: dict[str, float],
    hbm_gib: float,
    hbm_tb_s: float,
    sms: int,
    nvlink_gb_s: float,
    pcie_gb_s: float,
) -> GPUSpec:
    """Build a GPUSpec from datasheet units (TFLOP/s, GiB, TB/s, GB/s)."""
    return GPUSpec(
        name=name,
        display_name=display_name,
        arch=arch,
        peak_flops={k: v * _T for k, v in tflops.items()},
        hbm_bytes=hbm_gib * _GIB,
        hbm_bandwidth=hbm_tb_s * 1e12,
        num_sms=sms,
        nvlink_bandwidth=nvlink_gb_s * _GB,
        pcie_bandwidth=pcie_gb_s * _GB,
    )


_CATALOGUE = [
    # NVIDIA Tesla V100 datasheet (SXM2 32GB): 125 TFLOP/s tensor (fp16 in, fp32 accumulate),
    # 15.7 TFLOP/s fp32, 900 GB/s HBM2, NVLink2 300 GB/s total = 150 GB/s per direction,
    # PCIe Gen3 x16 32 GB/s total = 16 GB/s per direction; 80 SMs (Volta whitepaper).
    # No bf16/tf32/fp8 on Volta. Needed for the Megatron-LM DGX-2 calibration rows.
    _spec("v100-32gb", "V100 SXM2 32GB", "volta",
          tflops={"fp16": 125.0, "fp32": 15.7},
          hbm_gib=32, hbm_tb_s=0.9, sms=80, nvlink_gb_s=150, pcie_gb_s=16),
    # hardware.yaml "A100 40GB SXM4" (NVIDIA A100 datasheet r4 via glennklockwood.com):
    # NVLink3 12 links x 25 GB/s = 300 GB/s per direction; PCIe Gen4 32 GB/s per direction.
    _spec("a100-40gb", "A100 SXM4 40GB", "ampere",
          tflops={"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5},
          hbm_gib=40, hbm_tb_s=1.555, sms=108, nvlink_gb_s=300, pcie_gb_s=32),
    # hardware.yaml "A100 80GB SXM4" (same die as 40GB; HBM2e 2.039 TB/s). fp32 19.5 is the
    # 40GB row's value (same GA100 die).
    _spec("a100-80gb", "A100 SXM4 80GB", "ampere",
          tflops={"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5},
          hbm_gib=80, hbm_tb_s=2.039, sms=108, nvlink_gb_s=300, pcie_gb_s=32),
    # hardware.yaml "A100 80GB PCIe" gives bf16 312 and 1.935 TB/s (thundercompute). fp16/tf32/
    # fp32 filled from the A100 datasheet (same GA100 die and clocks for tensor peaks).
    # nvlink 0.0: the optional 2-GPU NVLink bridge is not modelled; our PCIe boxes have none.
    _spec("a100-80gb-pcie", "A100 PCIe 80GB", "ampere",
          tflops={"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5},
          hbm_gib=80, hbm_tb_s=1.935, sms=108, nvlink_gb_s=0.0, pcie_gb_s=32),
    # hardware.yaml "H100 SXM5 80GB" (NVIDIA TFLOPS table via glennklockwood.com; NVLink4
    # 450 GB/s per direction line rate, NVIDIA/nccl-tests#212). PCIe Gen5 128 GB/s total ->
    # 64 GB/s per direction (derived).
    _spec("h100-sxm", "H100 SXM5 80GB", "hopper",
          tflops={"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 66.9},
          hbm_gib=80, hbm_tb_s=3.35, sms=132, nvlink_gb_s=450, pcie_gb_s=64),
    # H800 SXM (the export variant of H100 SXM): hardware.yaml "H800 SXM" gives only the
    # DeepSeek-V3 report's "NVLink offers a bandwidth of 160 GB/s" (an achieved figure).
    # NVIDIA's H800 SXM5 datasheet (general knowledge): the H100 SXM's tensor peaks
    # (1,979 bf16 / 3,958 fp8 TFLOP/s with sparsity -> 989.4 / 1978.9 dense), 80 GB HBM3
    # at 3.35 TB/s, 132 SMs, and NVLink cut to 400 GB/s: 8 NVLink4 links, 200 GB/s per
    # direction (160 GB/s achieved is 80% of it, as NCCL reaches on H100's 450).
    _spec("h800", "H800 SXM5 80GB", "hopper",
          tflops={"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 66.9},
          hbm_gib=80, hbm_tb_s=3.35, sms=132, nvlink_gb_s=200, pcie_gb_s=64),
    # Meta Grand Teton's H100: measured_runs.yaml (torchtitan benchmarks, hardware) "H100
    # SXM-class, 96GB HBM2e, 2.4 TB/s, default 500W power limit"; torchtitan
    # docs/performance.md "H100 (94/95GB HBM2e, lower TDP)" -> 94 GiB visible. The GH100
    # die (132 SMs) and NVLink4 (450 GB/s per direction, "fully connected" as stated) are
    # H100 SXM's. Its tensor peaks are not (torchtitan's MFU uses the SXM's and says it
    # "overstates the lower-TDP part's peak"): the die at 500 W keeps 0.903 of them, on
    # the line between the 400 W H100 NVL and the 700 W SXM ratings
    # (simtrain.hardware.power). FP32 (quoted at the boost clock) keeps the SXM's.
    _spec("h100-96gb-hbm2e-500w", "H100 SXM 96GB HBM2e (500 W)", "hopper",
          tflops={**{k: v * h100_peak_ratio(500.0) for k, v in
                     {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7}.items()},
                  "fp32": 66.9},
          hbm_gib=94, hbm_tb_s=2.4, sms=132, nvlink_gb_s=450, pcie_gb_s=64),
    # hardware.yaml "H100 PCIe": only bf16 756 (torchtitan). Filled from the NVIDIA H100 PCIe
    # datasheet (general knowledge): fp16 756, fp8 1513 and tf32 378 (half the "with
    # sparsity" figures), fp32 51.2, HBM2e 2.0 TB/s, 114 SMs. NVLink bridge not modelled.
    _spec("h100-pcie", "H100 PCIe 80GB", "hopper",
          tflops={"bf16": 756, "fp16": 756, "fp8": 1513, "tf32": 378, "fp32": 51.2},
          hbm_gib=80, hbm_tb_s=2.0, sms=114, nvlink_gb_s=0.0, pcie_gb_s=64),
    # hardware.yaml "H200 SXM 141GB": bf16 989, fp8 1979 (dense = half of 3958 sparse), HBM3e
    # 4.8 TB/s, NVLink4 450 GB/s per direction, PCIe 128 GB/s total. fp16/tf32/fp32 and the
    # 132 SMs are H100 SXM's (same GH100 die, general knowledge).
    _spec("h200-sxm", "H200 SXM 141GB", "hopper",
          tflops={"bf16": 989, "fp16": 989, "fp8": 1979, "tf32": 494.7, "fp32": 66.9},
          hbm_gib=141, hbm_tb_s=4.8, sms=132, nvlink_gb_s=450, pcie_gb_s=64),
    # hardware.yaml "B200 (HGX, 1000 W)" (glennklockwood.com B200 table from NVIDIA): bf16
    # 2250, tf32 1100, fp8 4500, fp4 9000; HBM3e 8.0 TB/s; NVLink5 900 GB/s per direction.
    # Capacity: 179 GiB is what HGX B200 exposes (docs.vultr.com; 192 GB on the box).
    # 148 SMs and PCIe Gen5 (64 GB/s per direction) from general knowledge; fp32 not
    # published in the reference, so omitted.
    _spec("b200", "B200 SXM 180GB", "blackwell",
          tflops={"bf16": 2250, "fp16": 2250, "fp8": 4500, "fp4": 9000, "tf32": 1100},
          hbm_gib=179, hbm_tb_s=8.0, sms=148, nvlink_gb_s=900, pcie_gb_s=64),
    # hardware.yaml "B200 in GB200 (1200 W)": bf16 2500, tf32 1250, fp8 5000, fp4 10000
    # (dense). HBM3e: Azure ND GB200 v6 reports "GB200 185GB" (reference/nccl_modern.yaml;
    # taken as the visible GiB, like B200's 179) at 8.0 TB/s (as B200), NVLink5 900 GB/s
    # per direction (1.8 TB/s per GPU, hardware.yaml NVLink5 row); 148 SMs as the B200
    # (same die, general knowledge).
    _spec("gb200", "B200 in GB200 185GB", "blackwell",
          tflops={"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 10000, "tf32": 1250},
          hbm_gib=185, hbm_tb_s=8.0, sms=148, nvlink_gb_s=900, pcie_gb_s=64),
    # B300 (Blackwell Ultra, HGX/DGX B300) is not in hardware.yaml. NVIDIA's published
    # specs (HGX B300 / DGX B300 datasheets, Blackwell Ultra technical blog, 2025): 288 GB
    # HBM3e at 8 TB/s, NVLink5 1.8 TB/s per GPU (900 per direction), dense FP4 15 PF
    # (sparse 2x omitted); bf16/fp16 2250, tf32 1100 and fp8 4500 dense as the HGX B200
    # (the datasheets' 72 PFLOPS FP8 per 8 GPUs is the sparse figure, same as DGX B200).
    # 148 SMs as enabled on B200 (the die has 160; general knowledge, low confidence).
    # Capacity: 288 GB decimal = 268 GiB (how much is visible is not published).
    # PCIe Gen6 x16 = 128 GB/s per direction (ConnectX-8 SuperNIC, datasheet).
    _spec("b300", "B300 SXM 288GB", "blackwell",
          tflops={"bf16": 2250, "fp16": 2250, "fp8": 4500, "fp4": 15000, "tf32": 1100},
          hbm_gib=268, hbm_tb_s=8.0, sms=148, nvlink_gb_s=900, pcie_gb_s=128),
    # B300 in GB300 (NVL72), NVIDIA GB300 NVL72 product page (2025): per rack 360 PF bf16
    # and 720 PF fp8 with sparsity, 1,080 PF dense FP4, 20-21 TB HBM3e at 576 TB/s and
    # 130 TB/s of NVLink -> per GPU 2500 bf16, 5000 fp8, 15000 fp4 dense, 288 GB, 8 TB/s,
    # 1.8 TB/s NVLink (900 per direction), capacity 268 GiB as B300. tf32 1250 as GB200
    # (general knowledge).
    _spec("gb300", "B300 in GB300 288GB", "blackwell",
          tflops={"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 15000, "tf32": 1250},
          hbm_gib=268, hbm_tb_s=8.0, sms=148, nvlink_gb_s=900, pcie_gb_s=128),
    # hardware.yaml "MI300X" (confidence low): bf16/fp16 1307.4 (torchtitan table), fp8
    # 2614.9, HBM3 5.3 TB/s, 304 CUs, Infinity Fabric 896 GB/s aggregate -> 448 GB/s per
    # direction (derived; 7 xGMI links, low confidence). tf32 653.7 and fp32 163.4 from the
    # AMD MI300X datasheet (general knowledge). PCIe Gen5 x16 -> 64 GB/s per direction.
    _spec("mi300x", "Instinct MI300X 192GB", "cdna3",
          tflops={"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "tf32": 653.7, "fp32": 163.4},
          hbm_gib=192, hbm_tb_s=5.3, sms=304, nvlink_gb_s=448, pcie_gb_s=64),
]

GPUS: dict[str, GPUSpec] = {spec.name: spec for spec in _CATALOGUE}


def get_gpu(name: str) -> GPUSpec:
    """Catalogue entry by key, case-insensitive ("H100-SXM" finds "h100-sxm")."""
    key = str(name).strip().lower()
    if key not in GPUS:
        raise ValueError(
            f"unknown GPU {name!r}; use one of: {', '.join(sorted(GPUS))}"
        )
    return GPUS[key]

"""Reproduce the NVLS pipeline parameters of simtrain/comm/nvls_pipeline.py.

Run from the repository root: python benchmarks/nvls_fit.py
Least squares on relative time error, sizes >= 1 MiB, equation (1) of nvls_pipeline:
Hopper (g, o, alpha) on the Voltage Park 8xH100 sweep, the Azure ND H100/H200 v5 sweeps held
out; Blackwell (g, o) on CoreWeave's 72-GPU NVL72 rack plus the 8xB300 NVLS point (alpha and
the depth kept from Hopper). Link bandwidths: 18 NVLink links x 25 (Hopper) or 50 (Blackwell)
GB/s x topo.h's 20.6/25 or 40.1/50 (simtrain.comm.backends).
"""

from __future__ import annotations

import numpy as np
from ruamel.yaml import YAML
from scipy.optimize import least_squares

from simtrain.comm import nvls_pipeline as nv

REF = YAML(typ="safe").load(open("/work/shared/reference/nccl_modern.yaml"))
LINK = {"hopper": 18 * 25e9 * 20.6 / 25, "blackwell": 18 * 50e9 * 40.1 / 50}


def timed(rows: list[dict], key: str = "bytes") -> list[tuple[float, float]]:
    return [(r[key], r["time_us"] * 1e-6) for r in rows if r[key] >= 2**20]


def from_busbw(rows: list[dict], p: int, key: str = "bytes",
               bus: str = "busbw") -> list[tuple[float, float]]:
    return [(r[key], 2 * (p - 1) / p * r[key] / (r[bus] * 1e9)) for r in rows
            if r[key] >= 2**20]


def model(n: float, p: int, arch: str, gain: float, sync: float, alpha: float) -> float:
    a = gain * LINK[arch] * p / (2 * (p - 1))  # algbw at infinite chunk size
    channels = nv.NVLS_CHANNELS[arch]
    round_bytes = nv.nvls_chunk(n, p, channels) * p * channels
    fill, eff = nv.pipeline_terms(n, round_bytes, 1 / a, p * sync)
    return alpha + fill + n / a / eff


def errors(points: list[tuple[float, float]], p: int, arch: str, *x: float) -> np.ndarray:
    return np.array([t / model(n, p, arch, *x) - 1 for n, t in points])


def main() -> None:
    vp = timed(REF["voltagepark_h100_allreduce_curves"]["rows"]["single_node_8_gpus"])
    az = REF["azure_nd_vm_allreduce_curves"]["rows"]
    held = {"azure-h100": from_busbw(az["nd_h100_v5_nvls"], 8, "bytes_inf"),
            "azure-h200": from_busbw(az["nd_h200_v5_nvls"], 8, "bytes_inf")}
    fit = least_squares(lambda x: errors(vp, 8, "hopper", x[0], x[1] * 1e-6, x[2] * 1e-6),
                        [1.4, 0.6, 5.0], bounds=([1.0, 0.0, 0.0], [1.56, 5.0, 50.0]))
    g, o, alpha = fit.x
    print(f"hopper: g {g:.3f}, o {o:.3f} us per peer, alpha {alpha:.2f} us; MAPE train "
          f"{np.mean(np.abs(fit.fun)):.1%}")
    for name, pts in held.items():
        e = errors(pts, 8, "hopper", g, o * 1e-6, alpha * 1e-6)
        print(f"  held out {name}: MAPE {np.mean(np.abs(e)):.1%}, worst {np.max(np.abs(e)):.1%}")
    nvl = timed(REF["coreweave_gb200_nvl72_allreduce"]["rows"]["single_rack_72_gpus"])
    b300 = [(8 << 30, 2 * 7 / 8 * (8 << 30) / 845e9)]  # nccl#2140: 8x B300 NVLS 845 GB/s

    def both(x: np.ndarray) -> np.ndarray:
        return np.concatenate([errors(nvl, 72, "blackwell", x[0], x[1] * 1e-6, alpha * 1e-6),
                               errors(b300, 8, "blackwell", x[0], x[1] * 1e-6, alpha * 1e-6)])

    fit_b = least_squares(both, [1.3, 0.5], bounds=([1.0, 0.0], [1.56, 5.0]))
    print(f"blackwell: g {fit_b.x[0]:.3f}, o {fit_b.x[1]:.3f} us per peer; errors "
          f"{np.round(fit_b.fun * 100, 1)} %")


if __name__ == "__main__":
    main()

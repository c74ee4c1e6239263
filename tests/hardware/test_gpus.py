"""GPU catalogue: values match reference/hardware.yaml (and the V100 datasheet)."""

from __future__ import annotations

import pytest

from simtrain.hardware.gpus import GPUS, get_gpu

GIB = 2.0**30


def test_catalogue_has_the_expected_entries() -> None:
    assert set(GPUS) == {
        "v100-32gb", "a100-40gb", "a100-80gb", "a100-80gb-pcie", "h100-sxm",
        "h100-pcie", "h200-sxm", "b200", "gb200", "b300", "gb300", "mi300x", "h800",
        "h100-96gb-hbm2e-500w",
    }
    for key, spec in GPUS.items():
        assert spec.name == key
        assert spec.arch in {"volta", "ampere", "hopper", "blackwell", "cdna3"}


def test_h100_sxm_matches_reference() -> None:
    h100 = get_gpu("h100-sxm")
    # hardware.yaml: 989.4 dense BF16 TFLOP/s, 1978.9 FP8, 3.35 TB/s, 132 SMs, NVLink4 450 GB/s
    # per direction, PCIe Gen5 128 GB/s total -> 64 per direction.
    assert h100.flops("bf16") == pytest.approx(989.4e12)
    assert h100.flops("fp8") == pytest.approx(1978.9e12)
    assert h100.hbm_bandwidth == pytest.approx(3.35e12)
    assert h100.hbm_bytes == 80 * GIB
    assert h100.num_sms == 132
    assert h100.nvlink_bandwidth == pytest.approx(450e9)
    assert h100.pcie_bandwidth == pytest.approx(64e9)


def test_a100_v100_b200_mi300x_values() -> None:
    a100 = get_gpu("a100-80gb")
    assert a100.flops("bf16") == pytest.approx(312e12)
    assert a100.hbm_bandwidth == pytest.approx(2.039e12)
    assert a100.nvlink_bandwidth == pytest.approx(300e9)  # 12 links x 25 GB/s
    assert a100.num_sms == 108
    assert get_gpu("a100-40gb").hbm_bandwidth == pytest.approx(1.555e12)
    # V100 datasheet: 125 TFLOP/s tensor fp16, 900 GB/s, NVLink 300 bidir = 150 per direction.
    v100 = get_gpu("v100-32gb")
    assert v100.flops("fp16") == pytest.approx(125e12)
    assert (v100.hbm_bandwidth, v100.num_sms) == (pytest.approx(900e9), 80)
    assert v100.nvlink_bandwidth == pytest.approx(150e9)
    assert v100.pcie_bandwidth == pytest.approx(16e9)
    b200 = get_gpu("b200")
    assert b200.flops("bf16") == pytest.approx(2250e12)
    assert b200.nvlink_bandwidth == pytest.approx(900e9)  # NVLink5 1800 bidir / 2
    assert b200.num_sms == 148
    mi = get_gpu("mi300x")
    assert mi.flops("bf16") == pytest.approx(1307.4e12)
    assert mi.num_sms == 304
    assert get_gpu("h200-sxm").hbm_bandwidth == pytest.approx(4.8e12)
    assert get_gpu("h100-pcie").num_sms == 114


def test_pcie_cards_have_no_nvlink() -> None:
    assert get_gpu("a100-80gb-pcie").nvlink_bandwidth == 0.0
    assert get_gpu("h100-pcie").nvlink_bandwidth == 0.0


def test_lookup_is_case_insensitive_and_dtype_aliases_work() -> None:
    assert get_gpu(" H100-SXM ") is GPUS["h100-sxm"]
    assert get_gpu("a100-80gb").flops("BFloat16") == pytest.approx(312e12)


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"'h1000'.*h100-sxm"):
        get_gpu("h1000")


def test_unknown_dtype_names_known_ones() -> None:
    # Volta has no bf16 tensor cores.
    with pytest.raises(ValueError, match=r"'bf16'.*fp16, fp32"):
        get_gpu("v100-32gb").flops("bf16")


def test_specs_are_hashable_and_frozen() -> None:
    spec = get_gpu("b200")
    assert hash(spec) == hash(get_gpu("b200"))
    with pytest.raises(AttributeError):
        spec.num_sms = 1  # type: ignore[misc]


def test_grace_blackwell_and_blackwell_ultra_values() -> None:
    # hardware.yaml "B200 in GB200 (1200 W)": 2500 bf16, 5000 fp8, 10000 fp4 dense;
    # NVLink5 900 GB/s per direction (1.8 TB/s per GPU).
    gb200 = get_gpu("gb200")
    assert gb200.flops("bf16") == pytest.approx(2500e12)
    assert gb200.flops("fp8") == pytest.approx(5000e12)
    assert gb200.nvlink_bandwidth == pytest.approx(900e9)
    # B300 (NVIDIA HGX B300 datasheet): 288 GB = 268 GiB HBM3e at 8 TB/s, 15 PF dense FP4,
    # 4.5 PF dense FP8; GB300 (GB300 NVL72 page): 720 PF sparse FP8 / 72 / 2 = 5 PF dense.
    b300, gb300 = get_gpu("b300"), get_gpu("gb300")
    assert b300.hbm_bytes == 268 * GIB and b300.hbm_bandwidth == pytest.approx(8e12)
    assert b300.flops("fp4") == pytest.approx(15000e12)
    assert b300.flops("fp8") == pytest.approx(4500e12)
    assert gb300.flops("fp8") == pytest.approx(5000e12)
    assert {b300.arch, gb300.arch, gb200.arch} == {"blackwell"}


def test_h800_and_grand_teton_h100_values() -> None:
    # H800: H100 SXM compute, NVLink 400 GB/s total = 200 GB/s per direction (8 links x 25).
    h800, h100 = get_gpu("h800"), get_gpu("h100-sxm")
    assert h800.flops("bf16") == h100.flops("bf16") == pytest.approx(989.4e12)
    assert h800.nvlink_bandwidth == pytest.approx(200e9)
    assert h800.hbm_bandwidth == pytest.approx(3.35e12)
    # Grand Teton H100: 2.4 TB/s HBM2e (measured_runs.yaml), 94 GiB visible (torchtitan docs).
    teton = get_gpu("h100-96gb-hbm2e-500w")
    assert teton.hbm_bandwidth == pytest.approx(2.4e12)
    assert teton.hbm_bytes == 94 * 2**30
    assert teton.arch == "hopper" and teton.num_sms == 132

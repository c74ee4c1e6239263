"""The benchmark harness a published collective time holds (simtrain.comm.harness)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain.comm.harness import HARNESSES, LAUNCH_S, TORCH_CALL_S, measured_time


def test_nccl_tests_threads_is_host_bound_below_g_launches_by_hand():
    # -g 8 with 4 us per enqueue + launch: the host needs 8 x 4 = 32 us per call, so a
    # 15 us device time shows as 32 us and a 50 us one as 50 us.
    assert measured_time("nccl-tests-threads", 15e-6, 8, launch_s=4e-6) == pytest.approx(32e-6)
    assert measured_time("nccl-tests-threads", 50e-6, 8, launch_s=4e-6) == pytest.approx(50e-6)


def test_torch_bench_adds_one_host_call_by_hand():
    # one call timed from an idle GPU: 20 us of host path + 15 us on the device = 35 us.
    assert measured_time("torch-bench", 15e-6, torch_call_s=20e-6) == pytest.approx(35e-6)


def test_nccl_tests_one_process_per_gpu_is_the_device_time():
    assert measured_time("nccl-tests", 15e-6) == 15e-6
    assert measured_time("nccl-tests", 0.0) == LAUNCH_S


def test_parameters_inside_their_documented_ranges():
    assert 2e-6 <= LAUNCH_S <= 10e-6 and 5e-6 <= TORCH_CALL_S <= 50e-6


@given(st.sampled_from(HARNESSES), st.floats(0, 1), st.floats(0, 1), st.integers(1, 16))
def test_a_slower_device_never_measures_faster(harness, a, b, g):
    lo, hi = sorted((a, b))
    assert measured_time(harness, lo, g) <= measured_time(harness, hi, g)
    assert measured_time(harness, lo, g) >= lo


def test_bad_harness_and_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="unknown harness 'mpi'"):
        measured_time("mpi", 1e-6)
    with pytest.raises(ValueError, match="gpus_per_process >= 1"):
        measured_time("nccl-tests-threads", 1e-6, 0)

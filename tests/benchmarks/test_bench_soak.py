"""The soak benchmark's RSS slope: least squares in MiB/hour over the samples after the warm-up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_soak import slope_mib_per_hour  # noqa: E402


def test_slope_of_a_steady_leak_is_its_rate_per_hour_whatever_the_noise_around_it() -> None:
    # 0.5 MiB per hour for an hour, sampled every minute, with +-0.3 MiB of alternating noise
    samples = [(60.0 * i, 100.0 + 0.5 * i / 60 + (0.3 if i % 2 else -0.3)) for i in range(61)]
    assert slope_mib_per_hour(samples) == pytest.approx(0.5, abs=0.05)


def test_flat_and_degenerate_series() -> None:
    assert slope_mib_per_hour([(60.0 * i, 80.0) for i in range(10)]) == 0.0
    assert slope_mib_per_hour([(0.0, 80.0)]) is None
    assert slope_mib_per_hour([(5.0, 80.0), (5.0, 81.0)]) is None

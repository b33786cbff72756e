"""Public supports: builders and snapping."""

from __future__ import annotations

import numpy as np

from labeldp.mechanisms import explicit_support, integer_grid, log_grid, uniform_grid


def test_builders_produce_sorted_public_grids() -> None:
    assert integer_grid(0, 52).values.tolist() == list(range(53))
    assert integer_grid(0, 100, 25).values.tolist() == [0, 25, 50, 75, 100]
    u = uniform_grid(0.0, 1.0, 5)
    assert np.allclose(u.values, [0, 0.25, 0.5, 0.75, 1])
    lg = log_grid(1.0, 1000.0, 4, include_zero=True)
    assert np.allclose(lg.values, [0, 1, 10, 100, 1000])
    assert explicit_support([3.0, 1.0, 2.0]).values.tolist() == [1, 2, 3]


def test_arithmetic_and_binary_search_snapping_agree() -> None:
    labels = np.random.default_rng(0).uniform(-20, 120, 50_000)
    for grid in (integer_grid(0, 100, 5), uniform_grid(0.0, 100.0, 37)):
        by_search = explicit_support(grid.values).snap(labels)
        by_arith = grid.snap(labels)
        # they may differ only for labels within rounding distance of a midpoint
        differ = by_search != by_arith
        mid = (grid.values[by_search] + grid.values[by_arith]) / 2
        assert np.all(np.abs(labels[differ] - mid[differ]) < 1e-9)


def test_snapping_picks_the_nearest_point_after_clipping() -> None:
    s = log_grid(1.0, 1000.0, 4)
    assert s.snap(np.array([-5.0, 1.0, 5.4, 5.6, 60.0, 1e6])).tolist() == [0, 0, 0, 1, 2, 3]
    assert s.counts(np.array([1.0, 1.0, 999.0])).tolist() == [2, 0, 0, 1]

"""The demo's figures, rendered and inspected: cells drawn as cells (a transition matrix has no gradient
between bins), a colour bar for every heat map, the "predict the mean" reference on the loss curve, the
ledger's history in the budget figure (held to the edge, never dropping to 0), the audit's
multiplicative advantage as values on the ε axis, no two tick labels of any axis overlapping, and
every figure at most 12 inches wide with no type under 9 points — on both shipped regression datasets
(real-valued prices, integer weeks)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import QuadMesh

from labeldp.demo.mechanism import laplace_labels
from labeldp.demo.plots import (
    MAX_WIDTH,
    SMALLEST_TYPE,
    audit_figure,
    budget_figure,
    loss_curve_figure,
    mechanism_figure,
)
from labeldp.mechanisms import optimize_rr_on_bins
from labeldp.mechanisms.advantage import advantages, channel_advantages, targets_of
from labeldp.mechanisms.baselines import laplace_channel
from labeldp.samples import LabelDataset, diamond_prices, weeks_worked
from tests.support.seeded import SeededRandom


def render(fig: Any) -> Any:
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def assert_ticks_apart(fig: Any) -> None:
    """No two visible tick labels of one axis overlap (the usual symptom: 10000 12500 15000 run into
    each other)."""
    renderer = render(fig)
    for ax in fig.axes:
        for axis, lo, hi in ((ax.xaxis, "x0", "x1"), (ax.yaxis, "y0", "y1")):
            boxes = [
                t.get_window_extent(renderer)
                for t in axis.get_ticklabels()
                if t.get_visible() and t.get_text()
            ]
            boxes.sort(key=lambda b: getattr(b, lo))
            for a, b in itertools.pairwise(boxes):
                overlap = getattr(a, hi) - getattr(b, lo)
                assert overlap <= 0.5, (ax.get_title(), [t.get_text() for t in axis.get_ticklabels()])


def assert_readable(fig: Any) -> None:
    """A page or a screen shows the figure whole (at most MAX_WIDTH inches) and every piece of text in
    it — titles, ticks, legends, bar labels — at SMALLEST_TYPE points or more."""
    from matplotlib.text import Text

    render(fig)
    width, _ = fig.get_size_inches()
    assert width <= MAX_WIDTH, width
    small = [
        (t.get_text(), t.get_fontsize())
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < SMALLEST_TYPE
    ]
    assert small == []


def test_the_readability_check_notices_a_wide_figure_and_small_type() -> None:
    from matplotlib.figure import Figure

    wide = Figure(figsize=(21, 4.8))
    wide.subplots()
    with pytest.raises(AssertionError):
        assert_readable(wide)
    small = Figure(figsize=(6, 4))
    small.subplots().legend(handles=[], title="x", fontsize=8, title_fontsize=8)
    with pytest.raises(AssertionError):
        assert_readable(small)


def release(ds: LabelDataset, epsilon: float) -> tuple[np.ndarray, np.ndarray, Any, np.ndarray]:
    y = ds.labels[:20_000]
    prior = ds.support.counts(y) / y.size
    mechanism = optimize_rr_on_bins(ds.support, prior, epsilon, "squared")
    noisy = mechanism.randomize(y, rng=SeededRandom(1))
    published = mechanism.describe(prior=prior, epsilon_prior=0.1, epsilon_total=epsilon + 0.1)
    return y, prior, published, noisy


@pytest.mark.parametrize("loader", [diamond_prices, weeks_worked])
def test_mechanism_figure_draws_cells_with_colour_bars_and_readable_ticks(loader: Any) -> None:
    ds = loader()
    y, prior, published, noisy = release(ds, 2.0)
    fig = mechanism_figure(ds, y, prior, published, noisy, laplace_labels(ds, 2.0, y))
    panels = fig.axes[:4]
    for ax in panels:
        assert not ax.images, ax.get_title()  # never an interpolated image
    heat_maps = [c for ax in panels[1:] for c in ax.collections if isinstance(c, QuadMesh)]
    assert len(heat_maps) == 3 and all(mesh.colorbar is not None for mesh in heat_maps)
    matrix = np.asarray(heat_maps[0].get_array())
    assert matrix.shape == (published.m, len(published.support))
    assert np.allclose(matrix.sum(axis=0), 1.0)  # each true label's column is a distribution
    assert heat_maps[1].norm.vmin == 1 and heat_maps[1].norm is heat_maps[2].norm  # one log scale
    assert_ticks_apart(fig)
    assert_readable(fig)


def test_the_overlap_check_notices_crowded_ticks() -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2))
    ax = fig.subplots()
    ax.set_xticks(np.linspace(0, 20_000, 21), [f"{v:,.0f}" for v in np.linspace(0, 20_000, 21)])
    with pytest.raises(AssertionError):
        assert_ticks_apart(fig)


def test_loss_curve_shows_what_predicting_the_mean_costs() -> None:
    ds = diamond_prices()
    rows = [
        {"epsilon": e, "rr_on_bins": 1e7 / e, "known_prior": 0.9e7 / e, "laplace": 2e7 / e}
        for e in (0.25, 1.0, 4.0)
    ]
    fig = loss_curve_figure(ds, rows)
    (ax,) = fig.axes
    reference = [line for line in ax.get_lines() if line.get_label() == "predict the mean"]
    assert len(reference) == 1 and reference[0].get_ydata()[0] == pytest.approx(np.var(ds.labels))
    assert_ticks_apart(fig)
    assert_readable(fig)


def test_budget_figure_shows_the_ledger_history() -> None:
    ledger = [
        {"kind": "budget_set", "epsilon": 3.0, "examples": 0, "created_at": "t0"},
        {"kind": "charge", "epsilon": 1.0, "examples": 43_152, "created_at": "t1"},
        {"kind": "budget_set", "epsilon": 5.0, "examples": 0, "created_at": "t2"},
        {"kind": "charge", "epsilon": 0.5, "examples": 43_152, "created_at": "t3"},
    ]
    values = {
        "ledger": ledger,
        "privacy": {"epsilon": 1.0},
        "test_rmse": {
            "rr_on_bins_private": 3030.0,
            "laplace_baseline": 4675.0,
            "non_private": 543.0,
            "predict_mean": 3988.0,
        },
    }
    fig = budget_figure(values)
    left, right = fig.axes
    budget, charged = (patch.get_data().values for patch in left.patches)
    assert list(budget) == [3.0, 3.0, 5.0, 5.0] and list(charged) == [0.0, 1.0, 1.0, 1.5]
    for patch, values_drawn in zip(left.patches, ([3.0, 5.0], [0.0, 1.0, 1.5]), strict=True):
        # the line holds its last value to the edge: no drop to 0 as if the budget vanished
        drawn = patch.get_path().vertices[:, 1]
        assert set(drawn) == set(values_drawn), drawn
        assert drawn[-1] == values_drawn[-1]
    assert [t.get_text() for t in left.get_xticklabels()] == ["budget set", "charge", "budget set", "charge"]
    assert [t.get_text() for t in right.texts] == ["3,030", "4,675", "543", "3,988"]
    assert_ticks_apart(fig)
    assert_readable(fig)


def test_audit_figure_puts_the_multiplicative_advantage_on_the_epsilon_axis() -> None:
    """Per example the multiplicative advantage is (nearly) one value — the worst output's log-odds
    shift — so its distribution would be a vertical line; the right panel draws each mechanism's
    largest and average value as bars on an axis from 0 that shows the implemented ε and the ε charged,
    which no bar passes."""
    ds = diamond_prices()
    _, prior, published, _ = release(ds, 1.0)
    priors = np.random.default_rng(3).dirichlet(np.full(prior.size, 0.3), size=300)
    rr = advantages(published, priors)
    channel, _ = laplace_channel(published.support, ds.lo, ds.hi, 1.0)
    lap = channel_advantages(priors, channel, targets_of(published), published.support)
    fig = audit_figure(rr, lap, 1.0, published)
    left, right = fig.axes
    assert len(left.get_lines()) == 3  # two distributions and the worst case over priors
    widths = sorted(round(p.get_width(), 9) for p in right.patches)
    expected = [adv.multiplicative.max() for adv in (rr, lap)]
    expected += [adv.multiplicative_expected.mean() for adv in (rr, lap)]
    assert widths == sorted(round(float(v), 9) for v in expected)
    limits = sorted(line.get_xdata()[0] for line in right.get_lines())
    assert limits == pytest.approx(sorted([published.implemented_epsilon, published.epsilon]))
    lo, hi = right.get_xlim()
    assert lo == 0 and max(widths) <= published.implemented_epsilon + 1e-9 < hi
    assert [t.get_text() for t in right.get_yticklabels()] == ["RR-on-Bins", "Laplace (ε = 1)"]
    assert_ticks_apart(fig)
    assert_readable(fig)

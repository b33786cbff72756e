"""The published mechanism is one object from optimizer to trainer: exact JSON and protobuf round
trips for both kinds, faithful reconstruction, and refusal of anything malformed (it also arrives from
the network)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from labeldp.common.identity import Identity
from labeldp.common.wire.format import WireError
from labeldp.common.wire.mechanism import mechanism_from_header
from labeldp.common.wire.receiver import check_header
from labeldp.common.wire.sender import build_frames
from labeldp.mechanisms import (
    Mechanism,
    PublishedMechanism,
    RROnBins,
    RRTopK,
    integer_grid,
    optimal_mechanism,
    optimize_rr_on_bins,
    optimize_rr_top_k,
    resolve_loss,
    sampler_of,
    uniform_grid,
)
from labeldp.v1 import delivery_pb2 as pb
from tests.support.messages import RECEIVER, SENDER, release

epsilons = st.floats(min_value=0.05, max_value=12.0, allow_nan=False)


def rr_on_bins(prior: list[float], eps: float, loss: str) -> PublishedMechanism:
    support = uniform_grid(0.0, 50.0, len(prior)) if loss != "poisson" else integer_grid(0, len(prior) - 1)
    mech = optimize_rr_on_bins(support, prior, eps, loss)
    return mech.describe(prior=np.asarray(prior) / sum(prior), epsilon_prior=0.1 * eps)


def rr_top_k(prior: list[float], eps: float) -> PublishedMechanism:
    return optimize_rr_top_k(prior, eps).describe(
        prior=np.asarray(prior) / sum(prior), epsilon_prior=0.1 * eps
    )


priors = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=2, max_size=40).filter(
    lambda p: sum(p) > 0.01
)


def over_the_wire(published: PublishedMechanism) -> PublishedMechanism:
    """Sign a message carrying it, verify it as the receiver does, read the mechanism back."""
    me = Identity.generate()
    label_type = "categorical" if published.loss == "zero_one" else "count"
    frames = build_frames(
        release([f"e{i}" for i in range(5)], mechanism=published, label_type=label_type), me
    )
    verified = check_header(
        frames[0],
        lambda sender, key_id: me.public_key if (sender, key_id) == (SENDER, me.key_id) else None,
        RECEIVER,
        int(time.time() * 1000),
    )
    again = mechanism_from_header(pb.ReleaseHeader.FromString(frames[0].header.header))
    assert again == verified.mechanism
    return verified.mechanism


@settings(max_examples=60, deadline=None)
@given(priors, epsilons, st.sampled_from(["squared", "absolute", "poisson"]))
def test_rr_on_bins_round_trips_exactly_through_json_and_protobuf(
    prior: list[float], eps: float, loss: str
) -> None:
    published = rr_on_bins(prior, eps, loss)
    assert published.kind == "rr_on_bins" and published.loss == loss
    assert PublishedMechanism.model_validate_json(published.model_dump_json()) == published
    assert PublishedMechanism.model_validate(published.model_dump(mode="json")) == published
    assert over_the_wire(published) == published


@settings(max_examples=60, deadline=None)
@given(priors, epsilons)
def test_rr_top_k_round_trips_exactly_through_json_and_protobuf(prior: list[float], eps: float) -> None:
    published = rr_top_k(prior, eps)
    assert published.kind == "rr_top_k" and published.loss == "zero_one"
    assert PublishedMechanism.model_validate_json(published.model_dump_json()) == published
    assert over_the_wire(published) == published


@pytest.mark.parametrize("kind", ["rr_on_bins", "rr_top_k"])
def test_the_described_mechanism_is_rebuilt_faithfully(kind: str) -> None:
    prior = np.array([0.3, 0.25, 0.2, 0.1, 0.08, 0.05, 0.02])
    original: Mechanism = (
        optimize_rr_on_bins(integer_grid(0, 6), prior, 1.5, "absolute")
        if kind == "rr_on_bins"
        else optimize_rr_top_k(prior, 1.5)
    )
    published = original.describe(prior=prior, epsilon_prior=0.25)
    rebuilt = sampler_of(published)
    assert type(rebuilt) is type(original)
    assert np.array_equal(rebuilt.transition_matrix(), original.transition_matrix())
    assert np.array_equal(rebuilt.bin_values, original.bin_values)
    assert rebuilt.implemented_epsilon == original.implemented_epsilon == published.implemented_epsilon
    assert rebuilt.describe(prior=prior, epsilon_prior=0.25) == published
    assert np.array_equal(published.transition_matrix(), original.transition_matrix())
    values = np.arange(7.0)
    assert sampler_of(published).expected_loss(values, prior) == original.expected_loss(values, prior)
    assert published.epsilon >= published.epsilon_prior + published.epsilon_randomize


def test_the_factory_picks_the_kind_from_the_loss() -> None:
    classes = integer_grid(0, 4)
    prior = np.array([0.5, 0.2, 0.2, 0.05, 0.05])
    top = optimal_mechanism(classes, prior, 1.0, "zero_one")
    assert isinstance(top, RRTopK) and np.array_equal(top.top, optimize_rr_top_k(prior, 1.0).top)
    bins = optimal_mechanism(classes, prior, 1.0, "squared")
    assert isinstance(bins, RROnBins)
    assert np.array_equal(bins.bin_values, optimize_rr_on_bins(classes, prior, 1.0, "squared").bin_values)
    with pytest.raises(ValueError, match="classes"):
        optimal_mechanism(uniform_grid(0.0, 1.0, 5), prior, 1.0, "zero_one")
    with pytest.raises(ValueError, match="RR-Top-k"):
        optimize_rr_on_bins(classes, prior, 1.0, "zero_one")


def _valid() -> dict[str, Any]:
    return rr_on_bins([0.2, 0.3, 0.1, 0.4], 2.0, "squared").model_dump(mode="json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"support_bins": [1, 0, 0, 1]}, "intervals"),
        ({"support_bins": [0, 1]}, "same length"),
        ({"support_bins": [0, 0, 0, 7]}, "support_bins must lie"),
        ({"prior": [0.5, 0.5, 0.5, -0.5]}, "prior"),
        ({"prior": [0.5, 0.5, 0.5, 0.5]}, "sum to 1"),
        ({"support": [0.0, 2.0, 1.0, 3.0]}, "increasing"),
        ({"implemented_epsilon": 50.0}, "implemented_epsilon"),
        ({"epsilon": 0.5}, "must not exceed epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"loss": "zero_one"}, "regression loss"),
        ({"loss": "hinge"}, "loss"),
        ({"kind": "laplace"}, "kind"),
        ({"privacy_unit": "user"}, "contribution_bound"),
        ({"contribution_bound": 3}, "contribution_bound"),
        ({"bin_values": []}, "bin_values"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_malformed_descriptions_are_refused(change: dict[str, Any], message: str) -> None:
    body = {**_valid(), **change}
    with pytest.raises(ValidationError, match=message):
        PublishedMechanism.model_validate(body)


def test_rr_top_k_descriptions_must_report_each_bin_for_one_class() -> None:
    good = rr_top_k([0.6, 0.3, 0.05, 0.05], 1.0).model_dump(mode="json")
    PublishedMechanism.model_validate(good)
    with pytest.raises(ValidationError, match="exactly one class"):
        PublishedMechanism.model_validate({**good, "support_bins": [0] * 4})
    with pytest.raises(ValidationError, match="classes its bins report"):
        PublishedMechanism.model_validate({**good, "bin_values": list(reversed(good["bin_values"]))})
    with pytest.raises(ValidationError, match=r"classes 0\.\.C-1"):
        PublishedMechanism.model_validate({**good, "support": [0.0, 1.0, 2.0, 4.0]})


def test_a_malformed_mechanism_in_a_signed_header_is_invalid_argument() -> None:
    me = Identity.generate()
    header = pb.ReleaseHeader.FromString(build_frames(release(["a", "b"]), me)[0].header.header)
    header.mechanism.support_bins[1] = 7  # a bin that does not exist
    with pytest.raises(WireError) as info:
        mechanism_from_header(header)
    assert info.value.code == "invalid_argument"
    header = pb.ReleaseHeader.FromString(build_frames(release(["a", "b"]), me)[0].header.header)
    header.mechanism.epsilon = header.epsilon_randomize * 2
    with pytest.raises(WireError, match="epsilon_randomize"):
        mechanism_from_header(header)


@pytest.mark.parametrize("kind", ["rr_on_bins", "rr_top_k"])
def test_messages_of_senders_before_support_bins_are_still_understood(kind: str) -> None:
    published = (
        rr_on_bins([0.2, 0.3, 0.1, 0.4], 2.0, "squared")
        if kind == "rr_on_bins"
        else rr_top_k([0.1, 0.6, 0.3], 1.0)
    )
    header = pb.ReleaseHeader.FromString(
        build_frames(release(["a"], mechanism=published), Identity.generate())[0].header.header
    )
    del header.mechanism.support_bins[:]
    if kind == "rr_top_k":
        del header.mechanism.bin_lower[:]
        del header.mechanism.bin_upper[:]
    assert mechanism_from_header(header) == published


@pytest.mark.parametrize("loss", ["squared", "absolute", "poisson"])
def test_binning_loss_is_the_noisy_priors_average_loss_of_bin_values(loss: str) -> None:
    """Checked by a plain loop over the support: Σ_i prior_i · ℓ(bin value of i, support value i)."""
    support = integer_grid(0, 9)
    prior = np.array([5, 1, 0, 3, 2, 8, 1, 1, 4, 2], dtype=float)
    published = optimize_rr_on_bins(support, prior, 1.0, loss).describe(prior=prior, epsilon_prior=0.1)
    ell = resolve_loss(loss)

    def one(f: float, y: float) -> float:
        return float(ell(np.array([f]), np.array([y]))[0])

    total = sum(
        p / prior.sum() * (one(published.bin_values[b], v) - one(v, v))
        for p, b, v in zip(prior, published.support_bins, published.support, strict=True)
    )
    assert published.binning_loss_under_prior() == pytest.approx(total, rel=1e-12)
    assert published.m < support.k and total > 0  # fewer bins than labels: the bins cost something
    exact = RROnBins(1.0, support, np.arange(support.k), support.values, ell)  # every label its own bin
    assert exact.describe(prior=prior, epsilon_prior=0.1).binning_loss_under_prior() == pytest.approx(0.0)

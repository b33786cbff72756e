"""The one mapping between ``PublishedMechanism`` and its protobuf form (``Mechanism`` and
``NoisyPrior`` in the signed header)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from labeldp.common.wire.format import WireError
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.v1 import delivery_pb2 as pb


@dataclass(frozen=True)
class MechanismFields:
    """The header fields a ``PublishedMechanism`` occupies."""

    mechanism: pb.Mechanism
    prior: pb.NoisyPrior
    epsilon_total: float
    epsilon_prior: float
    epsilon_randomize: float


def mechanism_to_proto(published: PublishedMechanism) -> MechanismFields:
    edges = published.bin_edges
    return MechanismFields(
        mechanism=pb.Mechanism(
            kind=published.kind,
            epsilon=published.epsilon_randomize,
            implemented_epsilon=published.implemented_epsilon,
            bin_values=published.bin_values,
            loss=published.loss,
            bin_lower=[lo for lo, _ in edges],
            bin_upper=[hi for _, hi in edges],
            support_bins=published.support_bins,
            privacy_unit=published.privacy_unit,
            contribution_bound=published.contribution_bound or 0,
            prior_contribution_bound=published.prior_contribution_bound or 0,
            epsilon_bound=published.epsilon_bound,
            epsilon_example=published.epsilon_example or 0.0,
            objective=published.objective,
            objective_epsilon=published.objective_epsilon or 0.0,
            base_weights=published.base_weights,
            window_starts=published.window_starts,
            window_offsets=published.window_offsets,
        ),
        prior=pb.NoisyPrior(support=published.support, masses=published.prior),
        epsilon_total=published.epsilon,
        epsilon_prior=published.epsilon_prior,
        epsilon_randomize=published.epsilon_randomize,
    )


def group_to_proto(published: PublishedMechanism) -> pb.GroupMechanism:
    """One group's mechanism as a grouped header carries it: without the derived bin intervals (they
    would double a header of 1,024 groups), with the group's prior."""
    mechanism = mechanism_to_proto(published).mechanism
    del mechanism.bin_lower[:]
    del mechanism.bin_upper[:]
    return pb.GroupMechanism(mechanism=mechanism, prior=published.prior)


def _support_bins_of_old_sender(header: pb.ReleaseHeader) -> list[int]:
    """Messages from senders before ``support_bins`` existed: derive the map from the bin intervals
    (RR-on-Bins) or from the reported classes (RR-Top-k)."""
    m, support = header.mechanism, list(header.prior.support)
    if m.kind == "rr_top_k":
        position = {value: j for j, value in enumerate(m.bin_values)}
        return [position.get(value, -1) for value in support]
    out = []
    for value in support:
        found = [
            j for j, (lo, hi) in enumerate(zip(m.bin_lower, m.bin_upper, strict=False)) if lo <= value <= hi
        ]
        out.append(found[0] if found else -2)  # -2 fails validation: a support point in no bin
    return out


def mechanism_from_header(header: pb.ReleaseHeader) -> PublishedMechanism:
    """The published mechanism a (verified) header states; a malformed one is ``invalid_argument``."""
    m = header.mechanism
    if m.epsilon != header.epsilon_randomize:
        raise WireError(
            "invalid_argument", "the mechanism's epsilon differs from the header's epsilon_randomize"
        )
    if m.kind == "unbiased" or len(m.support_bins):
        bins = list(m.support_bins)  # the unbiased randomizer has none
    else:
        bins = _support_bins_of_old_sender(header)
    return _published(header, m, tuple(header.prior.masses), bins, header.epsilon_prior, "mechanism")


def is_user_level(header: pb.ReleaseHeader) -> bool:
    return header.mechanism.privacy_unit == "user"


def groups_from_header(header: pb.ReleaseHeader) -> tuple[PublishedMechanism, ...]:
    """Each group's published mechanism a (verified, bounded: ``receiver.check_header``) header states,
    in group order; empty for a release without groups. A group shares the header's support, ε and
    (user level) ε₁ and user fields; its ``Mechanism.epsilon`` is the whole ε at example level (no ε₁:
    the prior is given) and the release's ε₂ at user level (``GroupedRelease.published_groups``)."""
    user = is_user_level(header)
    out = []
    for g, group in enumerate(header.groups):
        m = group.mechanism
        expected = header.epsilon_randomize if user else header.epsilon_total
        if m.epsilon != expected:
            raise WireError(
                "invalid_argument",
                f"group {g}'s epsilon must be the header's "
                + ("epsilon_randomize (a user-level release)" if user else "epsilon_total (the whole ε)"),
            )
        epsilon_prior = header.epsilon_prior if user else 0.0
        out.append(
            _published(header, m, tuple(group.prior), list(m.support_bins), epsilon_prior, f"group {g}")
        )
    return tuple(out)


def _published(
    header: pb.ReleaseHeader,
    m: pb.Mechanism,
    prior: tuple[float, ...],
    support_bins: list[int],
    epsilon_prior: float,
    what: str,
) -> PublishedMechanism:
    try:
        return PublishedMechanism(
            kind=m.kind,
            loss=m.loss or "squared",
            epsilon=header.epsilon_total,
            epsilon_prior=epsilon_prior,
            epsilon_randomize=m.epsilon,
            implemented_epsilon=m.implemented_epsilon,
            support=tuple(header.prior.support),
            prior=prior,
            support_bins=tuple(support_bins),
            bin_values=tuple(m.bin_values),
            privacy_unit=m.privacy_unit or "example",
            contribution_bound=m.contribution_bound or None,
            prior_contribution_bound=m.prior_contribution_bound or None,
            epsilon_bound=m.epsilon_bound,
            epsilon_example=m.epsilon_example or None,
            objective=m.objective or "label",
            objective_epsilon=m.objective_epsilon or None,
            base_weights=tuple(m.base_weights),
            window_starts=tuple(m.window_starts),
            window_offsets=tuple(m.window_offsets),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise WireError(
            "invalid_argument", f"malformed {what}: {where} {first.get('msg', '')}".strip()
        ) from exc

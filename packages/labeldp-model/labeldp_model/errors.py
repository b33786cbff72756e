"""Every error ``labeldp_model`` raises about a release, in one place.

``ReleaseError`` (a ``ValueError``) is what a caller can act on:

- ``ReleaseFormatError``: the description of an export is not one this package reads (not JSON, a
  missing field, numbers that cannot describe a randomized response, a newer format version);
- ``UnknownMechanismError``: the release's mechanism is of a kind this package does not know — a newer
  service than this package; upgrade ``labeldp-model``;
- ``ReleasedValuesError``: values passed as released ones that cannot be (not finite, not one of the
  release's bin values, a capped row left in), or a loss the release cannot be corrected for.
"""

from __future__ import annotations


class ReleaseError(ValueError):
    """A release, or the values given for it, that this package cannot correct for."""


class ReleaseFormatError(ReleaseError):
    """The description of an export is not one this package reads."""


class UnknownMechanismError(ReleaseFormatError):
    """The release's mechanism is of a kind this package does not know."""

    def __init__(self, kind: object, known: list[str]) -> None:
        super().__init__(
            f"mechanism kind {kind!r} is not one labeldp_model knows ({', '.join(known)}): "
            "upgrade labeldp-model to the version of the service that exported the release"
        )
        self.kind = kind


class ReleasedValuesError(ReleaseError):
    """Values given as a release's released values that cannot be, or a loss it cannot be corrected for."""

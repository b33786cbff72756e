"""Bounds on what a request may contain: names, identifiers, PEM text, example IDs.

Every value from the network that reaches SQL, a log line or a file is bounded here first: text
without control characters (PostgreSQL refuses NUL, logs and terminals misread the rest), lengths that
fit the columns, and resource identifiers of one well-known shape. Identifiers never become paths.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, StrictInt, StringConstraints

MAX_NAME_CHARS = 200
MAX_EXAMPLE_ID_BYTES = 256  # UTF-8; keeps every message chunk far below the gRPC frame limit
MAX_PEM_CHARS = 64 * 1024

_NO_CONTROL = r"^[^\x00-\x1f\x7f]+$"
UUID_PATTERN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

# A human-chosen name (dataset, recipient, sender, feature table): 1–200 characters, no control characters.
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS, pattern=_NO_CONTROL)]

# PEM text (certificates, public keys): bounded, no NUL.
Pem = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PEM_CHARS, pattern=r"^[^\x00]+$")]


def _integral(value: object) -> object:
    """``3.0`` is the integer 3 to JSON Schema (and so to every generated client): take it as 3."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# A count from JSON: an integer, or a number with no fractional part (``3.0``) — never a string or a
# boolean (strict: ``"3"`` and ``true`` are refused, as for every privacy parameter). Bounds go on the
# field (``Field(ge=…)``), or before ``Integral`` inside a union's ``Annotated``, so that the document
# states them as minimum and maximum.
Integral = BeforeValidator(_integral)
WholeNumber = Annotated[StrictInt, Integral]

ExampleId = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_EXAMPLE_ID_BYTES, pattern=_NO_CONTROL)
]


def is_uuid(value: object) -> bool:
    """Whether ``value`` is a canonical lowercase UUID (every resource id labeldp issues)."""
    return isinstance(value, str) and UUID_PATTERN.fullmatch(value) is not None


def is_clean_text(value: str, max_chars: int = MAX_NAME_CHARS) -> bool:
    return 0 < len(value) <= max_chars and re.fullmatch(_NO_CONTROL, value) is not None

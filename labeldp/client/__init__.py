"""Thin REST clients for both parties, used by the CLI's client commands, the demo and the audits.

Every answer is typed by the ``TypedDict`` of its route (``labeldp.client.types``, checked against the
servers' OpenAPI documents by tests/e2e/test_client_types.py), so mypy checks the keys callers read.
Every error answer (RFC 9457 problem+json) becomes an ``ApiError`` carrying the problem's fields, so
scripts can branch on the code and people can read the message. Uploads stream from disk in chunks
and report bytes sent, so large files neither sit in memory nor leave the user staring at a silent
terminal.
"""

from labeldp.client.errors import ApiError, field_of
from labeldp.client.features import FeaturesClient
from labeldp.client.labels import LabelsClient
from labeldp.client.transport import CONTENT_TYPES, ApiClient, content_type_of

__all__ = [
    "CONTENT_TYPES",
    "ApiClient",
    "ApiError",
    "FeaturesClient",
    "LabelsClient",
    "content_type_of",
    "field_of",
]

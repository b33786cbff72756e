"""A CSV refusal never carries a value of the file: Arrow's own messages may quote a row (a label is a
secret), so any message labeldp does not recognize is answered by the exception's class alone."""

from __future__ import annotations

import pyarrow as pa

from labeldp.common.csv_errors import InvalidRows, refusal


def test_an_unrecognized_arrow_message_is_not_echoed() -> None:
    exc = pa.ArrowInvalid("CSV parse error: Row #7: straddling value 'e-3,1234.5' near 1234.5")
    answer = refusal(exc, InvalidRows(), ["example_id", "label"])
    assert answer.code == "unparseable-upload"
    assert "1234.5" not in answer.message and "e-3" not in answer.message
    assert answer.message == "could not parse the CSV body (ArrowInvalid)"
    assert answer.rows == [6]  # Arrow's row 7 counts the header: data row 6

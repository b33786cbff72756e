"""The one signed message a release travels as (``labeldp.v1``): its format (``format.py``), the
published mechanism's protobuf form (``mechanism.py``), the sender (``sender.py``), the receiver's
checks (``receiver.py``) and frames on disk (``records.py``)."""

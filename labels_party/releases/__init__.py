"""Release orchestration: validate → charge → prior → optimize → randomize → persist."""

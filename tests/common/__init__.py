"""The shared base (labeldp.common): the wire format and its contract, leftovers of crashed processes."""

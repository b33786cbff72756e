"""Delivery of a release's one signed message to its recipient over gRPC."""

"""The gRPC receiver: verify, de-duplicate, persist atomically."""

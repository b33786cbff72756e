"""The features party through its real interfaces (gRPC receiver, HTTP, training)."""

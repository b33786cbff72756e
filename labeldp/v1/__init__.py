"""Generated gRPC/protobuf stubs of the labeldp.v1 wire contract (make proto)."""

"""Generated gRPC API of the MoT Cache Service (``make proto``; source: proto/mot/v1/mot.proto)."""

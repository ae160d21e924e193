"""What the gateway tells operators' tools: Prometheus metrics and OpenTelemetry traces."""

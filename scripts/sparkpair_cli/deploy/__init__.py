"""Dual-node deployment: the per-node env schema, the launch plan, liveness probes and
the rules a rendered ``compose.yaml`` must satisfy."""

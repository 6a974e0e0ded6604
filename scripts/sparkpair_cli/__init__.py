"""The ``sparkpair`` operator CLI: demo, health, logscan, preflight, node, probe, kernels, inspect, bench."""

__version__ = "0.1.0"

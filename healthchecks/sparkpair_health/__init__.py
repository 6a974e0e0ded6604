"""sparkpair's client-side health verdict: readiness gate, functional suite, log scanner, gateway.

Runs in a slim client: imports neither vLLM nor torch.
"""

__version__ = "0.1.0"

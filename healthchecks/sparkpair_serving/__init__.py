"""What the ``sparkpair`` CLI and the health suite share about a served model.

The contract both sides hold about one vLLM server: how it is started (:mod:`.profile`, the
serving profile: the model's ``vllm serve`` arguments and which health checks apply), how the
files and values that describe it are read (:mod:`.inputs`, bounded and validated), the API key
it was started with and its one redaction (:mod:`.apikey`), and waiting on it (:mod:`.waiting`,
the one poll loop with a deadline). The CLI (``scripts/sparkpair_cli``) starts, probes and
reports on the server with these; the health package (``healthchecks/sparkpair_health``)
judges it with the same ones, so the two never disagree on what is served.

Imports neither ``sparkpair_health`` nor ``sparkpair_cli``, nor vLLM or torch: it runs in the
slim client and in the image alike.
"""

"""The overlay's patches, applied only by explicit calls from :mod:`sparkpair_overlay.plugin`.

Importing this package changes nothing in vLLM. ``router.apply`` / ``router.restore`` and
``o_proj.apply`` / ``o_proj.restore`` are idempotent; see ``overlay/PATCHES.md``.
"""

"""``sparkpair report``: what the pair knows, gathered from both nodes into one shareable page.

:mod:`.nodes` reads a node (its serving container, or a recorded folder); :mod:`.gather` builds
the sections (:data:`.gather.SECTIONS`) within bounded time and redacts them; :mod:`.html` renders
the self-contained page and reads earlier ones back for ``--compare``. docs/report.md is the
user's guide.
"""

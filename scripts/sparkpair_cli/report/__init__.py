"""``sparkpair report``: what the pair knows, gathered from both nodes into one shareable page.

:mod:`.nodes` reads a node (its serving container, or a recorded folder); :mod:`.model` names the
sections (:data:`.model.SECTIONS`); :mod:`.collect` reads each node within bounded time;
:mod:`.node_sections` and :mod:`.api_sections` build the sections; :mod:`.gather` assembles and
redacts them; :mod:`.html` renders the self-contained page and reads earlier ones back for
``--compare``. docs/report.md is the user's guide.
"""

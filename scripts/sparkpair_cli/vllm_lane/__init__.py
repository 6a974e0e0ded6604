"""The vLLM upgrade lane: is a vLLM release proven for sparkpair, and what changed for the overlay.

``scripts/vllm-lane.sh VERSION`` runs :func:`.cli.main` (docs/operations.md, "Upgrading vLLM"):

1. downloads the release's wheel and the newest older release the stack tier runs (the base), with
   ``pip download --no-deps`` into ``~/.cache/sparkpair/vllm-wheels`` (pip's own cache keeps them too);
2. reads both wheels' source without installing or importing either, and prints what changed for the
   overlay: every patch target (:func:`sparkpair_overlay.targets.check_source`), how the attention
   reaches the o_proj, the o_proj recipe per capability (upstream's function, run with a stand-in
   platform), the router's capability gates (a family-120 tier of upstream's own), what DeepGEMM's
   availability asks, the ``VLLM_*`` switches, the ``--linear-backend`` values and FP8 block kernels,
   and the wheel's pins against the package registry and the stack tier's shared pins;
3. with ``--stack`` (the default), makes the release's stack venv (scripts/setup-stack.sh; a release
   with no requirements file gets one written, named in the output) and runs the ``stack`` tier in
   it (``tests/stack``).

Each finding is one line: ``same``, ``changed`` (informational: the release's record or the tier
covers it), ``handled`` (a difference the overlay handles, with the record that says so),
``ACTION`` (something an owner must do before the release can be verified) or ``UPSTREAM FIX``
(upstream now serves what the overlay exists for: the plan must rate our kernel against it).

Exit status: 0 when there is no ``ACTION`` and the stack tier passed; 1 otherwise; 2 on bad input
(a version the registry does not have, no older stack release to compare with).

The modules: :mod:`.cli` (the command line, :func:`.cli.main`), :mod:`.wheels` (download and read
a release's wheel), :mod:`.source` (what the wheel's source says, and what changed for the overlay),
:mod:`.pins` (the wheel's requirements against the shared pins and the registry), :mod:`.stack`
(the release's stack venv and the stack tier run in it), :mod:`.findings` (one line of the report).
"""

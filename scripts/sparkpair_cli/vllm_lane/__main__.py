"""``python -m sparkpair_cli.vllm_lane``: :func:`.cli.main` (``scripts/vllm-lane.sh`` runs it)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())

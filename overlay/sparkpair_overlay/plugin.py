"""Plugin body (placeholder until the overlay mechanics land)."""


def register() -> None:
    """Apply nothing yet."""
    return None

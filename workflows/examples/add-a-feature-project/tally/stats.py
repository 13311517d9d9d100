"""Averages of a list of numbers."""


def mean(values: list[float]) -> float:
    """The arithmetic mean of ``values`` (a ValueError for an empty list)."""
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)

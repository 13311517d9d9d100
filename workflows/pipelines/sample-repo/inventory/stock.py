"""Stock levels per SKU."""


class Stock:
    """How many items of each SKU are in stock."""

    def __init__(self):
        self._counts = {}

    def add(self, sku, quantity):
        """Put quantity items of sku into stock."""
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self._counts[sku] = self._counts.get(sku, 0) + quantity

    def remove(self, sku, quantity):
        """Take quantity items of sku out of stock."""
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self._counts[sku] = self._counts.get(sku, 0) - quantity

    def count(self, sku):
        """How many items of sku are in stock."""
        return self._counts.get(sku, 0)

    def skus(self):
        """The SKUs that were ever stocked, sorted."""
        return sorted(self._counts)

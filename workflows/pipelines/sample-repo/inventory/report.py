"""A plain-text stock report."""


def render_report(stock):
    """One line per SKU: name, then count, aligned."""
    lines = []
    for sku in stock.skus():
        lines.append(f"{sku:<20}{stock.count(sku):>6}")
    return "\n".join(lines)

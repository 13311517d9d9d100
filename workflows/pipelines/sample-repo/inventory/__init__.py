"""Count items per SKU and report on them."""

from inventory.report import render_report
from inventory.stock import Stock

__all__ = ["Stock", "render_report"]

"""Durable execution of Lattice runs on engines teams already operate (``temporal/``).

Each engine is an optional package: importing ``lattice`` never imports its SDK.
"""

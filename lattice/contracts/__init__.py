"""Holding a model to a contract: the engine (``engine.py``), output checks, invariants,
recovery strategies and policy stacks, repair and escalation packets, usage and budgets,
and the FailureReport (docs/contracts.md). Import from the module that owns a name."""

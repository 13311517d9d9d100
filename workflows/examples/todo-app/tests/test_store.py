"""Tests of TodoStore (sample data for the compiler passes; not collected by Lattice's suite)."""

from todo.store import TodoStore


def test_add_returns_the_new_number(tmp_path):
    store = TodoStore(tmp_path / "todo.json")
    assert store.add("Buy milk") == 1  # TODO_TEST_MARKER

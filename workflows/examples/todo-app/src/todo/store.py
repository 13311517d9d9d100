"""TodoStore: the todo list and its data file (a scaffold stub, to be implemented)."""

from pathlib import Path


class TodoStore:
    """The todos of one data file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, title: str) -> int:
        raise NotImplementedError("TODO_STORE_ADD_STUB")

    def open_todos(self) -> list[dict]:
        raise NotImplementedError

    def complete(self, number: int) -> None:
        raise NotImplementedError

    def delete(self, number: int) -> None:
        raise NotImplementedError

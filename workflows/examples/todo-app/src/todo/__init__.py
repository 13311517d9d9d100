"""todo: a command-line todo list (sample project of Lattice's compiler passes)."""

"""StateStore: the run's explicit memory ($in, $vars, $tmp, $ctx)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lattice.errors import LatticeRunError
from lattice.ir.templates import NameRef, parse_path
from lattice.runtime import MissingValueError, StateStore
from lattice.runtime.state import StateLimits, approx_size


def make_store() -> StateStore:
    return StateStore(
        {"ticket": "charged twice", "tags": ["billing", "urgent"], "user": {"name": "Ada"}},
        ctx={"run_id": "r-1", "workflow_id": "wf"},
        vars={
            "classify": {"result": {"category": "billing", "scores": [0.1, 0.9]}},
            "items": [{"title": "a"}, {"title": "b", "tags": ["x"]}],
            "weird key": {"result": 7},
        },
    )


# -- reads ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("$in.ticket", "charged twice"),
        ("$in.user.name", "Ada"),
        ("$in.tags[1]", "urgent"),
        ("$in.tags[-1]", "urgent"),
        ("$vars.classify.result.category", "billing"),
        ("$vars.classify.result.scores[1]", 0.9),
        ("$vars.items[1].tags[0]", "x"),
        ("$vars.items[0]", {"title": "a"}),
        ('$vars["weird key"].result', 7),
        ("$ctx.run_id", "r-1"),
    ],
)
def test_read_nested_paths_and_indices(path: str, expected: Any) -> None:
    assert make_store().read(path) == expected


def test_read_accepts_a_parsed_path() -> None:
    assert make_store().read(parse_path("$vars.items[1].title")) == "b"


def test_read_whole_roots() -> None:
    store = make_store()
    assert store.read("$in")["ticket"] == "charged twice"
    assert set(store.read("$vars")) == {"classify", "items", "weird key"}
    assert store.read("$tmp") == {}


@pytest.mark.parametrize(
    ("path", "missing"),
    [
        ("$vars.nope", "$vars.nope"),
        ("$vars.classify.result.label", "$vars.classify.result.label"),
        ("$vars.classify.oops.deeper.still", "$vars.classify.oops"),
        ("$vars.items[5].title", "$vars.items[5]"),
        ("$vars.items[0].tags[0]", "$vars.items[0].tags"),
        ("$vars.items.title", "$vars.items.title"),  # a key into a list
        ("$vars.classify[0]", "$vars.classify[0]"),  # an index into an object
        ("$in.user.email", "$in.user.email"),
        ("$ctx.model", "$ctx.model"),
        ("$tmp.scratch", "$tmp.scratch"),
    ],
)
def test_missing_value_error_names_the_first_missing_key(path: str, missing: str) -> None:
    with pytest.raises(MissingValueError) as info:
        make_store().read(path)
    err = info.value
    assert err.error_type == "missing_value"
    assert isinstance(err, LatticeRunError)
    assert err.details == {"path": path, "missing": missing}
    assert missing in err.message
    assert path in err.message


def test_a_null_value_is_a_value_not_a_missing_one() -> None:
    store = StateStore(vars={"x": {"result": None}})
    assert store.read("$vars.x.result") is None
    assert store.exists("$vars.x.result")
    assert not store.exists("$vars.x.result.deeper")
    assert not store.exists("$vars.y")


def test_resolve_bare_names_read_variables_then_inputs() -> None:
    store = make_store()
    assert store.resolve(NameRef("ticket")) == "charged twice"
    assert store.resolve(NameRef("ticket"), {"ticket": "override"}) == "override"
    with pytest.raises(MissingValueError) as info:
        store.resolve(NameRef("nobody"))
    assert info.value.details["missing"] == "$in.nobody"


def test_secrets_are_not_readable_without_a_source() -> None:
    with pytest.raises(LatticeRunError) as info:
        make_store().read("$secrets.API_KEY")
    assert info.value.error_type == "secret_error"


# -- writes -----------------------------------------------------------------------------


def test_write_creates_objects_on_the_way() -> None:
    store = StateStore()
    store.write("$vars.a.b.c", 1)
    store.write("$vars.a.d", [1, 2])
    store.write("$tmp.scratch", "x")
    assert store.vars == {"a": {"b": {"c": 1}, "d": [1, 2]}}
    assert store.tmp == {"scratch": "x"}


def test_write_into_a_list_index() -> None:
    store = StateStore(vars={"xs": [1, 2, 3]})
    store.write("$vars.xs[1]", 20)
    assert store.read("$vars.xs") == [1, 20, 3]


@pytest.mark.parametrize("path", ["$vars.xs[7]", "$vars.xs[-3]", "$vars.obj[0]", "$vars.obj.k[0]"])
def test_an_impossible_write_is_a_state_error(path: str) -> None:
    store = StateStore(vars={"xs": [1, 2], "obj": {"k": "text"}})
    before = store.snapshot()
    with pytest.raises(LatticeRunError) as info:
        store.write(path, 1)
    assert info.value.error_type == "state_error"
    assert store.snapshot() == before


def test_a_key_written_through_a_non_object_replaces_it_with_an_object() -> None:
    store = StateStore(vars={"xs": [1, 2], "n": 3})
    store.write("$vars.xs.key", 1)
    store.write("$vars.n.deeper.still", 2)
    assert store.vars == {"xs": {"key": 1}, "n": {"deeper": {"still": 2}}}


@pytest.mark.parametrize("path", ["$in.ticket", "$in.new", "$ctx.run_id", "$ctx.extra"])
def test_in_and_ctx_are_read_only(path: str) -> None:
    store = make_store()
    before = store.snapshot()
    with pytest.raises(LatticeRunError) as info:
        store.write(path, "changed")
    assert info.value.error_type == "state_error"
    assert "read-only" in info.value.message
    assert store.snapshot() == before


@pytest.mark.parametrize("path", ["$vars", "$tmp"])
def test_a_whole_root_cannot_be_replaced(path: str) -> None:
    with pytest.raises(LatticeRunError) as info:
        StateStore().write(path, {})
    assert info.value.error_type == "state_error"


def test_delete_removes_and_tolerates_absent_paths() -> None:
    store = make_store()
    store.delete("$vars.classify.result.category")
    assert store.read("$vars.classify.result") == {"scores": [0.1, 0.9]}
    store.delete("$vars.nothing.here")  # no error
    store.delete("$vars.classify")
    assert not store.exists("$vars.classify")


def test_clear_tmp_empties_scratch_only() -> None:
    store = make_store()
    store.write("$tmp.a", 1)
    store.write("$vars.keep", 2)
    store.clear_tmp()
    assert store.tmp == {}
    assert store.read("$vars.keep") == 2
    assert store.read("$in.ticket") == "charged twice"


def test_readable_is_in_vars_ctx_without_tmp() -> None:
    store = make_store()
    store.write("$tmp.a", 1)
    readable = store.readable()
    assert set(readable) == {"in", "vars", "ctx"}
    assert readable["vars"]["classify"]["result"]["category"] == "billing"


# -- observers --------------------------------------------------------------------------


def test_subscribe_sees_every_write_and_delete_until_unsubscribed() -> None:
    store = StateStore()
    seen: list[tuple[str, Any]] = []
    other: list[str] = []
    unsubscribe = store.subscribe(lambda path, value: seen.append((path, value)))
    store.subscribe(lambda path, value: other.append(path))
    store.write("$vars.a", 1)
    store.write("$tmp.t", {"x": 1})
    store.delete("$vars.a")
    assert seen == [("$vars.a", 1), ("$tmp.t", {"x": 1}), ("$vars.a", None)]
    unsubscribe()
    store.write("$vars.b", 2)
    assert seen[-1] == ("$vars.a", None)
    assert other == ["$vars.a", "$tmp.t", "$vars.a", "$vars.b"]


def test_a_failed_write_notifies_nobody() -> None:
    store = StateStore()
    seen: list[str] = []
    store.subscribe(lambda path, value: seen.append(path))
    with pytest.raises(LatticeRunError):
        store.write("$in.x", 1)
    assert seen == []


# -- snapshots --------------------------------------------------------------------------


def test_snapshot_is_a_deep_copy() -> None:
    store = make_store()
    snap = store.snapshot()
    snap["vars"]["classify"]["result"]["category"] = "mutated"
    snap["in"]["tags"].append("mutated")
    snap["ctx"]["run_id"] = "mutated"
    assert store.read("$vars.classify.result.category") == "billing"
    assert store.read("$in.tags") == ["billing", "urgent"]
    assert store.read("$ctx.run_id") == "r-1"
    # and later writes do not leak into an earlier snapshot
    store.write("$vars.classify.result.scores[0]", 0.5)
    assert snap["vars"]["classify"]["result"]["scores"][0] == 0.1


def test_snapshot_has_the_four_roots_and_is_json_serialisable() -> None:
    store = make_store()
    store.write("$tmp.t", [1, {"a": None}])
    snap = store.snapshot()
    assert set(snap) == {"in", "vars", "tmp", "ctx"}
    assert json.loads(json.dumps(snap)) == snap


def test_from_snapshot_round_trips_and_starts_with_empty_tmp() -> None:
    store = make_store()
    store.write("$tmp.t", 1)
    again = StateStore.from_snapshot(json.loads(json.dumps(store.snapshot())))
    assert again.read("$vars.items[1].tags[0]") == "x"
    assert again.read("$in.user.name") == "Ada"
    assert again.read("$ctx.run_id") == "r-1"
    assert again.tmp == {}


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)
_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(writes=st.lists(st.tuples(st.lists(_names, min_size=1, max_size=3), _json), max_size=8))
def test_snapshot_stays_json_serialisable_after_any_writes(
    writes: list[tuple[list[str], Any]],
) -> None:
    store = StateStore({"q": 1}, ctx={"run_id": "r"})
    for i, (keys, value) in enumerate(writes):
        path = f"$vars.w{i}." + ".".join(keys)  # one fresh subtree per write
        store.write(path, value)
        snap = store.snapshot()
        assert json.loads(json.dumps(snap)) == snap
        assert store.read(path) == value


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["set", "append", "append", "delete"]),
            st.sampled_from(["$vars.a", "$vars.b", "$vars.a.x", "$vars.c.list"]),
            _json,
        ),
        max_size=12,
    )
)
def test_sizes_kept_as_writes_go_equal_sizes_measured_afresh(
    steps: list[tuple[str, str, Any]],
) -> None:
    """Appends and whole-entry writes account sizes from what they know (linear time);
    the figures stay those of measuring every entry again, except for entries written
    inside (``_bounded``), whose figure is an upper bound until the total nears the limit."""
    store = StateStore({"q": "input"})
    store.limit(StateLimits())
    for kind, path, value in steps:
        try:
            if kind == "set":
                store.write(path, value)
            elif kind == "append":
                store.append(path, value)
            else:
                store.delete(path)
        except LatticeRunError:
            continue  # writing under a non-object, for example
        exact = {k: approx_size(v) for k, v in store.vars.items()} | {
            k: 0 for k in store._sizes if k not in store.vars
        }
        bounded = store._bounded
        assert {k: v for k, v in store._sizes.items() if k not in bounded} == {
            k: v for k, v in exact.items() if k not in bounded
        }
        assert all(store._sizes[k] >= exact[k] for k in bounded)
        assert store._total_size == approx_size(store.inputs) + sum(store._sizes.values())


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["set", "append", "delete"]),
            st.sampled_from(["$vars.a", "$vars.a.x", "$vars.a.x.y", "$vars.b.list"]),
            _json,
        ),
        max_size=12,
    ),
    limit=st.integers(min_value=20, max_value=120),  # the inputs alone take 14
)
def test_state_limit_raised_exactly_when_the_measured_total_is_over(
    steps: list[tuple[str, str, Any]], limit: int
) -> None:
    """Sizes kept as upper bounds never change the verdict: a change fails with
    ``state_limit`` exactly when the state, measured afresh, would be over the limit, and
    a change that fails leaves the state as it was (within the limit)."""
    store = StateStore({"q": "input"})
    store.limit(StateLimits(max_state_bytes=limit))

    def measured() -> int:
        return approx_size(store.inputs) + sum(approx_size(v) for v in store.vars.values())

    for kind, path, value in steps:
        before = json.loads(json.dumps(store.vars))
        try:
            if kind == "set":
                store.write(path, value)
            elif kind == "append":
                store.append(path, value)
            else:
                store.delete(path)
        except LatticeRunError as exc:
            if exc.error_type != "state_limit":
                continue  # writing under a non-object, for example
            assert store.vars == before  # put back, objects made on the way included
            assert store._total_size == measured() <= limit
        else:
            assert measured() <= limit


def test_a_write_over_the_state_limit_is_put_back() -> None:
    store = StateStore(vars={"kept": "k"})
    store.limit(StateLimits(max_state_bytes=300))
    store.write("$vars.a", "x" * 100)
    with pytest.raises(LatticeRunError) as raised:
        store.write("$vars.a", "y" * 400)
    assert raised.value.error_type == "state_limit"
    with pytest.raises(LatticeRunError):
        store.write("$vars.b", "z" * 400)
    assert store.vars == {"kept": "k", "a": "x" * 100}
    store.write("$vars.c", "w" * 100)  # the failed writes left no size behind
    assert store.vars["c"] == "w" * 100


def test_a_fork_takes_its_sizes_from_the_parent_instead_of_measuring_the_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forEach forks once per item: measuring the whole state for each fork cost 27 ms
    on a state of 0.8 MB, 27 s for 1,000 items."""
    import lattice.runtime.state as state_module

    store = StateStore({"q": "input"})
    store.limit(StateLimits())
    store.write("$vars.big", {"rows": [{"n": i, "text": "x" * 20} for i in range(500)]})
    store.write("$vars.big.extra", 1)  # a write inside: its size is a bound
    measured: list[Any] = []
    real = state_module.approx_size
    monkeypatch.setattr(
        state_module, "approx_size", lambda value: measured.append(value) or real(value)
    )
    branch = store.fork()
    assert measured == []
    assert branch._sizes == store._sizes and branch._sizes is not store._sizes
    assert branch._total_size == store._total_size and branch._bounded == store._bounded
    branch.write("$vars.small", "y")
    assert "small" in branch._sizes and "small" not in store._sizes


def test_a_merge_that_fails_part_way_changes_nothing_and_tells_no_listener() -> None:
    store = StateStore(vars={"kept": 1})
    store.limit(StateLimits(max_state_bytes=300))
    heard: list[str] = []
    store.subscribe(lambda path, value: heard.append(path))
    with pytest.raises(LatticeRunError) as raised:
        store.merge([["set", "$vars.a", "x" * 200], ["set", "$vars.b", "y" * 200]])
    assert raised.value.error_type == "state_limit"
    assert store.vars == {"kept": 1} and heard == []
    store.merge([["set", "$vars.a", "x" * 200]])
    assert store.vars == {"kept": 1, "a": "x" * 200} and heard == ["$vars.a"]


def test_a_branch_write_put_back_leaves_the_entry_shared_with_the_parent() -> None:
    """A whole-entry write in a fork that goes over the limit is put back: the entry is
    then still the parent's (copied before a write inside it), not the branch's own."""
    parent = StateStore(vars={"x": {"items": [1]}})
    parent.limit(StateLimits(max_state_bytes=200))
    branch = parent.fork()
    with pytest.raises(LatticeRunError):
        branch.write("$vars.x", "y" * 500)
    branch.write("$vars.x.note", "hi")  # on the failed route, say
    assert parent.vars["x"] == {"items": [1]}
    assert branch.vars["x"] == {"items": [1], "note": "hi"}


def test_the_common_writes_do_what_the_general_write_does() -> None:
    """``$vars.x`` and ``$vars.x.y`` take their own short ways through ``write`` (and
    ``$vars.x`` through ``append``); on random writes and appends (new, replacing, into non-objects, over the limits, in forks that share
    entries with their parent) they leave the state, sizes, changes and listeners' calls
    exactly as the general path does."""
    import copy as copying
    import random

    names = ["a", "b", "c"]
    values: list[Any] = [1, "text", None, [1, 2], {"k": "v"}, "x" * 40, {"deep": {"er": 1}}]
    rng = random.Random(31)
    errors = appends = 0

    def outcome(store: StateStore, how: str, path: str, value: Any, append: bool) -> Any:
        try:
            if append:
                if how == "fast":
                    return store.append(path, value)
                return store._append_path(parse_path(path), value)
            if how == "fast":
                store.write(path, value)
            else:
                store._write_path(parse_path(path), value, None)
        except LatticeRunError as exc:
            return (exc.error_type, exc.message)
        return None

    def seen(store: StateStore, heard: list[Any]) -> Any:
        return (
            copying.deepcopy(store.vars),
            dict(store._sizes),
            store._total_size,
            set(store._bounded),
            copying.deepcopy(store.changes),
            list(heard),
            set(store._inherited),
        )

    for _ in range(300):
        start = {n: copying.deepcopy(rng.choice(values)) for n in names if rng.random() < 0.6}
        limits = StateLimits(max_state_bytes=rng.choice([60, 120, 10_000]), max_value_bytes=50)
        parent = {how: StateStore(vars=copying.deepcopy(start)) for how in ("fast", "general")}
        stores, heard = {}, {}
        fork = rng.random() < 0.5
        for how, store in parent.items():
            store.limit(limits)
            store.changes = []
            target = store.fork() if fork else store
            heard[how] = []
            target._listeners = [lambda p, v, log=heard[how]: log.append((p, copying.deepcopy(v)))]
            stores[how] = target
        for _ in range(6):
            keys = [rng.choice(names)] + ([rng.choice(["x", "y"])] if rng.random() < 0.5 else [])
            path = "$vars." + ".".join(keys)
            value = copying.deepcopy(rng.choice(values))
            append = len(keys) == 1 and rng.random() < 0.4
            appends += append
            results = {
                how: outcome(stores[how], how, path, copying.deepcopy(value), append)
                for how in stores
            }
            assert results["fast"] == results["general"], path
            errors += isinstance(results["fast"], tuple)
            assert seen(stores["fast"], heard["fast"]) == seen(stores["general"], heard["general"])
        if fork:  # the parent's entries were copied before a write inside them
            assert parent["fast"].vars == parent["general"].vars == start
    assert errors > 100 and appends > 100  # the limits were reached, both ways


@pytest.mark.parametrize("path", ["$vars.a.result", "$vars.a.b.c", "$vars.a[0].b"])
@pytest.mark.parametrize("there", ["plain text", 7, None, ["x"]])
def test_a_value_over_max_value_bytes_changes_nothing_on_the_way(path: str, there: Any) -> None:
    """A refused value must not leave the objects its write would have made: the entry
    it went into (a string, say) stays as it was for a ``failed`` route and for resume,
    which replays only the changes that were made (the short way for ``$vars.a.result``
    and the general one alike)."""
    store = StateStore({"q": "input"}, vars={"a": there})
    store.limit(StateLimits(max_value_bytes=100))
    before = store._total_size
    with pytest.raises(LatticeRunError) as raised:
        store.write(path, "x" * 500)
    assert raised.value.error_type in ("state_limit", "state_error")
    assert store.vars == {"a": there}
    assert store._total_size == before

"""State paths and value templates (lattice.ir.templates)."""

from __future__ import annotations

from typing import Any

import pytest

from lattice.ir.templates import (
    NameRef,
    Ref,
    StatePath,
    Template,
    TemplateSyntaxError,
    ValueTemplate,
    is_path,
    iter_value_refs,
    parse_path,
    parse_template,
    to_text,
)

STATE: dict[str, Any] = {
    "$in": {"ticket": {"id": 7, "title": "Printer on fire"}, "name": "Ada", "tags": ["a", "b"]},
    "$vars": {
        "classify": {"result": {"label": "billing", "score": 0.9}},
        "mcp-1766987094528": {"result": {"items": [{"n": 1}, {"n": 2}]}},
        "my key": {"result": "spaced"},
        "count": 3,
    },
    "$ctx": {"run_id": "r1"},
    "$tmp": {},
    "$secrets": {},
}
VARIABLES = {"greeting": "Hello"}


def resolve(ref: Ref) -> Any:
    """A resolver like the runner's: bare names read variables, else $in; missing raises."""
    if isinstance(ref, NameRef):
        if ref.name in VARIABLES:
            return VARIABLES[ref.name]
        ref = ref.as_input_path()
    value: Any = STATE[ref.root]
    for key in ref.keys:
        value = value[key]
    return value


# --- parse_path ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "root", "keys"),
    [
        ("$in", "$in", ()),
        ("$in.ticket", "$in", ("ticket",)),
        ("$vars.classify.result.label", "$vars", ("classify", "result", "label")),
        ("$vars.a.result.items[0].name", "$vars", ("a", "result", "items", 0, "name")),
        ("$vars.a.result[-1]", "$vars", ("a", "result", -1)),
        ("$vars.a[0][1]", "$vars", ("a", 0, 1)),
        ('$vars["my key"].result', "$vars", ("my key", "result")),
        ('$in["a.b"]["c\\"d"]', "$in", ("a.b", 'c"d')),
        ("$vars.mcp-1766987094528.result", "$vars", ("mcp-1766987094528", "result")),
        ("$vars.skill_1.result.x-y", "$vars", ("skill_1", "result", "x-y")),
        ("$vars.2fa.result", "$vars", ("2fa", "result")),
        ("$tmp.scratch", "$tmp", ("scratch",)),
        ("$ctx.run_id", "$ctx", ("run_id",)),
        ("$secrets.API_TOKEN", "$secrets", ("API_TOKEN",)),
        ("  $in.name  ", "$in", ("name",)),
    ],
)
def test_parse_path(text: str, root: str, keys: tuple[str | int, ...]) -> None:
    path = parse_path(text)
    assert path == StatePath(root, keys)
    assert isinstance(path.keys, tuple)
    assert parse_path(path.text) == path  # .text is canonical and parses back
    assert str(path) == path.text


@pytest.mark.parametrize(
    ("keys", "text"),
    [
        (("a", "result", 0), "$vars.a.result[0]"),
        (("my key",), '$vars["my key"]'),
        (("a.b", "x-y"), '$vars["a.b"].x-y'),
        (('q"uote',), '$vars["q\\"uote"]'),
    ],
)
def test_path_text_quotes_keys_when_needed(keys: tuple[str | int, ...], text: str) -> None:
    assert StatePath("$vars", keys).text == text


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("$in.", 3, "offset 3"),
        ("$vars.a..b", 7, "offset 7"),
        ("$vars.a[x]", 7, "offset 7"),
        ("$vars.a[1", 7, "offset 7"),
        ('$vars["unterminated]', 5, "offset 5"),
        ("$vars.a b", 7, "offset 7"),
        ("$in-x", 3, "offset 3"),
        ("$vars.a.result.", 14, "offset 14"),
    ],
)
def test_parse_path_errors_say_where(text: str, position: int, fragment: str) -> None:
    with pytest.raises(TemplateSyntaxError) as info:
        parse_path(text)
    assert info.value.position == position
    assert info.value.text == text
    assert fragment in str(info.value)


@pytest.mark.parametrize("text", ["", "in.x", "$foo.bar", "$inx", "$variables.a", "vars.a", "$"])
def test_parse_path_needs_a_known_root(text: str) -> None:
    with pytest.raises(TemplateSyntaxError) as info:
        parse_path(text)
    assert info.value.position == 0
    assert "$in" in str(info.value) and "$vars" in str(info.value)


def test_template_syntax_error_is_a_value_error() -> None:
    assert issubclass(TemplateSyntaxError, ValueError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$in.x", True),
        ("$vars.a.result[0]", True),
        ("$in", True),
        ("$in.", False),
        ("$in.x y", False),
        ("in.x", False),
        ("costs $5", False),
        ("", False),
    ],
)
def test_is_path(text: str, expected: bool) -> None:
    assert is_path(text) is expected


# --- parse_template ------------------------------------------------------------------------


def test_parse_template_parts() -> None:
    template = parse_template("Hi {{ name }}, ticket {{$in.ticket.id}}!")
    assert isinstance(template, Template)
    assert template.parts == (
        "Hi ",
        NameRef("name"),
        ", ticket ",
        StatePath("$in", ("ticket", "id")),
        "!",
    )
    assert template.refs == (NameRef("name"), StatePath("$in", ("ticket", "id")))
    assert template.single_ref is None
    assert template.source == "Hi {{ name }}, ticket {{$in.ticket.id}}!"


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("{{ $in.ticket }}", StatePath("$in", ("ticket",))),
        ("{{$in.ticket}}", StatePath("$in", ("ticket",))),
        ("  {{ $vars.a.result }}\n", StatePath("$vars", ("a", "result"))),
        ("{{ ticket }}", NameRef("ticket")),
        ("{{ $vars.mcp-1.result[0] }}", StatePath("$vars", ("mcp-1", "result", 0))),
    ],
)
def test_single_ref(text: str, ref: Ref) -> None:
    assert parse_template(text).single_ref == ref


@pytest.mark.parametrize("text", ["x {{ $in.a }}", "{{ $in.a }}{{ $in.b }}", "plain text", ""])
def test_not_a_single_ref(text: str) -> None:
    assert parse_template(text).single_ref is None


def test_template_without_tags_is_literal() -> None:
    template = parse_template("just text with } and { braces")
    assert template.parts == ("just text with } and { braces",)
    assert template.refs == ()


def test_name_ref_reads_input_by_default() -> None:
    ref = NameRef("ticket")
    assert ref.text == "ticket"
    assert ref.as_input_path() == StatePath("$in", ("ticket",))


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("Hello {{ $in.name", 6, "unclosed"),
        ("{{ $in.a }} and {{ oops", 16, "unclosed"),
        ("{{", 0, "unclosed"),
        ("a {{ $in. }}", 2, "offset"),
        ("ab {{ }}", 3, "cannot read"),
        ("{{ $in.a | upper }}", 0, "cannot read"),
        ("x {{ foo bar }}", 2, "cannot read"),
        ("{{ $nope.x }}", 0, "state path starts with"),
    ],
)
def test_template_errors_with_positions(text: str, position: int, fragment: str) -> None:
    with pytest.raises(TemplateSyntaxError) as info:
        parse_template(text)
    assert info.value.position == position
    assert info.value.text == text
    assert fragment in str(info.value)


def test_template_render_text() -> None:
    template = parse_template("{{ greeting }}, {{ $in.name }}: {{ $vars.classify.result.score }}")
    assert template.render(resolve) == "Hello, Ada: 0.9"


def test_template_render_never_invents_empty_strings() -> None:
    template = parse_template("x {{ $in.missing }}")
    with pytest.raises(KeyError):
        template.render(resolve)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("s", "s"),
        (1, "1"),
        (0.5, "0.5"),
        (True, "true"),
        (None, "null"),
        ({"a": [1, 2]}, '{"a":[1,2]}'),
        (["é"], '["é"]'),
    ],
)
def test_to_text(value: Any, text: str) -> None:
    assert to_text(value) == text


def test_iter_value_refs_walks_nested_values() -> None:
    value = {
        "url": "https://x/{{ $in.ticket.id }}",
        "body": {"who": "$vars.classify.result.label", "list": ["{{ name }}", 3, None]},
        "plain": "no refs $5",
    }
    assert list(iter_value_refs(value)) == [
        StatePath("$in", ("ticket", "id")),
        StatePath("$vars", ("classify", "result", "label")),
        NameRef("name"),
    ]


def test_iter_value_refs_raises_on_syntax_errors() -> None:
    with pytest.raises(TemplateSyntaxError):
        list(iter_value_refs({"a": ["ok", "{{ broken"]}))


# --- ValueTemplate -------------------------------------------------------------------------


def test_lone_ref_returns_the_raw_value() -> None:
    rendered = ValueTemplate("{{ $in.ticket }}").render(resolve)
    assert rendered == {"id": 7, "title": "Printer on fire"}
    assert rendered is STATE["$in"]["ticket"]


def test_lone_ref_with_blanks_returns_the_raw_value() -> None:
    assert ValueTemplate("  {{ $in.tags }} ").render(resolve) == ["a", "b"]
    assert ValueTemplate("{{ $vars.count }}").render(resolve) == 3


def test_interpolation_inserts_compact_json() -> None:
    rendered = ValueTemplate("Ticket: {{ $in.ticket }} tags={{ $in.tags }} n={{ $vars.count }}")
    assert rendered.render(resolve) == (
        'Ticket: {"id":7,"title":"Printer on fire"} tags=["a","b"] n=3'
    )


def test_whole_string_path_resolves_to_the_value() -> None:
    assert ValueTemplate("$vars.classify.result").render(resolve) == {
        "label": "billing",
        "score": 0.9,
    }
    assert ValueTemplate('$vars["my key"].result').render(resolve) == "spaced"
    assert ValueTemplate("$vars.mcp-1766987094528.result.items[1].n").render(resolve) == 2


def test_bare_name_uses_variables_then_input() -> None:
    assert ValueTemplate("{{ greeting }}").render(resolve) == "Hello"
    assert ValueTemplate("{{ name }}").render(resolve) == "Ada"


@pytest.mark.parametrize(
    "value", ["plain", "costs $5", "$in.", "", 42, 1.5, True, None, "50%", "{ not a tag }"]
)
def test_literals_stay_literal(value: Any) -> None:
    def no_lookup(ref: Ref) -> Any:
        raise AssertionError(f"literal {value!r} looked up {ref}")

    assert ValueTemplate(value).render(no_lookup) == value


def test_nested_values_render_item_by_item() -> None:
    template = ValueTemplate(
        {
            "title": "{{ $in.ticket.title }}",
            "ticket": "$in.ticket",
            "meta": {"who": "by {{ name }}", "n": 1, "tags": ["{{ $in.tags }}", "x"]},
        }
    )
    assert template.render(resolve) == {
        "title": "Printer on fire",
        "ticket": {"id": 7, "title": "Printer on fire"},
        "meta": {"who": "by Ada", "n": 1, "tags": [["a", "b"], "x"]},
    }


def test_value_template_compiles_once_and_renders_many_times() -> None:
    template = ValueTemplate("{{ $vars.count }} items")
    seen: list[Ref] = []

    def counting(ref: Ref) -> Any:
        seen.append(ref)
        return resolve(ref)

    assert template.render(counting) == "3 items"
    assert template.render(counting) == "3 items"
    assert seen == [StatePath("$vars", ("count",))] * 2


def test_value_template_syntax_error_at_compile_time() -> None:
    with pytest.raises(TemplateSyntaxError):
        ValueTemplate({"a": "{{ $in.x"})


# --- untrusted text ----------------------------------------------------------------------


@pytest.mark.parametrize("text", ['$in["it\\\'s"]', '$vars["\\x"].result', '$in["\\u12"]'])
def test_a_quoted_key_that_is_not_json_is_a_syntax_error(text: str) -> None:
    with pytest.raises(TemplateSyntaxError, match="quoted key is not a JSON string"):
        parse_path(text)
    with pytest.raises(TemplateSyntaxError):
        parse_template("{{ " + text + " }}")


def test_open_tags_are_found_in_linear_time() -> None:
    import time

    text = "{{" * 200_000  # a regex search per "{{" made this quadratic (minutes)
    started = time.perf_counter()
    with pytest.raises(TemplateSyntaxError) as caught:
        parse_template(text)
    assert caught.value.position == 0
    assert time.perf_counter() - started < 2
    with pytest.raises(TemplateSyntaxError) as later:
        parse_template("a {{ $in.x }} b {{ c")
    assert later.value.position == 16


def test_path_text_quotes_what_is_not_a_plain_key() -> None:
    from lattice.ir.templates import path_text

    assert path_text("$vars", "node-1", "result") == "$vars.node-1.result"
    assert path_text("$vars", "a.b", "result") == '$vars["a.b"].result'
    assert path_text("$vars", "x y", "result") == '$vars["x y"].result'
    assert path_text("$vars", "abc\n", "result") == '$vars["abc\\n"].result'
    for key in ("a.b", "x y", "abc\n", "{{", "é", "a#call"):
        text = path_text("$vars", key, "result")
        assert parse_path(text) == StatePath("$vars", (key, "result"))


def test_is_secret() -> None:
    from lattice.ir.templates import is_secret

    assert is_secret(parse_path("$secrets.TOKEN"))
    assert not is_secret(parse_path("$in.secrets"))
    assert not is_secret(NameRef("secrets"))

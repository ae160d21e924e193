"""The lexer: one pass finds every markup token and pairs open tags with their close tags."""

from __future__ import annotations

from toolscore.plan.lex import Token, attributes, lex


def kinds(tokens: list[Token]) -> list[str]:
    return [t.kind for t in tokens]


def test_an_open_tag_pairs_with_the_first_balanced_close_tag_of_its_name() -> None:
    tokens = lex("<a><b></a></b><a><a/></a>")
    assert [(t.kind, t.name, t.close) for t in tokens] == [
        ("open", "a", 2),
        ("open", "b", 3),
        ("close", "a", None),
        ("close", "b", None),
        ("open", "a", 6),
        ("empty", "a", None),
        ("close", "a", None),
    ]
    nested = lex("<a><a></a></a>")
    assert [t.close for t in nested] == [3, 2, None, None]


def test_an_unmatched_tag_has_no_close() -> None:
    assert [t.close for t in lex("<a></b>")] == [None, None]


def test_a_lone_less_than_and_an_attribute_value_holding_one_stay_text() -> None:
    assert lex("if x < y and a<b then <1>") == []
    assert lex('<a x="<">') == []


def test_open_tags_keep_their_attributes_as_written() -> None:
    (token,) = lex("<call server='fx' tool=\"echo\" id = 'a' />")
    assert token.kind == "empty"
    assert attributes(token.attrs) == {"server": "fx", "tool": "echo", "id": "a"}


def test_comments_and_cdata_hide_the_markup_inside_them() -> None:
    text = "<!-- <a> --><![CDATA[</a> <b>]]><c/>"
    tokens = lex(text)
    assert kinds(tokens) == ["comment", "cdata", "empty"]
    assert text[tokens[0].start : tokens[0].end] == "<!-- <a> -->"
    assert text[tokens[1].start : tokens[1].end] == "<![CDATA[</a> <b>]]>"


def test_a_cdata_never_closed_runs_to_the_end() -> None:
    text = "<![CDATA[ <a/>"
    assert [(t.kind, t.end) for t in lex(text)] == [("cdata", len(text))]


def test_processing_instructions_and_unclosed_comments_do_not_hide_markup() -> None:
    # `List<? extends T>` in code is no PI: the scan goes on inside, only the parser's item level skips it.
    text = "<? <a/> ?><!-- <b/>"
    tokens = lex(text)
    assert kinds(tokens) == ["pi", "empty", "open_comment", "empty"]
    assert tokens[0].end == text.index("?>") + 2
    assert tokens[2].end == len(text)


def test_many_processing_instructions_share_one_end() -> None:
    text = "<?" * 1000 + "?>"
    tokens = lex(text)
    assert len(tokens) == 1000 and {t.end for t in tokens} == {len(text)}
    assert [t.end for t in lex("<? x ?><? y")] == [7, 11]


def test_any_other_markup_declaration_is_a_dtd_token() -> None:
    assert kinds(lex('<!DOCTYPE p [<!ENTITY a "x">]>')) == ["dtd", "dtd"]

"""The one glob matcher."""

from __future__ import annotations

from toolscore._glob import matches


def test_names_match_any_of_the_globs_exactly() -> None:
    assert matches("fx__echo", ["gx__*", "fx__e*"])
    assert matches("fx__echo", ["fx__ech?"]) and matches("fx__echo", ["fx__[de]cho"])
    assert not matches("fx__echo", ["FX__echo", "fx__ech"])
    assert not matches("fx__echo", [])


def test_one_glob_is_one_pattern_not_its_characters() -> None:
    assert matches("fx__echo", "fx__*")
    assert not matches("f", "fx__*")  # as characters, "f" would match


def test_folding_matches_case_and_compatibility_forms_on_both_sides() -> None:
    assert matches("fx__delete", ["FX__ＤＥＬＥＴＥ"], fold=True)
    assert matches("Fx__Ｄelete", ["fx__del*"], fold=True)
    assert matches("STRASSE", ["straße"], fold=True)
    assert not matches("fx__delete", ["FX__ＤＥＬＥＴＥ"])

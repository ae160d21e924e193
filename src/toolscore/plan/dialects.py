"""The reference dialects models are trained on, read as canonical references where unambiguous; pure.

Theory of operation. Models write references between calls the way their training data did:

    $var_1.result$           NESTFUL (a label and its output key between dollar signs)
    #E1  #E2.items[0]        ReWOO (evidence variables: the n-th call, or the call with id="E1")
    $1  $1.text              LLMCompiler (a task number; `${1}` is already canonical)
    $hits.text  $step2       a `$` without braces
    {{step1.output}}  {{{a}}} templates (mustache, handlebars' triple braces)
    <ref id="s1" path="items[0]"/>   an XML reference element

`read_references` reads each string of a call's arguments once, left to right, and rewrites a
dialect token into the canonical `${target.path}` only where it is unambiguous: the token names a
step or id that exists and its path is well formed to its last delimiter, or the token is a whole
argument value in a spelling that can only be a reference (`"$var_9.result$"`, `"#E4"`,
`<ref id=".."/>`). The whole token goes, delimiters included, so no `$`, brace or `#` is ever left
beside the reference it became; a whole value stays a whole value, so the referenced value keeps
its JSON type. Everything outside the recognised tokens is left exactly as written (a property
test holds the reader to this). A token that is a reference by its form but names nothing, reads
two ways, or leaves a stray delimiter is refused with the fix, since sending it on as text would
run a step with data the model did not mean.

What stays text: `costs $3` (a number without a path inside longer text), `$HOME` and `{{ name }}`
naming no step or id, `$$` (a literal `$`), and canonical references, which `refs.py` reads.

Every string may be hostile: the scan finds the next `$`, `#`, `{` or `<` and tries the dialects
anchored there, each with possessive quantifiers only, so reading is linear in the string's size.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toolscore._json import map_strings
from toolscore.errors import RefSyntaxError
from toolscore.plan.lex import attributes
from toolscore.plan.refs import _PATH, _TARGET, _target, step_like

__all__ = ["DIALECTS", "REF_ELEMENT_RE", "Reading", "Refusal", "Targets", "read_references", "read_string"]

NESTFUL = "NESTFUL"
REWOO = "ReWOO"
LLMCOMPILER = "LLMCompiler"
BARE = "bare $"
TEMPLATE = "template"
REF_ELEMENT = "<ref>"

DIALECTS: dict[str, str] = {
    NESTFUL: "NESTFUL's $label.key$",
    REWOO: "ReWOO's #E1",
    LLMCOMPILER: "LLMCompiler's $1",
    BARE: "a $ without braces",
    TEMPLATE: "template braces {{...}}",
    REF_ELEMENT: 'a <ref id="..." path="..."/> element',
}
"""Each dialect as the warnings name it."""

_TRIGGER = re.compile(r"[$#{<]")
_ESCAPE_OR_CANONICAL = re.compile(r"\$(?:\$|\{[^{}]*+\}|result_of_step_\d++(?:" + _PATH + r")\??)")
# `$name.path` or `$12.path`; a `$` right after it is NESTFUL's closing one.
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]{0,63}+|\d{1,15}+)(" + _PATH + r")(?![A-Za-z0-9_])")
_EVIDENCE = re.compile(r"#E(\d{1,15}+)(" + _PATH + r")(?![A-Za-z0-9_])")
# Two or three braces each side; the inside up to the next brace, possessively (`{{` never closed
# costs one scan to the next brace).
_BRACES = re.compile(r"\{\{(\{?+)([^{}]*+)\}\}(\}?+)")
REF_ELEMENT_RE = re.compile(
    r"""<ref((?:\s++[A-Za-z_][A-Za-z0-9_\-]*+\s*+=\s*+(?:"[^"<]*+"|'[^'<]*+'))*+)\s*+(?:/>|>\s*+</ref\s*+>)""",
    re.IGNORECASE,
)
_PATH_ONLY = re.compile(_PATH)
_LABEL_LIKE = re.compile(r"^(?:var|label|step|result|output|task|call|e)_?\d{1,15}$", re.IGNORECASE)
"""A name that can only be meant as a step's label (`var_3`, `step_2`): naming nothing, it is refused."""
_WORD_BEFORE = re.compile(r"[A-Za-z0-9_/&]")


@dataclass(frozen=True, slots=True)
class Reading:
    """One dialect token read as a canonical reference."""

    written: str
    canonical: str
    dialect: str
    start: int
    """Where the token was in the string as written (`end` is past its last character)."""
    end: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """A token that is a reference by its form but cannot be read as one: the plan is refused."""

    code: str
    """`unknown_reference` (it names nothing) or `bad_reference` (it reads two ways)."""
    written: str
    why: str
    """What is wrong and the fix, to follow `step N uses <written>`."""


@dataclass(frozen=True, slots=True)
class Targets:
    """What a token may name: the checker's view of the steps and ids visible to the plan."""

    known: Callable[[int | str], bool]
    """Whether a step number or id exists (in this turn or an earlier one of the episode)."""
    calls: Sequence[int] = ()
    """This turn's steps in document order: ReWOO's `#E2` is the second."""
    labelled: bool = False
    """Some call has an id like `E2`: then `#E2` names that id only, never a position."""


def _show(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _name_target(name: str) -> int | str | None:
    """The step or id a name written in a dialect means (`var_1`, `step2`, `7`), None if none."""
    match = _TARGET.match(name)
    if match is None:
        return None
    try:
        return _target(match, name)
    except RefSyntaxError:  # a number too long to be any step's
        return None


class _Reader:
    def __init__(self, text: str, targets: Targets) -> None:
        self.text = text
        self.targets = targets
        self.out: list[str] = []
        self.readings: list[Reading] = []
        self.refusals: list[Refusal] = []

    def whole(self, start: int, end: int) -> bool:
        return start == 0 and end == len(self.text)

    def read(self, start: int, end: int, target: int | str, path: str, dialect: str) -> None:
        canonical = "${" + f"{target}{path}" + "}"
        if self.lone_dollar():
            # `$#E1`: the `$` written before the token is text, and stays text beside the reference
            # (`$` then `${...}` would read as `$$`, a literal `$`, and `{...}`).
            self.out.append("$")
        self.out.append(canonical)
        self.readings.append(Reading(self.text[start:end], canonical, dialect, start, end))

    def lone_dollar(self) -> bool:
        """Whether the text read so far ends with a `$` the canonical reader pairs with nothing."""
        run = 0
        for piece in reversed(self.out):
            stripped = piece.rstrip("$")
            run += len(piece) - len(stripped)
            if stripped:
                break
        return run % 2 == 1

    def refuse(self, code: str, start: int, end: int, why: str) -> None:
        written = self.text[start:end]
        self.out.append(written)
        self.refusals.append(Refusal(code, _show(written), why))

    # -- the dialects, each anchored at `i`; each returns where reading goes on, or None --------

    def dollar(self, i: int) -> int | None:
        text = self.text
        if text.startswith("${{", i):
            return self.braces(i + 1, dollar=True)
        if (kept := _ESCAPE_OR_CANONICAL.match(text, i)) is not None:
            self.out.append(kept.group(0))  # `$$`, `${...}`, `$result_of_step_3`: canonical
            return kept.end()
        match = _DOLLAR.match(text, i)
        if match is None:
            return None
        name, path, end = match.group(1), match.group(2), match.end()
        target = _name_target(name)
        known = target is not None and self.targets.known(target)
        if text.startswith("$", end):
            return self.nestful(i, end, name, path, target, known)
        if name.isdecimal():
            # LLMCompiler's `$1`: a reference only with a path or as a whole value (`costs $3`).
            if known and (path or self.whole(i, end)):
                self.read(i, end, name, path, LLMCOMPILER)
                return end
            if path and not known:
                # `$9.result`: a path makes it a reference (a price has none), and it names nothing.
                why = f" ({DIALECTS[LLMCOMPILER]}), which names no step{self.steps()}; write ${{N{path}}} for step N"
                self.refuse("unknown_reference", i, end, why)
                return end
            self.out.append(text[i:end])
            return end
        if known:
            self.read(i, end, name, path, BARE)
            return end
        if (number := step_like(name)) is not None:
            meant = (
                f"write ${{{number}}} for step {number}'s result" if self.targets.known(number) else f"no step {number}"
            )
            written = text[i:end]
            self.refuse(
                "unknown_reference",
                i,
                end,
                f", which names no step or id ({meant}); for the text {written} write $${written[1:]}",
            )
            return end
        self.out.append(text[i:end])
        return end

    def nestful(self, i: int, end: int, name: str, path: str, target: int | str | None, known: bool) -> int:
        """`$label.key$`: the closing `$` at `end` goes with the reference."""
        text = self.text
        close = end + 1
        if known:
            # The closing `$` could also open what follows: `$a.x$b.y`, `$a.x$${...}`, `$a.x$$`.
            after = _DOLLAR.match(text, end)
            follows = text.startswith(("$$", "${"), end) or (
                after is not None and (other := _name_target(after.group(1))) is not None and self.targets.known(other)
            )
            if follows:
                self.refuse(
                    "bad_reference",
                    i,
                    close,
                    f": its last $ may close it ({DIALECTS[NESTFUL]}) or open what follows "
                    f"({_show(text[i : close + 8])}...); write ${{{name}{path}}}, and $$ for a literal $",
                )
                return close
            self.read(i, close, name, path, NESTFUL)
            return close
        if self.whole(i, close) or _LABEL_LIKE.match(name):
            hint = "" if target is None else self.meant(target)
            self.refuse(
                "unknown_reference",
                i,
                close,
                f" ({DIALECTS[NESTFUL]}), which names no step or id{hint}; label the call it means "
                f'(id="{name}") and write ${{{name}{path}}}',
            )
            return close
        self.out.append(text[i:end])  # `$HOME$PATH`: text; the `$` at `end` is read on its own
        return end

    def steps(self) -> str:
        calls = self.targets.calls
        return f" (this plan's steps are {calls[0]} to {calls[-1]})" if calls else ""

    def meant(self, target: int | str) -> str:
        number = target if isinstance(target, int) else step_like(target)
        return f" (step {number} is ${{{number}}})" if number is not None and self.targets.known(number) else ""

    def evidence(self, i: int) -> int | None:
        """ReWOO's `#E1`: the call with id `E1`, else this turn's first call."""
        text = self.text
        if i > 0 and _WORD_BEFORE.match(text, i - 1):
            return None  # `page#E1`, `&#E1`: an anchor or an entity, not evidence
        match = _EVIDENCE.match(text, i)
        if match is None:
            return None
        digits, path, end = match.group(1), match.group(2), match.end()
        ident = "E" + digits
        if self.targets.known(ident):
            self.read(i, end, ident, path, REWOO)
            return end
        number, calls = int(digits), self.targets.calls
        if 1 <= number <= len(calls) and not self.targets.labelled:
            self.read(i, end, calls[number - 1], path, REWOO)
            return end
        if self.whole(i, end):
            why = (
                f" ({DIALECTS[REWOO]}), which names no call: this plan has {len(calls)} call"
                f'{"" if len(calls) == 1 else "s"}; write ${{N}} for step N, or label the call id="{ident}"'
            )
            self.refuse("unknown_reference", i, end, why)
            return end
        self.out.append(text[i:end])  # `#E12` in longer text naming nothing: a colour, a heading
        return end

    def braces(self, i: int, *, dollar: bool = False) -> int | None:
        """`{{x.path}}`, handlebars' `{{{x}}}` and `${{x}}`, when `x` names a step or id."""
        match = _BRACES.match(self.text, i)
        if match is None:
            if not dollar:
                return None
            self.out.append("${")  # `${{` never closed: the canonical reader says what is wrong
            return i + 1
        if dollar:
            i -= 1
        opened, inner, closed, end = match.group(1), match.group(2).strip(), match.group(3), match.end()
        target_match = _TARGET.match(inner)
        target = _name_target(inner) if target_match is not None else None
        if target is None or target_match is None or not self.targets.known(target):
            self.out.append(self.text[i:end])  # template syntax in code: text
            return end
        if bool(opened) != bool(closed):
            self.refuse(
                "bad_reference",
                i,
                end,
                f": {'three' if opened else 'two'} braces open it and {'three' if closed else 'two'} close it, "
                f"so a brace would be left beside the reference; write ${{{inner}}}",
            )
            return end
        self.read(i, end, inner[: target_match.start(5)], inner[target_match.start(5) :], TEMPLATE)
        return end

    def element(self, i: int) -> int | None:
        """`<ref id="s1" path="items[0]"/>` (also `step="2"`; a path may start with `.` or `$.`)."""
        match = REF_ELEMENT_RE.match(self.text, i)
        if match is None:
            return None
        end = match.end()
        attrs = attributes(match.group(1))
        unknown = sorted(set(attrs) - {"id", "step", "path"})
        name = attrs.get("id", attrs.get("step", ""))
        if unknown or ("id" in attrs) == ("step" in attrs):
            extra = f"; it has no {', '.join(unknown)}" if unknown else ""
            self.refuse(
                "bad_reference", i, end, f': a <ref> names one step or id (id="...") and an optional path="..."{extra}'
            )
            return end
        raw_path = attrs.get("path", "").strip()
        path = raw_path[1:] if raw_path.startswith("$") else raw_path
        if path and not path.startswith((".", "[")):
            path = "." + path
        target = _name_target(name.strip())
        if _PATH_ONLY.fullmatch(path) is None or target is None:
            what = f"path {raw_path!r}" if target is not None else f"id {name!r}"
            self.refuse(
                "bad_reference",
                i,
                end,
                f": its {what} is not one; write ids as [A-Za-z_][A-Za-z0-9_]*, paths as key.list[0]['odd key']",
            )
            return end
        if not self.targets.known(target):
            fix = self.meant(target) or f'; write id="<a call\'s id>" or step="N"{self.steps()}'
            self.refuse("unknown_reference", i, end, f", which names no step or id '{target}'{fix}")
            return end
        self.read(i, end, name.strip(), path, REF_ELEMENT)
        return end

    def run(self) -> str:
        text, pos = self.text, 0
        readers = {"$": self.dollar, "#": self.evidence, "{": self.braces, "<": self.element}
        while (found := _TRIGGER.search(text, pos)) is not None:
            i = found.start()
            self.out.append(text[pos:i])
            after = readers[text[i]](i)
            if after is None:
                self.out.append(text[i])
                after = i + 1
            pos = after
        self.out.append(text[pos:])
        return "".join(self.out)


def read_string(text: str, targets: Targets) -> tuple[str, list[Reading], list[Refusal]]:
    """One string with its dialect references read: the string, what was read, what is refused."""
    if _TRIGGER.search(text) is None:
        return text, [], []
    reader = _Reader(text, targets)
    return reader.run(), reader.readings, reader.refusals


def read_references(value: Any, targets: Targets) -> tuple[Any, list[Reading], list[Refusal]]:
    """Every string of a JSON value (not its keys) read with `read_string`, in document order."""
    readings: list[Reading] = []
    refusals: list[Refusal] = []

    def one(text: str) -> str:
        out, read, refused = read_string(text, targets)
        readings.extend(read)
        refusals.extend(refused)
        return out

    return map_strings(value, one), readings, refusals

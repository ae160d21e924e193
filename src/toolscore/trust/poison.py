"""A deterministic scan of tool, prompt and resource-template definitions for poisoning; pure.

A definition's text reaches the model verbatim, so a server can hide instructions in it: Unicode a
person cannot see (tag characters, zero-width and bidi controls, private-use code points, runs of
variation selectors, terminal escapes, Cyrillic look-alikes in Latin words), phrasing aimed at the
model (`<IMPORTANT>`, "ignore previous instructions", "do not tell the user", "do not ask for
confirmation"), exfiltration hints (credential paths, secrets to pass along,
URLs in a tool that has no business with the network, a hard-coded recipient), redirection of
another server's tools, and a description that contradicts the tool's read-only claim.

`scan(kind, definition, others=...)` returns `Finding`s: a check id, a severity, where in the
definition (`description`, `inputSchema.properties.note.description`, ...), the offending span of
that text and a printable excerpt. The checks are word lists and literal patterns (English, and
the commonest instructions in eight other languages), tuned on the labelled corpus in
`benchmarks/data/poisoning_corpus.json`, whose held-out part measures them (docs/security.md).

Linear in the input: every text is cut to `MAX_TEXT` characters and a definition to `MAX_TOTAL`;
the regular expressions start with a literal or a character class and have no nested quantifiers
that could backtrack; phrases are matched over word tokens with bounded gaps.
"""

from __future__ import annotations

import base64
import bisect
import functools
import itertools
import re
import unicodedata
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeGuard

__all__ = ["MAX_TEXT", "MAX_TOTAL", "Finding", "Severity", "scan"]

MAX_TEXT = 16_384
"""Characters of one text (a description, a property's description, an enum value) examined."""
MAX_TOTAL = 131_072
"""Characters of one definition examined, all its texts together."""
_MAX_FINDINGS = 32
_MAX_DEPTH = 32
_EXCERPT = 80


class Severity(StrEnum):
    """How sure the check is that the text is aimed at the model rather than at a reader."""

    HIGH = "high"
    MEDIUM = "medium"


@dataclass(frozen=True, slots=True)
class Finding:
    """One suspicious span of a definition."""

    check: str
    """The check's id, e.g. `unicode.tag`, `hidden.secrecy`, `exfil.credential_path`."""
    severity: Severity
    where: str
    """Which text of the definition: `description`, `name`, `inputSchema.properties.x.description`, ..."""
    start: int
    end: int
    """The span within that text, in characters."""
    excerpt: str
    """The span as printable text (invisible characters shown as `\\u....`), cut to 80 characters."""
    message: str

    def as_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data."""
        return {
            "check": self.check,
            "severity": self.severity.value,
            "where": self.where,
            "span": [self.start, self.end],
            "excerpt": self.excerpt,
            "message": self.message,
        }


# ---------------------------------------------------------------------------------------------
# Unicode smuggling: one character class over everything suspicious, then each run classified.

_SUSPECT = re.compile(
    "["
    "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"  # C0/C1 controls (ESC drives terminals), tab and newlines aside
    "\u200b-\u200d\u2060-\u2064\ufeff\u180e\u115f\u1160\u3164\uffa0"  # zero-width and blank fillers
    "\u202a-\u202e\u2066-\u2069"  # bidi embeddings, overrides and isolates
    "\ufe00-\ufe0f\U000e0100-\U000e01ef"  # variation selectors
    "\U000e0000-\U000e007f"  # tag characters
    "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"  # private use
    "]+"
)


# The same characters' UTF-8 (and a few unassigned neighbours): a pre-test on the bytes of a text
# that is not all ASCII, which a class first lets the engine skim, where `_SUSPECT` looks at each
# character of the text against its every range.
_SUSPECT_UTF8 = re.compile(
    rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\xc2\xe1-\xe3\xee\xef\xf3\xf4]"  # the first byte, then which it is:
    rb"(?:(?<=[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\xee\xf4])"  # C0 controls; U+E000-EFFF, plane 16
    rb"|(?<=\xc2)[\x80-\x9f]"  # C1 controls
    rb"|(?<=\xe1)(?:\x85[\x9f\xa0]|\xa0\x8e)"  # U+115F, U+1160, U+180E
    rb"|(?<=\xe2)(?:\x80[\x8b-\x8d\xaa-\xae]|\x81[\xa0-\xa4\xa6-\xa9])"  # U+200B-200D, 202A-202E, 2060-2064, 2066-2069
    rb"|(?<=\xe3)\x85\xa4"  # U+3164
    rb"|(?<=\xef)(?:[\x80-\xa3]|\xb8[\x80-\x8f]|\xbb\xbf|\xbe\xa0)"  # U+F000-F8FF, FE00-FE0F, FEFF, FFA0
    rb"|(?<=\xf3)(?:\xa0[\x80\x81\x84-\x87]|[\xb0-\xbf]))"  # tags, U+E0100-E01EF, plane 15
)


def _kind_of(ch: str) -> str:
    cp = ord(ch)
    if cp < 0xA0:
        return "unicode.control"
    if 0x202A <= cp <= 0x202E or 0x2066 <= cp <= 0x2069:
        return "unicode.bidi"
    if 0xE0000 <= cp <= 0xE007F:
        return "unicode.tag"
    if 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:
        return "unicode.variation"
    if 0xE000 <= cp <= 0xF8FF or cp >= 0xF0000:
        return "unicode.private_use"
    return "unicode.zero_width"


_UNICODE = {
    "unicode.control": (Severity.HIGH, "control characters (terminal escapes can hide or overwrite text)"),
    "unicode.bidi": (Severity.HIGH, "bidi controls reorder what a person reads"),
    "unicode.tag": (Severity.HIGH, "Unicode tag characters: invisible text a model still reads"),
    "unicode.variation": (Severity.MEDIUM, "a run of variation selectors: a known channel for hidden bytes"),
    "unicode.private_use": (Severity.MEDIUM, "private-use characters: no meaning outside a private agreement"),
    "unicode.zero_width": (Severity.MEDIUM, "zero-width or blank characters inside plain text"),
}
_JOINERS = frozenset("\u200c\u200d")
_BLACK_FLAG = "\U0001f3f4"


def _benign_run(text: str, start: int, end: int, kind: str) -> bool:
    """The standard uses: joiners inside non-Latin words and emoji, one selector after its base
    character, a subdivision flag's tag sequence, a byte-order mark at the very start."""
    run = text[start:end]
    before = text[start - 1] if start else ""
    after = text[end] if end < len(text) else ""
    if kind == "unicode.zero_width":
        if run == "\ufeff" and start == 0:
            return True
        return set(run) <= _JOINERS and len(run) == 1 and not before.isascii() and not after.isascii()
    if kind == "unicode.variation":
        return len(run) == 1 and before != "" and not before.isspace()
    if kind == "unicode.tag":
        return before == _BLACK_FLAG and run.endswith("\U000e007f") and len(run) <= 7
    return False


def _unicode(text: str, where: str, out: list[Finding]) -> None:
    for match in _SUSPECT.finditer(text):
        # A run can mix kinds (a tag sequence after a zero-width space): one finding per kind's stretch.
        start = match.start()
        while start < match.end():
            kind = _kind_of(text[start])
            end = start + 1
            while end < match.end() and _kind_of(text[end]) == kind:
                end += 1
            if not _benign_run(text, start, end, kind):
                severity, message = _UNICODE[kind]
                out.append(Finding(kind, severity, where, start, end, _excerpt(text[start:end]), message))
            start = end


def _excerpt(span: str) -> str:
    shown = "".join(ch if ch.isprintable() or ch in "\n\t" else f"\\u{ord(ch):04x}" for ch in span[:_EXCERPT])
    return shown[:_EXCERPT] + ("..." if len(shown) > _EXCERPT or len(span) > _EXCERPT else "")


# ---------------------------------------------------------------------------------------------
# Folding: lower case, NFKC (full-width letters), invisible characters dropped, with the map back
# to the original offsets so a finding points at what the server sent.


def _fold(text: str, skeleton: list[str] | None = None) -> tuple[str, list[int] | None]:
    """The folded text and, when it is not the text lowered, each of its characters' offset in
    `text`. With `skeleton`, the folded text's pieces go there too, each character that is not
    ASCII made `ª` (a letter) where it is a letter or digit, else a space: the folded text as
    `_present` sees it, in bytes."""
    if text.isascii():
        return text.lower(), None
    pieces: list[str] = []
    where: list[int] = []
    at = 0
    for run in _NON_ASCII.finditer(text):  # ASCII stretches in bulk; only the rest char by char
        start, end = run.span()
        # Latin letters can only be beside the run's ends: a run with none there maps nothing.
        latin = (start > 0 and _ascii_letter(text[start - 1])) or (end < len(text) and _ascii_letter(text[end]))
        pieces.append(text[at:start].lower())
        if skeleton is not None:
            skeleton.append(pieces[-1])
        where.extend(range(at, start))
        for i in range(start, end):
            ch = text[i]
            if _SUSPECT.match(ch):
                continue
            if latin and ch in _CONFUSABLE and _latin_beside(text, i):  # `раss` in a Latin word reads `pass`
                folded = _CONFUSABLE[ch]
            else:
                folded = unicodedata.normalize("NFKC", ch).casefold().replace("\u2019", "'")
            pieces.append(folded.lower())
            if skeleton is not None:
                skeleton.append("".join(c if c.isascii() else "ª" if c.isalnum() else " " for c in pieces[-1]))
            where.extend([i] * len(folded))
        at = end
    pieces.append(text[at:].lower())
    if skeleton is not None:
        skeleton.append(pieces[-1])
    where.extend(range(at, len(text)))
    return "".join(pieces), where


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# Cyrillic and Greek letters that look like Latin ones, read as Latin inside a Latin word (a word
# of a Cyrillic or Greek text is left alone: only a mixed word is a disguise).
_CONFUSABLE = dict(
    zip(
        "аеорсухіјѕԁӏАВЕКМНОРСТХІЈЅοανρτυικΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
        "aeopcyxijsdlabekmhopctxijsoavptuikabezhikmnoptyx",
        strict=True,
    )
)
_MIXED = re.compile(
    "[A-Za-z][" + "".join(_CONFUSABLE) + "]|[" + "".join(_CONFUSABLE) + "][A-Za-z]"
)  # fmt: skip


def _ascii_letter(ch: str) -> bool:
    return ch.isascii() and ch.isalpha()


def _latin_beside(text: str, i: int) -> bool:
    """Whether a Latin letter is beside `text[i]`, through at most two other look-alikes."""
    for step in (-1, 1):
        j = i + step
        while 0 <= j < len(text) and text[j] in _CONFUSABLE and abs(j - i) < 4:  # bounded per character
            j += step
        if 0 <= j < len(text) and _ascii_letter(text[j]):
            return True
    return False


_ASCII_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""The ASCII part of `_SUSPECT` (the texts are joined with newlines, which are no finding)."""


# ---------------------------------------------------------------------------------------------
# Literal patterns over folded text. Each alternative begins with a literal character.

# Every alternative starts with a literal character (a lookbehind comes after it), so the engine
# skips ahead to the few places one could start.
_CREDENTIAL = re.compile(
    r"~/\.ssh(?:/(?!config\b|known_hosts\b|id_\w+\.pub\b)|(?![\w/-]))"
    r"|\.ssh/id_(?!\w+\.pub\b)|i(?<![a-z0-9]i)d_(?:rsa|dsa|ecdsa|ed25519)(?![a-z0-9]|\.pub\b)"
    r"|\.aws/credentials|\.netrc\b|\.pgpass\b|\.git-credentials\b|\.npmrc\b|\.pypirc\b"
    r"|\.docker/config\.json|\.kube/config\b|\.gnupg\b|\.config/gcloud|application_default_credentials\.json"
    r"|m(?<![\w-]m)cp\.json\b|claude_desktop_config\.json|/etc/shadow\b|/etc/passwd\b"
    r"|\.bash_history\b|\.zsh_history\b|\.(?<![\w.]\.)env(?!\w|\.(?:example|sample|template|dist)\b)"
)
# One alternative per first character, so the engine tests each position against `<` and `[` only.
_MARKER = re.compile(
    r"<(?:\s*(?:/\s*)?(?:important|system|instructions?|secret|hidden|admin|critical|assistant|sys)\s*>"
    r"|!--|\|(?:im_start|im_end|system|endoftext)\|>|</?sys>>)"
    r"|\[(?:/?inst\]"
    r"|//\]:|comment\]:"  # a markdown comment: `[//]: # (...)` renders as nothing
    r"|\s*(?:system|admin|assistant)(?:\s+(?:notice|message|note|override|update|prompt))?\s*\])"
)
# A line (or parenthesis) that opens by addressing the model: `assistant:`, `ai:`, `llm:`.
_ADDRESSED = re.compile(r"^[ \t]*(?:assistant|ai|llm)[ \t]*:|\((?:assistant|ai|llm)[ \t]*:", re.MULTILINE)
_ADDRESSEES = frozenset({"assistant", "ai", "llm"})
_URL = re.compile(r"https?://[^\s<>\"'`)\]]+")
_AT_DOMAIN = re.compile(r"@[a-z0-9-]+(?:\.[a-z0-9-]+)+")
_PHONE = re.compile(r"\+\d[\d ().-]{7,18}\d")
# From a run's first character only: a match tried at every character of a long word costs its length again.
_ENCODED = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{64,}={0,2}")
_WORD = re.compile(r"\w+(?:'t)?")
_SENTENCE = re.compile(r"[.!?]\s|\n")
_RESERVED_DOMAINS = ("example.com", "example.org", "example.net", "localhost")
_RESERVED_TLDS = (".example", ".test", ".invalid", ".localhost")
_LOCAL_PART = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._+-")


# ---------------------------------------------------------------------------------------------
# Phrases over word tokens: each step a set of words, with at most `gap` other words before it.


def _w(words: str) -> frozenset[str]:
    return frozenset(words.split())


_NEG = _w("not never no without don't doesn't didn't won't can't cannot mustn't shouldn't isn't nor")
_COMM = _w(
    "tell telling tells mention mentioning inform informing reveal revealing disclose disclosing show showing"
    " output notify notifying alert alerting say saying let"
)
_USER = _w("user users human humans")
_KNOW = _w("know knowing notice noticing see seeing learn realize realizing suspect")
_INSTR = _w("instructions instruction directions guidelines rules prompt prompts directives")
_ACTION = _w(
    "read reading include including pass passing send sending append appending put attach forward forwarding"
    " upload uploading post posting provide add embed leak exfiltrate transmit submit concatenate"
)
_SECRET_HEADS = _w("private ssh api access session system conversation chat previous environment all")
_SECRET_TAILS = _w("key keys token tokens cookie cookies prompt history context messages variables")
_SECRET_WORDS = _w("password passwords credentials secrets")
_SECRETS = _SECRET_WORDS | _SECRET_HEADS
_NET_VERBS = _w(
    "send sending sends post posting posts upload uploading forward forwarding submit report fetch"
    " download visit curl wget transmit beacon"
)
_WRITE = _w(
    "delete deletes deleting remove removes removing overwrite overwrites overwriting erase erases wipe wipes"
    " upload uploads uploading send sends sending modify modifies write writes drop drops truncate truncates"
    " destroy destroys transfer transfers forward forwards exfiltrate"
)
_STRONG_WRITE = _w(
    "delete deletes remove removes erase erases wipe wipes overwrite overwrites upload uploads"
    " destroy destroys exfiltrate"
)
_READ_NAMES = _w("get read list search find show view describe fetch query count check lookup inspect")
_NET_WORDS = _w(
    "url urls uri web internet online fetch download upload browse browser website api remote"
    " github gitlab slack email mail network domain webhook"
)


@dataclass(frozen=True, slots=True)
class _Phrase:
    check: str
    severity: Severity
    message: str
    steps: tuple[tuple[frozenset[str], int], ...]
    """(words, gap): the word sets in order, each after at most `gap` other words (the first's gap is unused)."""


def _p(check: str, severity: Severity, message: str, *steps: tuple[frozenset[str], int]) -> _Phrase:
    return _Phrase(check, severity, message, steps)


_OVERRIDE = "text that tells the model to drop its instructions"
_SECRECY = "text that asks the model to keep something from the user"
_TRIGGER = "text that makes the tool run around every other call"
_REDIRECT = "text that redirects what other tools do"
_PHRASES = (
    _p(
        "hidden.override",
        Severity.HIGH,
        _OVERRIDE,
        (_w("ignore ignoring disregard disregarding forget"), 0),
        (_INSTR, 4),
    ),
    _p(
        "hidden.override",
        Severity.HIGH,
        _OVERRIDE,
        (_w("override overrides overriding supersede supersedes"), 0),
        (_w("other previous prior all any your existing system"), 2),
        (_INSTR, 1),
    ),
    # "new instructions" alone is also what a tool that writes AGENTS.md does: the model told to follow them.
    _p(
        "hidden.override",
        Severity.HIGH,
        _OVERRIDE,
        (_w("follow obey apply"), 0),
        (_w("new updated"), 2),
        (_w("instructions directives"), 0),
    ),
    _p(
        "hidden.override",
        Severity.HIGH,
        _OVERRIDE,
        (_w("new updated"), 0),
        (_w("instructions directives"), 0),
        (_w("follow apply supersede override replace"), 2),
    ),
    _p("hidden.override", Severity.MEDIUM, _OVERRIDE, (_w("from"), 0), (_w("now"), 0), (_w("on"), 0)),
    _p(
        "hidden.override",
        Severity.HIGH,
        _OVERRIDE,
        (_w("regardless irrespective matter"), 0),
        (_w("of what whatever"), 1),
        (_USER, 2),
    ),
    _p("hidden.override", Severity.HIGH, _OVERRIDE, (_w("you"), 0), (_w("are"), 0), (_w("now"), 0)),
    _p("hidden.secrecy", Severity.HIGH, _SECRECY, (_NEG, 0), (_COMM, 2), (_USER, 4)),
    _p("hidden.secrecy", Severity.HIGH, _SECRECY, (_USER, 0), (_NEG, 3), (_KNOW, 3)),
    _p("hidden.secrecy", Severity.HIGH, _SECRECY, (_NEG, 0), (_USER, 2), (_KNOW, 1)),
    _p("hidden.secrecy", Severity.HIGH, _SECRECY, (_w("hide hiding conceal concealing"), 0), (_USER, 4)),
    _p(
        "hidden.secrecy",
        Severity.HIGH,
        _SECRECY,
        (_w("keep"), 0),
        (_w("it this that these them"), 1),
        (_w("from"), 0),
        (_USER, 1),
    ),
    _p(
        "hidden.secrecy",
        Severity.HIGH,
        _SECRECY,
        (_w("without"), 0),
        (_w("telling informing mentioning notifying alerting"), 0),
        (_w("them anyone anybody"), 1),
    ),
    # Imperative only ("do not ask", "never ask"): "it does not ask for confirmation" says what a tool does.
    _p(
        "hidden.no_confirm",
        Severity.HIGH,
        "text that tells the model not to ask the user first",
        (_w("do"), 0),
        (_w("not"), 0),
        (_w("ask seek request"), 0),
        (_w("confirmation permission approval consent"), 4),
    ),
    _p(
        "hidden.no_confirm",
        Severity.HIGH,
        "text that tells the model not to ask the user first",
        (_w("don't never"), 0),
        (_w("ask seek request"), 0),
        (_w("confirmation permission approval consent"), 4),
    ),
    _p(
        "hidden.preference",
        Severity.MEDIUM,
        "text that steers the model away from other tools",
        (_w("never"), 0),
        (_w("use call invoke"), 1),
        (_w("other another any"), 1),
        (_w("tool tools server servers"), 2),
    ),
    _p(
        "hidden.preference",
        Severity.MEDIUM,
        "text that steers the model away from other tools",
        (_w("other"), 0),
        (_w("tool tools"), 2),
        (_w("must should"), 3),
        (_w("never not"), 0),
        (_w("be"), 0),
        (_w("used called invoked"), 0),
    ),
    _p(
        "hidden.secrecy",
        Severity.HIGH,
        _SECRECY,
        (_w("silently secretly covertly quietly discreetly"), 0),
        (_ACTION | _WRITE | _w("run execute replace copy change call"), 1),
    ),
    _p(
        "hidden.trigger",
        Severity.MEDIUM,
        _TRIGGER,
        (_w("before after whenever every each"), 0),
        (_w("any every all each"), 2),
        (_w("tool tools call calls request requests operation operations server servers function functions"), 2),
    ),
    _p(
        "hidden.trigger",
        Severity.MEDIUM,
        _TRIGGER,
        (_w("always"), 0),
        (_w("call use run invoke execute"), 1),
        (_w("this it"), 1),  # the tool itself: "always call list_tables first" is a server's own advice
        (_w("first before beforehand"), 3),
    ),
    _p(
        "shadow.redirect",
        Severity.MEDIUM,
        _REDIRECT,
        (_w("instead"), 0),
        (_w("of"), 0),
        (_w("tool tools server servers"), 4),
    ),
    _p("shadow.redirect", Severity.MEDIUM, _REDIRECT, (_w("side"), 0), (_w("effect effects"), 0), (_w("on"), 1)),
    _p(
        "shadow.redirect",
        Severity.MEDIUM,
        _REDIRECT,
        (_w("change changing redirect redirecting rewrite"), 0),
        (_w("recipient recipients destination receiver addressee beneficiary payee"), 2),
    ),
    _p(
        "shadow.redirect",
        Severity.MEDIUM,
        _REDIRECT,
        (_w("recipient recipients destination receiver addressee beneficiary payee"), 0),
        (_w("must should"), 3),
        (_w("be"), 0),
        (_w("replaced changed swapped redirected"), 0),
    ),
)

# ---------------------------------------------------------------------------------------------
# Other languages: the two commonest instructions (drop your instructions; do not tell the user)
# in Spanish, Portuguese, French, Italian, German, Russian, Chinese and Japanese, as stems. Each
# pattern starts with a literal and its gap is bounded, and both parts must sit in one sentence.

_FOREIGN_OVERRIDE = re.compile(
    r"(?:ignor|olvid|oubli|dimentic|vergiss|missacht|игнорир|забудь|忽略|无视|無視|忘记)"
    r"[^\n.!?。！？]{0,60}?"
    r"(?:instruc|instruç|istruzion|consigne|anweisung|vorgabe|indicaç|indicacion|инструкц|указани|指令|指示|命令|提示)"
    r"|(?:指令|指示|命令)[^\n.!?。！？]{0,12}?(?:無視|无视|忽略)"  # the object first, as Japanese has it
)
_FOREIGN_USER_NEEDS = (
    "usuari",
    "utilisateur",
    "utente",
    "nutzer",
    "anwender",
    "пользовател",
    "用户",
    "用戶",
    "ユーザー",
)
_FOREIGN_USER = re.compile("|".join(_FOREIGN_USER_NEEDS))
_FOREIGN_OVERRIDE_NEEDS = ("instruc", "instruç", "istruzion", "consigne", "anweisung", "vorgabe", "indica", "инструкц",
                           "указани", "指令", "指示", "命令", "提示")  # fmt: skip
# Negation, then telling (within a few words): `no le digas`, `ne dis rien`, `sans informer`,
# `non dire`, `não conte`, `не сообщая`, `不要告诉`, `伝えないで` (Japanese negates after the verb).
_FOREIGN_HUSH = re.compile(
    r"(?:\b(?:no|ne|n'|non|não|nao|sans|sin|senza|sem|nicht|nichts|kein\w*|ohne|не|без)\b|不要|别|別|勿)"
    r"[^\n.!?。！？]{0,24}?"
    r"(?:dig|dis|dit|cont|cuent|mencion|mention|menzion|inform|avis|avert|prév|rivel|révél|revel|sag|erwähn|"
    r"verrat|mitteil|benachrichtig|сообщ|говор|рассказ|упомин|информ|告诉|告訴|通知|提及|透露|让用户知道|dir)"
    r"|(?:伝え|知らせ|言わ|教え)ない"
)
# German puts the negation after the verb: `sag dem Benutzer nichts`, `erwähne das ... nicht`.
_FOREIGN_HUSH_AFTER = re.compile(r"\b(?:sag|erwähn|verrat|teil)[^\n.!?]{0,48}?\b(?:nicht|nichts)\b")
_FOREIGN_WORDS = _w(
    "ignora ignore ignoriere ignorieren ignorar ignorer olvida oublie dimentica vergiss instrucciones"
    " istruzioni anweisungen consignes usuario utilisateur utente benutzer nutzer"
)
"""ASCII words that make an ASCII text worth the other languages' patterns (a text that is not
ASCII is always worth them)."""
_FOREIGN_MESSAGES = {"hidden.override": _OVERRIDE, "hidden.secrecy": _SECRECY}
_MIXED_MESSAGE = "a word mixing Latin letters with Cyrillic or Greek look-alikes"


def _foreign(folded: str) -> Iterator[tuple[str, tuple[int, int]]]:
    """(check, span) of each instruction of the foreign lexicon in the folded text. Each pattern
    runs only where one of the words it needs is a substring (a test in C, where the pattern
    would try every character)."""
    if any(stem in folded for stem in _FOREIGN_OVERRIDE_NEEDS):
        for m in itertools.islice(_FOREIGN_OVERRIDE.finditer(folded), 8):  # a few say enough
            yield "hidden.override", m.span()
    if not any(stem in folded for stem in _FOREIGN_USER_NEEDS):
        return
    for user in itertools.islice(_FOREIGN_USER.finditer(folded), 16):
        begin, end = _sentence_around(folded, *user.span())
        begin, end = max(begin, user.start() - 160), min(end, user.end() + 160)  # bounded work per name
        hush = _FOREIGN_HUSH.search(folded, begin, end) or _FOREIGN_HUSH_AFTER.search(folded, begin, end)
        if hush is not None:
            yield "hidden.secrecy", (min(hush.start(), user.start()), max(hush.end(), user.end()))
            return


_FIRST: dict[str, list[tuple[int, _Phrase]]] = {}
"""Per first word, the phrases it starts, in `_PHRASES` order, each with its index there."""
for _n, _phrase in enumerate(_PHRASES):
    for _word in _phrase.steps[0][0]:
        _FIRST.setdefault(_word, []).append((_n, _phrase))


def _match(words: list[str], i: int, phrase: _Phrase) -> int | None:
    """The index of the last word of `phrase` starting at word `i`, within its sentence, or None."""
    at = i
    for wanted, gap in phrase.steps[1:]:
        for j in range(at + 1, min(len(words), at + 2 + gap)):
            if words[j] in wanted:
                at = j
                break
            if words[j] in _BOUNDARY:
                return None
        else:
            return None
    return at


# ---------------------------------------------------------------------------------------------
# A definition's texts are joined with newlines (a sentence boundary, so no phrase spans two
# texts) and every pattern runs once over the whole: per-call overhead, not text, is what a
# scan of small descriptions costs.

_TOKEN = re.compile(r"\w+(?:'t)?|[.!?](?=\s)|\n")
# `_TOKEN.findall` of ASCII text without control characters, in C passes (the pattern, tried at
# each character, costs several times as much): a `'t` that ends a word marked (`\x06`) and cut
# off from what follows, a sentence's end cut off from both sides and any other `.!?` made a cut
# (`\0`), a newline cut off, then every byte that is no word character, cut or mark made a cut,
# and the text split at the cuts.
_INNER_MARK = re.compile(r"[.!?](?!\s)")  # a class first, a literal replacement: both in C
_TOKEN_BYTES = bytes(
    c if (chr(c).isascii() and chr(c).isalnum()) or chr(c) in "_.!?\n" else ord("'") if c == 6 else 0
    for c in range(256)
)


def _plain_tokens(folded: str) -> list[str]:
    """`_TOKEN.findall(folded)` of ASCII text without control characters."""
    if "'t't" in folded:  # a `'t` right after one that ends a word starts none: the pattern knows
        return _TOKEN.findall(folded)
    if "'t" in folded:
        folded = _APOSTROPHE_T.sub("\x06t\0", folded)
    folded = _INNER_MARK.sub("\0", folded)
    for end in ".!?\n":  # sentence ends, all of them now
        if end in folded:
            folded = folded.replace(end, f"\0{end}\0")
    return list(filter(None, folded.encode("ascii").translate(_TOKEN_BYTES).decode("ascii").split("\0")))


_BOUNDARY = frozenset(".!?\n")
# Most texts name no credential at all. Every alternative of `_CREDENTIAL` but one holds one of
# these words whole (a run of letters and digits: `.aws/` holds `aws`, `claude_desktop_config.json`
# `config`, `application_default_credentials.json` `credentials`); the one holds `id_` (`_Scan.run`
# tests for it: `id` need not be whole, `éid_rsa` is one run).
_CREDENTIAL_WORDS = _w(
    "ssh aws netrc pgpass git npmrc pypirc docker kube gnupg config mcp etc bash zsh env credentials"
)
# `_ENCODED` needs 64 characters of its class in a row: with the bytes of its class mapped to `a`
# (the rest to a space, the ASCII control characters aside), a run of 64 is one substring test, so
# the pattern runs only on text that could match. The same bytes say whether an ASCII text holds a
# control character (mapped to NUL), the only part of `_SUSPECT` it can hold.
_CLASSES = bytes(
    ord("a") if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "+/")
    else 0 if _ASCII_CONTROL.match(chr(c))
    else ord(" ")
    for c in range(256)
)  # fmt: skip
_ENCODED_RUN = b"a" * 64
_SHORT_RUN = b"a" * 16
_SHORT_ENCODED = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{16,63}={0,2}(?![A-Za-z0-9+/=])")
_FILE_ACTS = (
    _w("cat copy copies copying paste pasting print dump contents content open opens opening reads includes passes")
    | _ACTION
    | _WRITE
)
_DECODED_MESSAGE = "base64 that decodes to text the scan flags"
# A short run is decoded only where the text speaks of decoding: the model must be told to.
_DECODE_WORDS = _w("decode decoded decoding decodes base64 b64 encoded deobfuscate")


def _json(run: str) -> bool:
    """Whether a base64 run encodes JSON (a JSON Web Token's parts): data, not words for the model."""
    return run.startswith("eyJ")


def _decodes_to_findings(run: str) -> bool:
    """Whether `run` is base64 of UTF-8 text that the scan flags: a short run is far more often an
    id or a key than a payload, so only what it says counts."""
    try:
        text = base64.b64decode(run + "=" * (-len(run) % 4), validate=True).decode("utf-8")
    except ValueError:  # binascii.Error and UnicodeDecodeError are both ValueErrors
        return False
    if not text.isprintable():
        return False
    state = _Scan("tool", {"description": text}, _NO_NAMES, nested=True)
    state.run()
    return bool(state.out)


# The pieces of folded ASCII text (or of a skeleton, `_fold`): its letters and digits kept, the
# rest made spaces, then split.
_PIECE_BYTES = bytes(c if (chr(c).isascii() and chr(c).isalnum()) or chr(c) == "ª" else ord(" ") for c in range(256))
_PIECE = re.compile(r"[^\W_]+")
_APOSTROPHE_T = re.compile(r"'(?<=\w')t")  # the literal first: the engine skips to each `'`


def _present(folded: str, latin: bool, watched: frozenset[str]) -> frozenset[str]:
    """The runs of letters and digits in the folded text (`send` and `email` in `send_email`) that
    some check looks for (`watched`): what decides which checks run. A word any check looks for is
    one such run. Only the watched ones are kept: the checks ask only about them, and a set of the
    few costs less to make than one of every word. `latin`: the text is ASCII or a skeleton
    (`_fold`), whose runs, made in C, are the folded text's where the watched words are ASCII."""
    if "'" in folded and "'t" in folded:  # tokens end at `'t` (`don't`): what follows is a word of its own
        folded = _APOSTROPHE_T.sub("'t ", folded)
    if latin:
        return watched.intersection(folded.encode("latin-1").translate(_PIECE_BYTES).decode("latin-1").split())
    return watched.intersection(_PIECE.findall(folded))


def _stems(words: frozenset[str]) -> frozenset[str]:
    """The word runs a token holds (`don't` holds `don`): what `_present` sees of it."""
    return frozenset(word.split("'", 1)[0] for word in words)


# Per first word (as a run), the phrases it starts, with every later step's words as runs: a phrase
# can match only where each of its steps has a word present, which few texts have.
_STARTS: dict[str, list[tuple[int, tuple[frozenset[str], ...]]]] = {}
for _n, _phrase in enumerate(_PHRASES):
    for _word in _stems(_phrase.steps[0][0]):
        _STARTS.setdefault(_word, []).append((_n, tuple(_stems(words) for words, _ in _phrase.steps[1:])))


_START_WORDS = frozenset(_STARTS)
_WATCHED = (
    _CREDENTIAL_WORDS
    | _START_WORDS
    | frozenset().union(*(words for starts in _STARTS.values() for _, steps in starts for words in steps))
    | _ACTION
    | _SECRETS
    | _SECRET_TAILS
    | _WRITE  # `_STRONG_WRITE` is within it
    | _ADDRESSEES
    | _FOREIGN_WORDS
    | _DECODE_WORDS
    | _FILE_ACTS
)
"""Every word run a check asks `_Scan.present` about (with another server's tools' last pieces, `_Names`)."""
assert _STRONG_WRITE <= _WRITE


def _live(present: frozenset[str]) -> set[int]:
    """The phrases (their indexes in `_PHRASES`) with a word of each of their steps in the text:
    no other can match, and most texts have none."""
    live: set[int] = set()
    for word in present.intersection(_START_WORDS):
        for n, steps in _STARTS[word]:
            for words in steps:
                if present.isdisjoint(words):
                    break
            else:
                live.add(n)
    return live


Spot = tuple[str, bool]
"""Where a text is in its definition (`inputSchema.properties.x.description`), and whether it is
written for a reader (a description, a title, a schema string) rather than a name or a key."""


class _Scan:
    """One definition's joined texts, folded, and the findings so far."""

    # Made when a check first needs them (most definitions need none): class-level until then.
    spots: Sequence[Spot] = ()
    starts: Sequence[int] = ()
    _tokens: list[str] | None = None
    _spans: list[tuple[int, int]] | None = None
    _network: bool | None = None

    def __init__(self, kind: str, definition: Mapping[str, Any], others: _Names, *, nested: bool = False) -> None:
        self.kind = kind
        self.definition = definition
        self.others = others
        self.out: list[Finding] = []
        texts = _texts(kind, definition, None)
        joined = "\n".join(texts)
        if len(joined) > MAX_TEXT and _too_long(texts):  # else no text, and not all, can be too long
            texts = _capped(texts)
            joined = "\n".join(texts)
        self.texts = texts
        self.joined = joined
        # `suspect`: whether `_SUSPECT` could find something; `encoded`: whether `_ENCODED` could;
        # `present`: the watched word runs (`_present`).
        if joined.isascii():  # the common case: one C pass over its bytes answers two pre-tests
            self.folded = folded = joined.lower()
            self.where = None
            classes = folded.encode("ascii").translate(_CLASSES)  # lower case or not, the same classes
            # `find`, not `in`: `bytes.__contains__` tries its operand as an int first, at the cost of
            # an exception raised and dropped.
            self.suspect = classes.find(b"\0") >= 0
            self.present = _present(folded, True, others.watched)
        else:
            skeleton: list[str] | None = [] if others.latin else None
            folded, where = _fold(joined, skeleton)
            self.folded, self.where = folded, where
            data = joined.encode("utf-8", "surrogatepass")
            classes = data.translate(_CLASSES)
            self.suspect = _SUSPECT_UTF8.search(data) is not None
            if skeleton is None:  # a name that is not ASCII is watched for: the pattern finds the runs
                self.present = _present(folded, False, others.watched)
            else:
                self.present = _present("".join(skeleton), True, others.watched)
        self.encoded = classes.find(_ENCODED_RUN) >= 0
        self.classes = classes
        self.letters = (
            frozenset(ch for run in _NON_ASCII.findall(joined) for ch in run if ch.isalpha())
            if self.where is not None
            else frozenset()
        )
        self.nested = nested  # a decoded payload's scan: it decodes nothing further

    def _acts_on_files(self) -> bool:
        """Whether the definition asks for something to be done with a file it names (read, pass,
        send, paste its contents...), or is in another language, where the verbs are not known:
        naming `~/.aws/credentials` as where a tool finds its profile is documentation."""
        return self.where is not None or not self.present.isdisjoint(_FILE_ACTS)

    def network(self) -> bool:
        """Whether the tool plausibly uses the network (asked only of a text with a URL)."""
        if self._network is None:
            self._network = self.kind == "tool" and _networked(self.definition)
        return self._network

    def place(self) -> None:
        """Each text's place and offset in the joined string, made on the first finding: most
        definitions have none."""
        if self.spots or not self.texts:
            return
        spots: list[Spot] = []
        _texts(self.kind, self.definition, spots)  # the same walk, this time naming each text's place
        self.spots = spots[: len(self.texts)]
        starts = []
        at = 0
        for text in self.texts:
            starts.append(at)
            at += len(text) + 1
        self.starts = starts

    def locate(self, start: int, end: int, *, folded: bool = True) -> tuple[int, int, int]:
        """Which text a span of the folded (or joined) string lies in, and the span within it."""
        if folded and self.where is not None:
            start, end = self.where[start], (self.where[end - 1] + 1 if end > start else self.where[start])
        self.place()
        n = bisect.bisect_right(self.starts, start) - 1
        return n, start - self.starts[n], min(end - self.starts[n], len(self.texts[n]))

    def add(self, check: str, severity: Severity, span: tuple[int, int], message: str, *, folded: bool = True,
            prose_only: bool = True) -> None:  # fmt: skip
        n, start, end = self.locate(*span, folded=folded)
        where, prose = self.spots[n]
        if prose_only and not prose:
            return
        self.out.append(Finding(check, severity, where, start, end, _excerpt(self.texts[n][start:end]), message))

    def span(self, first: int, last: int) -> tuple[int, int]:
        """The folded text's span from the start of token `first` to the end of token `last`."""
        if self._spans is None:  # positions only once something matched: most definitions match nothing
            self._spans = [m.span() for m in _TOKEN.finditer(self.folded)]
        return self._spans[first][0], self._spans[last][1]

    def tokens(self) -> list[str]:
        """The folded text's words and sentence ends (`_TOKEN`), made when a check needs their order."""
        if self._tokens is None:
            plain = self.where is None and not self.suspect  # ASCII, no control characters
            self._tokens = _plain_tokens(self.folded) if plain else _TOKEN.findall(self.folded)
        return self._tokens

    def run(self) -> None:
        if self.suspect:
            self._unicode()
        folded = self.folded
        # Each pattern runs only where the word set (or a substring test) says it could match.
        if not self.present.isdisjoint(_CREDENTIAL_WORDS) or "id_" in folded:
            for m in _CREDENTIAL.finditer(folded) if self._acts_on_files() else ():
                self.add("exfil.credential_path", Severity.HIGH, m.span(), "a credential file or directory",
                         prose_only=False)  # fmt: skip
        if "<" in folded or "[" in folded:
            for m in _MARKER.finditer(folded):
                self.add("hidden.marker", Severity.HIGH, m.span(), "a tag or role marker addressed to the model")
        if not self.present.isdisjoint(_ADDRESSEES) and ":" in folded:
            for m in _ADDRESSED.finditer(folded):
                self.add("hidden.marker", Severity.MEDIUM, m.span(), "a line addressed to the model")
        # Letters that are not ASCII (not a dash or an emoji): look-alikes in a Latin word, another language.
        letters = self.letters
        if letters and not letters.isdisjoint(_CONFUSABLE):
            for m in _MIXED.finditer(self.joined):
                self.add("unicode.mixed_script", Severity.MEDIUM, m.span(), _MIXED_MESSAGE, folded=False,
                         prose_only=False)  # fmt: skip
                break
        if self.encoded:
            for m in _ENCODED.finditer(self.joined):
                run = m.group()
                if not run.islower() and not run.isupper() and any(c.isdigit() for c in run) and not _json(run):
                    self.add("hidden.encoded", Severity.MEDIUM, m.span(), "a long encoded payload", folded=False)
        elif not self.nested and not self.present.isdisjoint(_DECODE_WORDS) and self.classes.find(_SHORT_RUN) >= 0:
            for m in itertools.islice(_SHORT_ENCODED.finditer(self.joined), 8):
                if _decodes_to_findings(m.group()):
                    self.add("hidden.encoded", Severity.HIGH, m.span(), _DECODED_MESSAGE, folded=False)
        if "@" in folded or "+" in folded:
            self._recipients()
        self._words()
        if letters or not self.present.isdisjoint(_FOREIGN_WORDS):
            said = {f.check for f in self.out}  # French "ignore ... instructions" is the English phrase's too
            for check, span in _foreign(folded):
                if check not in said:
                    self.add(check, Severity.HIGH, span, _FOREIGN_MESSAGES[check])

    def _unicode(self) -> None:
        text = self.joined
        for match in _SUSPECT.finditer(text):
            # A run can mix kinds (a tag sequence after a zero-width space): one finding per kind's stretch.
            start = match.start()
            while start < match.end():
                kind = _kind_of(text[start])
                end = start + 1
                while end < match.end() and _kind_of(text[end]) == kind:
                    end += 1
                if not _benign_run(text, start, end, kind):
                    severity, message = _UNICODE[kind]
                    self.add(kind, severity, (start, end), message, folded=False, prose_only=False)
                start = end

    def _recipients(self) -> None:
        folded = self.folded
        for m in _AT_DOMAIN.finditer(folded):
            domain = m.group()[1:]
            tld = domain.rsplit(".", 1)[-1]
            if not tld.isalpha() or len(tld) < 2 or domain in _RESERVED_DOMAINS or domain.endswith(_RESERVED_TLDS):
                continue
            local = m.start()
            while local > 0 and m.start() - local < 64 and folded[local - 1] in _LOCAL_PART:
                local -= 1
            if local < m.start() and not _example(folded, local):
                self.add("exfil.recipient", Severity.HIGH, (local, m.end()), "a hard-coded e-mail address")
        for m in _PHONE.finditer(folded):
            if sum(c.isdigit() for c in m.group()) >= 9 and not _example(folded, m.start()):
                self.add("exfil.recipient", Severity.HIGH, m.span(), "a hard-coded phone number")

    def _words(self) -> None:
        folded = self.folded
        present = self.present
        span = self.span
        if live := _live(present):
            words = self.tokens()
            # Each first word present, found by `list.index` (in C): most words of a text start no phrase.
            for word in _FIRST.keys() & set(words):
                phrases = [phrase for n, phrase in _FIRST[word] if n in live]
                for i in _indices(words, word) if phrases else ():
                    for phrase in phrases:
                        last = _match(words, i, phrase)
                        if last is not None:
                            self.add(phrase.check, phrase.severity, span(i, last), phrase.message)
        if not present.isdisjoint(_ACTION) and (
            not present.isdisjoint(_SECRET_WORDS)
            or (not present.isdisjoint(_SECRET_HEADS) and not present.isdisjoint(_SECRET_TAILS))
        ):  # a secret is one of `_SECRET_WORDS` or a head and a tail: common words, seldom together
            for first, last in _secrets(self.tokens(), present):
                self.add("exfil.secret", Severity.HIGH, span(first, last), "a secret the text asks to pass along")
        if ":" in folded and "http" in folded and not self.network():  # only a text with a URL: most have none
            for m in _URL.finditer(folded):
                sentence = set(_TOKEN.findall(folded, *_sentence_around(folded, *m.span())))
                if not sentence.isdisjoint(_NET_VERBS) or _templated(folded, m):
                    self.add("exfil.url", Severity.MEDIUM, m.span(), "a URL to send to, in a tool without network use")
        if self.others.always or not present.isdisjoint(self.others.lasts):  # else no name can be there
            self._shadowing(present)

    def _shadowing(self, present: frozenset[str]) -> None:
        """Another server's tool named: a word that is the name (or ends `_name`, as in
        `mcp_tool_send_email`), or for a name with `-` or `.`, that text between word boundaries."""
        others, folded = self.others, self.folded
        by_last = others.by_last
        named: set[str] = set()
        for piece in present & others.lasts:
            for name, needs in by_last[piece]:
                if needs <= present and name in folded:  # its other pieces too, before a search of the text
                    named.add(name)
        for name in others.always:
            if name in folded:
                named.add(name)
        for name in named:
            for m in re.finditer(rf"(?<![\w.-])(?:\w*_)?{re.escape(name)}(?![\w-])", self.folded):
                self.add("shadow.other_tool", Severity.HIGH, m.span(), "names another server's tool")


def _templated(folded: str, url: re.Match[str]) -> bool:
    """Whether a URL has a slot for the model to fill (`{conversation}`, `<the last message>`)."""
    return "{" in url.group() or folded[url.end() : url.end() + 1] == "<"


def _example(folded: str, at: int) -> bool:
    """Whether the text just before `at` introduces an example (`e.g.`, `for example`, `such as`):
    a format shown to the model, not a recipient to use."""
    before = folded[max(0, at - 24) : at]
    return any(marker in before for marker in _EXAMPLE_MARKERS)


_EXAMPLE_MARKERS = ("e.g", "example", "such as", "for instance", "like ")


def _sentence_around(text: str, start: int, end: int) -> tuple[int, int]:
    """The bounds of the sentence holding text[start:end] (a URL's own dots do not end it)."""
    begin = max(text.rfind(mark, 0, start) for mark in _ENDS) + 1
    after = [at for mark in _ENDS if (at := text.find(mark, end)) >= 0]
    return begin, min(after, default=len(text))


_ENDS = ("\n", ". ", "! ", "? ")


def _secrets(words: list[str], present: frozenset[str]) -> Iterator[tuple[int, int]]:
    """(first, last) word of each secret named in a sentence that also asks for an action on it.

    The words that could begin one, and the sentence ends, are found by `list.index` (in C): a
    text holds few of either, and the words between are looked at only as a slice."""
    starts = sorted(i for word in present.intersection(_SECRETS) for i in _indices(words, word))
    if not starts:
        return
    ends = sorted(i for mark in _BOUNDARY for i in _indices(words, mark))
    acting: dict[int, bool] = {}  # per sentence (by its first word), whether it asks for an action
    for i in starts:
        n = bisect.bisect_left(ends, i)  # `i` is no end: ends[n] is the first after it
        begin = ends[n - 1] + 1 if n else 0
        stop = ends[n] if n < len(ends) else len(words)
        if (act := acting.get(begin)) is None:
            act = acting[begin] = not _ACTION.isdisjoint(words[begin:stop])
        if not act or not _NEG.isdisjoint(words[max(begin, i - 2) : i]):  # "never the private key"
            continue
        if words[i] in _SECRET_WORDS:
            yield i, i
        elif i + 1 < stop and words[i + 1] in _SECRET_TAILS:  # `words[i]` is one of `_SECRET_HEADS`
            yield i, i + 1


def _indices(words: list[str], word: str) -> list[int]:
    """Where `word` is in `words`, in order (by `list.count` and `list.index`, in C, with no
    exception raised and caught at the end)."""
    found = []
    i = -1
    for _ in range(words.count(word)):
        i = words.index(word, i + 1)
        found.append(i)
    return found


@dataclass(frozen=True, slots=True)
class _Names:
    """Other servers' tool names worth looking for, by their last piece (`email` for `send_email`,
    `send` for `mail.send`): a text that names one holds that piece whole (the name's end is no
    word character, the piece's start follows a separator or the name's start, which the name's
    pattern puts after no word character or a `_`), so a text holding none is done in one set
    operation. So it holds the name's other pieces whole (`_needs`), asked before the text is
    searched for the name."""

    by_last: Mapping[str, tuple[tuple[str, frozenset[str]], ...]] = field(default_factory=dict)
    """Last piece -> (name, the pieces a text naming it holds), in name order."""
    lasts: frozenset[str] = frozenset()
    """The keys of `by_last`, as a set (a set operation with a set runs over the smaller one)."""
    always: tuple[str, ...] = ()
    """The names without a letter or digit: always searched."""
    watched: frozenset[str] = _WATCHED
    """`_WATCHED` and every piece of `by_last`: the word runs of a text worth keeping."""
    latin: bool = True
    """Whether every watched word is ASCII: then `_present` can work on a text's skeleton (`_fold`)."""


_NO_NAMES = _Names()


@functools.lru_cache(maxsize=64)
def _distinct(others: frozenset[str]) -> _Names:
    names = {n.lower()[:128] for n in others if any(c in n for c in "_-.")}
    by_last: dict[str, list[tuple[str, frozenset[str]]]] = {}
    always: list[str] = []
    watched = set(_WATCHED)
    for name in sorted(names):
        if pieces := _PIECE.findall(name):
            needs = _needs(name, pieces)
            by_last.setdefault(pieces[-1], []).append((name, needs))
            watched.update(needs)
        else:
            always.append(name)
    return _Names(
        {piece: tuple(names) for piece, names in by_last.items()},
        frozenset(by_last),
        tuple(always),
        frozenset(watched),
        all(word.isascii() for word in watched),
    )


def _needs(name: str, pieces: list[str]) -> frozenset[str]:
    """The pieces a text that names `name` holds whole (as `_present` finds them): each of its
    pieces, as for the last (`_Names`), but for two. A name with `'` gives its last only: `_present`
    splits a text's runs after `'t`. A first piece that begins with `t` is left out: in a text,
    the name can follow `x'` (`x'tab_c` names `tab_c`), and that `t` ends a run there."""
    if "'" in name:
        return frozenset(pieces[-1:])
    return frozenset(pieces[1:] if pieces[0].startswith("t") else pieces)


def _distinctive(others: Collection[str]) -> _Names:
    """The names worth looking for, as (one word with `_`, with `-` or `.`): a plain word such as
    "search" is prose. The last answer is kept by identity: a catalog passes one set per server."""
    if not others:
        return _NO_NAMES
    global _LAST_OTHERS
    last = _LAST_OTHERS  # one tuple, replaced whole: a reader never sees one set with another's names
    if last is not None and last[0] is others:
        return last[1]
    names = _distinct(others if isinstance(others, frozenset) else frozenset(others))
    _LAST_OTHERS = (others, names)
    return names


_LAST_OTHERS: tuple[Collection[str], _Names] | None = None


_PROSE_KEYS = frozenset({"description", "title", "$comment", "default", "examples", "enum", "const"})


def _mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """`isinstance(value, Mapping)`, answered without the ABC machinery for JSON's dicts and nulls."""
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def _texts(kind: str, definition: Mapping[str, Any], spots: list[Spot] | None) -> list[str]:
    """The definition's texts in a fixed order; with `spots`, each one's place too (a second walk,
    made only when something was found: building the paths is most of a walk's cost)."""
    texts = []
    for key in ("name", "uriTemplate", "title", "description"):
        if isinstance(value := definition.get(key), str):
            texts.append(value)
            if spots is not None:
                spots.append((key, key in ("title", "description")))
    annotations = definition.get("annotations")
    if _mapping(annotations) and isinstance(title := annotations.get("title"), str):
        texts.append(title)
        if spots is not None:
            spots.append(("annotations.title", True))
    if kind == "prompt" and isinstance(arguments := definition.get("arguments"), list):
        for n, argument in enumerate(arguments[:256]):
            if isinstance(argument, Mapping):
                for key in ("name", "title", "description"):
                    if isinstance(value := argument.get(key), str):
                        texts.append(value)
                        if spots is not None:
                            spots.append((f"arguments[{n}].{key}", key != "name"))
    if kind == "skill":  # a skill's SKILL.md frontmatter, as its listing carries it: every string is prose
        _schema_texts(definition.get("frontmatter"), "frontmatter" if spots is not None else "", texts, spots, True)
    for key in ("inputSchema", "outputSchema"):
        _schema_texts(definition.get(key), key if spots is not None else "", texts, spots)
    return texts


def _schema_texts(
    node: Any, where: str, texts: list[str], spots: list[Spot] | None, prose: bool = False, depth: int = 0
) -> None:
    """A schema's prose (descriptions, titles, enums, defaults, examples) and property names;
    not its keywords' values (`type`, `format`, `pattern`), which are no text for a reader.
    `_MAX_DEPTH` deep at most (a schema nested deeper is not examined past it)."""
    if depth > _MAX_DEPTH:
        return
    if type(node) is dict:
        for key, value in node.items():
            kind = type(value)
            if kind is str:
                if prose or key in _PROSE_KEYS:
                    texts.append(value)
                    if spots is not None:
                        spots.append((f"{where}.{key}", True))
            elif kind is dict:
                inner = prose or key in _PROSE_KEYS
                if not inner and key in _NAMED:
                    names = [name for name in value if type(name) is str]
                    texts.extend(names)
                    if spots is not None:
                        spots.extend((f"{where}.{key}.{name}", False) for name in names)
                _schema_texts(value, f"{where}.{key}" if spots is not None else "", texts, spots, inner, depth + 1)
            elif kind is list:
                inner = prose or key in _PROSE_KEYS
                if not inner and all(type(item) is str for item in value):
                    continue  # `required`, a `type` list: names, no text for a reader
                _schema_texts(value, f"{where}.{key}" if spots is not None else "", texts, spots, inner, depth + 1)
    elif type(node) is list:
        for n, item in enumerate(node):
            if type(item) is str:
                if prose:
                    texts.append(item)
                    if spots is not None:
                        spots.append((f"{where}[{n}]", True))
            elif type(item) in (dict, list):
                _schema_texts(item, f"{where}[{n}]" if spots is not None else "", texts, spots, prose, depth + 1)


_NAMED = frozenset({"properties", "patternProperties"})


def _networked(definition: Mapping[str, Any]) -> bool:
    """Whether the tool plausibly talks to the network: its annotations say so, or its name, its
    description or a parameter does (a `url` property, a `uri` format)."""
    annotations = definition.get("annotations")
    if isinstance(annotations, Mapping) and annotations.get("openWorldHint") is False:
        return False
    parts = [value[:MAX_TEXT] for key in ("name", "description") if isinstance(value := definition.get(key), str)]
    schema = definition.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if isinstance(properties, Mapping):
        for name, prop in list(properties.items())[:256]:
            if isinstance(name, str):
                parts.append(name[:128])
            if isinstance(prop, Mapping) and prop.get("format") in ("uri", "url", "iri", "uri-reference"):
                return True
    # The words, not a URL in the text: a link is what the check looks at, not a sign of network use.
    return not _NET_WORDS.isdisjoint(_SPLIT.split(_URL.sub(" ", " ".join(parts).lower())))


_SPLIT = re.compile(r"[^a-z0-9]+")


def _capability(definition: Mapping[str, Any], scan: _Scan) -> None:
    description = definition.get("description")
    if not isinstance(description, str):
        return
    if _WRITE.isdisjoint(scan.present):  # neither check's verbs (`_STRONG_WRITE` is within `_WRITE`)
        return
    annotations = definition.get("annotations")
    annotations = annotations if _mapping(annotations) else {}
    name = definition.get("name")
    first = _FIRST_PART.split(name[:128], maxsplit=1)[0].lower() if isinstance(name, str) else ""
    if annotations.get("readOnlyHint") is True:
        verbs, check, message = _WRITE, "capability.read_only", "marked read-only, but the description writes or sends"
    elif first in _READ_NAMES and annotations.get("destructiveHint") is not True:
        verbs, check, message = (
            _STRONG_WRITE,
            "capability.name",
            "named for reading, but the description deletes or sends",
        )
    else:
        return
    if verbs.isdisjoint(scan.present):  # the description's words are among the definition's
        return
    text = description[:MAX_TEXT]
    folded, where = _fold(text)
    if verbs.isdisjoint(_WORD.findall(folded)):
        return
    words = [(m.group(), m.start(), m.end()) for m in _WORD.finditer(folded)]
    for i, (word, s, e) in enumerate(words):
        if word in verbs and not any(words[j][0] in _NEG for j in range(max(0, i - 3), i)):
            span = (s, e) if where is None else (where[s], where[e - 1] + 1)
            excerpt = _excerpt(text[span[0] : span[1]])
            scan.out.append(Finding(check, Severity.MEDIUM, "description", *span, excerpt, message))
            return


_FIRST_PART = re.compile(r"[_\-.\s]|(?<=[a-z])(?=[A-Z])")


def scan(kind: str, definition: Mapping[str, Any], *, others: Collection[str] = ()) -> tuple[Finding, ...]:
    """The findings of one definition, in the order of its texts.

    Args:
        kind: `tool`, `prompt`, `resource_template` or `skill` (an entry of `skills/list`, SEP-2640:
            its frontmatter's texts, its `name` and `description` among them).
        definition: The definition as the server sent it, as JSON data (camelCase keys).
        others: Lower-case names of the tools of *other* servers: a description naming one is shadowing.
            Only distinctive names count (with `_`, `-` or `.`), so that "search" or "fetch" in prose does not.
    """
    state = _Scan(kind, definition, _distinctive(others))
    state.run()
    if kind == "tool":
        _capability(definition, state)
    if not state.out:
        return ()
    state.place()  # where only `_capability` found something
    order = {where: n for n, (where, _) in reversed(list(enumerate(state.spots)))}
    state.out.sort(key=lambda f: (order.get(f.where, 0), f.start))
    return tuple(state.out[:_MAX_FINDINGS])


def _too_long(texts: list[str]) -> bool:
    return sum(map(len, texts)) > MAX_TOTAL - len(texts) or any(len(text) > MAX_TEXT for text in texts)


def _capped(texts: list[str]) -> list[str]:
    """Each text cut to `MAX_TEXT`, and all of them to `MAX_TOTAL` together."""
    kept: list[str] = []
    budget = MAX_TOTAL
    for text in texts:
        if budget <= 0:
            break
        kept.append(text[: min(MAX_TEXT, budget)])
        budget -= len(kept[-1]) + 1
    return kept

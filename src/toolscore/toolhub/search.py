"""The catalog's search index behind `search_tools`: BM25F over a tool's fields; pure.

Theory of operation. Each tool is a document of fields, each with a weight: its name (split on
`_`, `-` and case, stemmed and as written), its title, the first sentence of its description, the
whole description, its parameters' names and descriptions, its annotations, its capability tags
and its server's words (its name, and a prefix nearly all its tool names share), which count
there only, not again in the other fields.
BM25F folds a term's frequency in every field into one weighted frequency, each field normalised
by its own average length, and saturates that once (k1), so a word repeated in the description
cannot outweigh it in the name. The per-(term, tool) contribution does not depend on the query,
so it is computed once when the index is built; a search only adds up the postings of its own
terms, a few thousand additions at 2,000 tools.

A phrasal verb in a query counts as the verb it means (`turn it off`: `disable`, `take back`:
`undo`), a time of day (`8am`, `17:00`) as `time`, a zone's abbreviation (`PST`) as `timezone`, an
`owner/name` pair (`acme/widgets`) as `repository`, a commit's hash (`4f2a9c1`) as `commit`, a name
out of code (`retry_with_backoff`, `refund()`) as `code`, a quote (`'Order placed'`) as `text` and
not by its words, and the number inside a name (`base64`, `sha256`) as a word, where a bare number
counts not at all, an HTML element (`<img>`) as `element` and a point (`x 40 y 80`) as `position`.
What was done (`gists I made`), a passive `get` (`getting pinged`) and a pronoun (`them`, `their`)
ask for nothing, a past form in a question about the past (`what changed`) counts by the word itself
only (the changes asked about, not a tool that changes), and two names or more (`Dana Liu`,
`Payments`) add a small `entity`. A request says what to do in its main clause; its other words
count at half: those of a subordinate clause (`close PR 9 without merging`, `so it opens a PR`),
which say why, on what condition or what not to do, and those of a sentence of context beside a
request (`The CI build went red. Show me the error output`), which say which things, not what to do
with them.
A query word also looks for its synonyms (`synonyms.py`) and its agent noun or verb (`indexer`
for `index`, `index` for `indexer`) at a discount, and each query word counts once per tool, by its
best match, so a tool does not win by matching many synonyms of one word. A question word adds a
small, fixed intent (`who` asks for people, `when` for a time, `which branches` for a list), worth
less than any word of the query.

The best fifty by that sum are then re-scored by two factors (tools past them come after them,
so any k gets a prefix of one order): coverage, the share of the query's words a tool matched (a
synonym's match counting half), so a tool that answers every word of the query beats one that
repeats one word in every field; and a prior for a tool whose own name the query covers, verb and
object (`delete_file` for "remove a file"), so the tool named for the task comes before the tools
that mention it. Both need only membership tests in the postings already fetched: fifty tools
times the query's words. Two demotions halve a score: a tool whose name acts (`cookie_set`,
`convert_time`, `repl_run_code`: a verb of change, running or converting) with a verb the query
reaches by none of its words, synonyms or relatives, when the query asks to read (a question, or one
that opens with `show`, `list`, `find`...), so "which cookies does the site have" gets the tool
that lists them before the one that sets them; and a tool whose title or description says it is
deprecated, so its replacement comes first. Ranking is deterministic: equal scores go by tool name.

Where the constants come from: the field weights, k1 and b were set by hand before the golden set
existed; the discounts, the coverage power and the prior were tried on the golden set's tuning half
only (benchmarks/retrieval.py), where the results barely moved around these values, so round
values were kept rather than the best of each grid. So were the two demotions' (0.5; the tuning
data's MRR was 0.808-0.823 between 0.3 and 0.7), and their word lists are general English, not
any query's. The synonym's discount was tried again on all the tuning parts once the groups had
grown (`_SYNONYM`): it moved from 0.5 to 0.7. Then every one of these constants was tried again on
all four tuning parts (227 queries), one at a time around its value and in pairs that act together
(k1 and the description's weight, a field's weight and its b, the coverage power and a synonym's
share of coverage, the synonym's and the relative's discounts, the prior and the coverage power):
the title's weight moved from 2 to 4 (`tune+` MRR 0.743 -> 0.746, a plateau from 3.5 to 6, no part
losing); nothing else gained the tuning data 0.003 of MRR with no part losing more, and the one
pair that did (k1 1.5 with the description at 0.75: +0.004) lost on the parts not tuned on, so
every other value stayed (re-tried with the title at 4, none gained 0.003 either); each constant's
note gives its figures (`tune+` MRR with the title at 2, 0.743 at the values kept).
"""

from __future__ import annotations

import heapq
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from toolscore.toolhub.capabilities import Tagged
from toolscore.toolhub.synonyms import INTENTS, related, stems
from toolscore.toolhub.text import MAX_TEXT_CHARS, STOPWORDS, compounds, stem, terms

__all__ = ["FIELD_WEIGHTS", "MAX_QUERY_WORDS", "Hit", "SearchIndex"]

MAX_QUERY_WORDS = 32
"""Words of a query that count; the rest are ignored (a query is a few keywords)."""
FIELD_WEIGHTS: Mapping[str, float] = {
    "name": 3.0,
    "exact": 0.5,
    "title": 4.0,
    "summary": 1.0,
    "description": 1.0,
    "params": 0.8,
    "param_text": 0.4,
    "annotations": 0.5,
    "tags": 1.0,
    "server": 1.0,
}
"""How much a word counts in each field. The summary is the description's first sentence, which
says what the tool is for; it counts on top of the whole description. Set by hand, then tried
again on the tuning parts (`tune+` MRR, 0.743 with the title at 2): the title 1-2.5 0.742-0.743,
3-3.5 0.745, 4-6 0.746, a plateau where no part lost (4 queries rose, 3 fell, most of the gain one
query's 2 -> 1): moved from 2 to 4, a round value inside it, a little over the name's own words (a
title is the name written for people); the name 2.5-4 with it 0.745-0.746. The others moved
nothing by 0.003 and stay (with the title at 2; at 4 none of them gained 0.003 either): `exact`
0 0.715, 0.25 0.739, 0.75-1.5 0.742-0.743; `summary` 0 0.739, 0.5 0.742, 1.5-2 0.737;
`description` 0.5-0.8 0.744-0.746 (a few queries each way), 1.25-2 0.735-0.739; `params` 0.4
0.736, 0.6-1.2 0.740-0.742; `param_text` 0.1-0.3 0.741-0.744, 0.6-0.8 0.734-0.736; `name` 2-5,
`annotations` 0-1, `tags` and `server` 0.5-2 within 0.001."""
_B: Mapping[str, float] = {"name": 0.5, "exact": 0.5, "title": 0.5, "tags": 0.3, "server": 0.0, "annotations": 0.0}
"""Length normalisation per field (0.75 where unnamed): short fields barely vary in length. Tried
again, 0 to 1 (`tune+` MRR 0.743 here): `name`, `title`, `tags`, `server`, `annotations` within
0.0005; `exact` 0.741-0.742 elsewhere; `summary` 0.25 0.741, 0.9-1 0.741; `description` 0.25-0.5
0.739-0.740, 1.0 0.745 (`tune-extra` -0.006); `params` 0.25-0.5 0.738-0.740, 0.9-1 0.743;
`param_text` 0.25-0.5 0.736-0.738, 1.0 0.740. Kept."""
_K1 = 1.2
"""BM25's saturation. Tried again (`tune+` MRR): 0.6 0.728, 0.8 0.736, 1.0 0.740, 1.2-1.4 0.743, 1.5
0.746, 1.6-1.8 0.743-0.744, 2.0 0.742, 3.0 0.745: a spike at 1.5, no plateau; kept. With the
description's weight at 0.7-0.8, k1 1.4-1.6 gave 0.7465-0.7472 (+0.004; 7 tuning queries rose, 5
fell, no part lost 0.003), but the parts not tuned on lost (`held-out` MRR 0.773 -> 0.764, `fresh`
0.711 -> 0.695, all 976 queries 0.628 -> 0.626): dropped."""
_SYNONYM = 0.7
"""What a synonym's match is worth against the query word's own. 0.5 until the groups grew: with
today's groups the tuning data's MRR was 0.731 at 0.5, 0.738 at 0.6, 0.743 at 0.7, 0.750 at 0.9 and
0.746 at 1.0, every tuning part gaining from 0.5 to 0.7; a round value inside that plateau, short of
the word's own match, since a group's words share a sense, not every sense."""
_RELATIVE = 0.5
"""What a match of the word's agent noun or verb (`indexer`/`index`) is worth against its own
(`tune+` MRR 0.7427-0.7436 from 0.3 to 0.8, and no better with `_SYNONYM` at 0.6 or 0.8)."""
_INTENT = 0.3
"""What an intent's match (`who` -> people) is worth against a word of the query (`tune+` MRR: 0
0.741, 0.15-0.3 0.743, 0.45-0.6 0.745: one query up a place, two down one; kept)."""
_COVER_SYNONYM = 0.5
"""How much of a query word a match by synonym or relative covers (a match of the word itself: 1).
`tune+` MRR 0.725 at 0.3, 0.737 at 0.4, 0.743 at 0.5, 0.746 at 0.6 (`tune-3` -0.009; 11 queries
rose, 12 fell), 0.743-0.744 at 0.7-0.8; no better with the coverage power at 0.75 or 1.25, or the
synonym's discount at 0.6 or 0.8. Kept."""
_COVERAGE = 1.0
"""The power of the coverage factor: 0 leaves the sum alone, 1 scales it by the share covered
(`tune+` MRR 0.733 at 0.5, 0.744 at 0.75, 0.743 at 1, 0.734 at 1.25, 0.722 at 1.5, 0.706 at 2)."""
_NAME_PRIOR = 0.3
"""How much more a tool scores whose own name's words the query covers (all of them: the whole bonus).
`tune+` MRR 0.731 without, 0.735-0.736 at 0.15-0.2, 0.743 at 0.3-0.4, 0.741 at 0.5, 0.745 at 0.7
(`tune` losing a query from the top 5); no better with the coverage power at 0.75 or 1.25."""
_NAME_WORDS = 2
"""A name is covered by this many of its words at least (a verb and an object): `git_show` by `show`
alone gets half the prior (`tune+` MRR 0.740 at 1, 0.743 at 2, 0.737 at 3)."""
_POOL = 50
"""How many of the best tools by the sum are re-scored by coverage and prior (ties at the cut too);
`tune+` MRR within 0.0002 at 30 and 100."""
_UNASKED_ACTION = 0.5
"""What a tool scores, against its sum, whose name acts (`cookie_set`, `convert_time`) with a verb
the query does not ask for, when the query asks to read (a question, or `show ...`). Tried again
(`tune+` MRR): 0.742 at 0.3, 0.744 at 0.4 (`tune-2` -0.003), 0.743 at 0.5, 0.738 at 0.6-0.7, 0.728
without it (1); kept."""
_ACTION_TEXT = (
    "create add new make insert set update edit modify change alter rename replace patch "
    "delete remove erase drop destroy purge clear unlink write save store put overwrite append "
    "move copy duplicate clone send post publish submit upload push merge install uninstall "
    "start stop cancel kill terminate abort close toggle enable disable reset revert restore "
    "assign dismiss mark star unstar fork commit checkout trigger resize configure "
    "run execute exec evaluate invoke launch perform convert transform translate build refresh"
)
_ACTIONS = frozenset(stem(word) for word in _ACTION_TEXT.split())
"""Verbs that do something rather than read: a tool whose name holds one acts. General English
verbs of change, running and converting, not taken from any catalog."""
_QUESTION_TEXT = "what which who whom whose where when why how is are was were does do did has have"
_QUESTION_WORDS = frozenset(_QUESTION_TEXT.split())
"""A query that opens with one of these asks to know something, not to change it (but `how do I`,
`how to`: how to act)."""
_HOW_TO = frozenset(("do", "can", "could", "should", "would", "to"))
_HISTORY_OPENERS = frozenset(("what", "which", "who", "when"))
"""Question words whose question about a past action asks for its history (`_history`)."""
_READ_TEXT = "show list get read view see display print find search look fetch describe inspect check tell"
_READ_VERBS = frozenset(stem(word) for word in _READ_TEXT.split())
"""A query that opens with one of these asks to read, as a question does."""
_DEPRECATED = 0.5
"""What a tool scores, against its sum, whose description says it is deprecated (`tune+` MRR 0.743
from 0.3 to 0.7, 0.742 without it)."""
_DEPRECATED_TEXT = re.compile(
    r"(?:^|[.!?]\s+|[(\[]\s*)deprecated\b|\b(?:this|the)(?: \w+)? is (?:now )?deprecated\b|\bis now deprecated\b", re.I
)
"""Deprecation said of the tool: opening a sentence (`... DEPRECATED: use read_text_file instead`),
in brackets (`(deprecated)`), or `this tool is deprecated`; not `lists deprecated APIs` nor
`whether an API is deprecated`."""
_MAX_PARAMS = 64
_MAX_DEPTH = 3
_MAX_ENUM_VALUES = 32
"""A parameter's `enum` strings read into its text: the first this many, each cut to `_MAX_ENUM_CHARS`."""
_MAX_ENUM_CHARS = 64
_SENTENCE_END = re.compile(r"[.!?](\s|$)|\n")
_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|[0-9]+")
_URL = re.compile(r"(?:[a-z][a-z0-9+.-]{0,15}://|www\.)\S|[\w-]{1,63}\.(?:com|org|net|io|dev)(?:/|$)", re.I)
_FILE = re.compile(r"[\w*?./~-]{0,200}\w\.[A-Za-z][A-Za-z0-9]{0,3}$")
_EMAIL = re.compile(r"[\w.+-]{1,64}@[\w-]{1,63}\.[\w.-]{2,}$")
_DOTFILE = re.compile(r"\.[a-z][\w.-]{1,30}$")
_SLUG = re.compile(r"[A-Za-z][\w.-]{0,38}/[A-Za-z][\w.-]{0,99}$")
"""An `owner/name` pair (`acme/widgets`, `octo-org/api-server`): a repository, as hosts name them."""
_FOLDER_TEXT = (
    "src lib app apps bin docs doc test tests spec config conf build dist public static assets scripts "
    "tmp var etc usr home data pkg cmd internal packages components"
)
_FOLDERS = frozenset(_FOLDER_TEXT.split())
"""Folders every project has: `src/auth` is a path, not a repository."""
_BRANCH_TEXT = "feature features release releases hotfix bugfix fix origin upstream"
_BRANCHES = frozenset(_BRANCH_TEXT.split())
"""Branch prefixes and remotes: `release/1.4`, `feature/login`, `origin/main` name a branch."""
_PATH_HEADS = ("~/", "./", "../", "~\\", ".\\", "..\\")
_ROOT_TEXT = "home users root tmp var etc usr opt srv mnt media data workspace work code private volumes"
_ROOTS = frozenset(_ROOT_TEXT.split())
"""A host's top folders: `/var/log/app` is a path; `/api/orders` (any other first name) a URL's,
whose words say what it serves."""
_VERSION = re.compile(r"[vV]\d{1,6}(?:\.\d{1,6}){1,3}(?:-[\w.]{1,20})?|\d{1,6}(?:\.\d{1,6}){2,3}(?:-[\w.]{1,20})?")
"""A version (`v14.2.0`, `1.4.2`, `v2.0-rc1`): the release or tag it names, not its digits."""
_DIMENSION = re.compile(r"\d{2,5}(?:px|pt|dp)(?:-\w{1,10})?|\d{2,5}[x\u00d7]\d{2,5}(?:px)?", re.I)
"""A size on a screen (`390px`, `390px-wide`, `1280x720`): what a width and a height say."""
_MARKUP = re.compile(r"</?([a-z][a-z0-9]{0,9}) ?/?>", re.I)
_HTML_TEXT = (
    "a abbr article aside audio b body br button canvas code dialog div em footer form h1 h2 h3 h4 h5 h6 "
    "head header hr html i iframe img input label li link main meta nav ol option p pre script section "
    "select span strong style svg table tbody td textarea th thead title tr u ul video"
)
_HTML = frozenset(_HTML_TEXT.split())
"""HTML's common elements: `<img>`, `</div>` name an element of a page, not an image or a division;
a placeholder in brackets (`<sha>`, `<file>`) is none of these."""
_COORDINATES = re.compile(r"(?<![\w.])x ?[=:]? ?-?\d{1,5},? y ?[=:]? ?-?\d{1,5}(?![\w.])")
"""A point on a screen (`x 40 y 80`, `x=40, y=80`, `x: 40 y: 80`): a position. Bounded, with no
repetition inside a repetition, so it scans a query in linear time."""
_POSITION = stem("position")
_DRIVE = re.compile(r"[A-Za-z]:[\\/]")
_QUOTES: Mapping[str, str] = {"'": "'", '"': '"', "`": "`", "\u2018": "\u2019", "\u201c": "\u201d"}
"""A quote's opening mark and its closing one (straight, backtick, curly)."""
_AFTER_QUOTE = ".,;:!?)"
"""What may follow a closing mark in the same token (`'Order placed',`)."""
_MAX_QUOTED = 12
"""A quote is this many tokens at most: an opening mark with no close soon after is none."""
_QUOTE_KIND = stem("text")
"""What a quote counts as: the text a page shows, a title, a line of a file."""
_EVERY = frozenset(("every", "all", "each", "any"))
"""Words before a value that ask for all of its kind (`every package.json`: files)."""
_SUBJECT_TEXT = "i we you he she they someone somebody anyone i've we've you've they've"
_SUBJECTS = frozenset(_SUBJECT_TEXT.split())
"""Who did something, before a past form (`I made`, `somebody opened`)."""
_IRREGULAR_PAST = frozenset(("made", "wrote", "written", "sent", "built", "ran"))
"""Past forms of the acting verbs without `-ed`."""
_GET = frozenset(("get", "gets", "getting", "got"))
"""The forms of `get`, which before a past form makes a passive (`getting pinged`)."""
_NOT_PAST = frozenset(("bed", "red", "shed", "embed", "hundred", "sacred", "naked"))
"""Words ending in `-ed` that are no past forms (besides the `-eed` ones: `feed`, `speed`, `need`)."""
_PRONOUN_TEXT = "he him his she her hers they them their theirs themselves itself myself yourself ourselves"
_PRONOUNS = frozenset(_PRONOUN_TEXT.split())
"""Pronouns that `STOPWORDS` keeps (a tool's text may need them) but that name nothing in a query:
`back them out`, `who wrote them`, `ask the user for their name`."""
_MINOR = 0.5
"""What a word of a subordinate clause or of a context sentence is worth against one of the request's
own (the tuning data's MRR with subordinate clauses alone: 0.7070 without, 0.7102 at 0.3, 0.7100 at
0.5, 0.7079 at 0.7; a round value kept). Such a word still counts in full towards coverage: leaving
it out of coverage gained the tuning data as much and cost the other parts (0.01 of MRR). Tried
again on all the tuning parts: `tune+` MRR 0.7427-0.7430 from 0.3 to 0.7."""
_SUBORDINATE_TEXT = "because without except unless"
_SUBORDINATES = frozenset(_SUBORDINATE_TEXT.split())
"""Words that open a clause that says why, on what condition or what not to do, not what to do."""
_SO_SUBJECTS = frozenset(("that", "it", "the", *_SUBJECTS))
"""What follows `so` when it opens a purpose (`so I can load it`, `so that`, `so the test can go on`),
not `so far` nor `so many`."""
_CLAUSE_MARKS = (",", ";", ":", ".", "?", "!")
"""What ends a subordinate clause: its comma, or the sentence's end."""
_SENTENCE_ENDS = (";", ".", "?", "!")
"""What ends a sentence of a request (a colon opens its details: `Open a bug: 'Title'`)."""
_DASHES = frozenset(("-", "--", "\u2013", "\u2014"))
"""A dash standing alone between two parts of a request (`it went red \u2014 show me the log`)."""
_REQUEST_TEXT = (
    "open close assign give make help stage unstage approve review compare summarize count wait click "
    "type press go navigate take keep tell ask sign download upload grab pull dump load mark watch follow "
    "subscribe unsubscribe invite block mute scroll hover drag select fill note track explain diff add "
    "delete remove create update edit rename move copy stop start run install set change replace save "
    "write send post reply comment merge revert undo enable disable reset restore cancel kill clear"
)
_REQUESTS = frozenset(stem(word) for word in _REQUEST_TEXT.split()) | _ACTIONS | _READ_VERBS
"""Verbs a request opens with (`show me`, `remove that`): general English verbs of tool tasks."""
_FILLER_TEXT = (
    "please then and also now just so but can could would will you i we want need like to let lets let's "
    "me us i'd ok okay"
)
_FILLERS = frozenset(_FILLER_TEXT.split())
"""Words before a request's verb (`can you please show`, `I want to add`, `let me read`)."""
_WANTS = frozenset(("want", "need", "like"))
"""`I want the changelog`: a sentence that says what is wanted is a request without a verb."""
_ENTITY = stem("entity")
_NAMES = 0.6
"""What the names in a request (`Dana Liu`, `Orion`) are worth as `entity`: more than a question
word's intent (0.3; the tuning data's MRR was the same at 0.3 as without, +0.0025 at 0.6 and 1.0).
Tried again on all the tuning parts: `tune+` MRR 0.742 without or at 0.3, 0.743 at 0.6 to 1.0."""
_MIN_NAMES = 2
"""A request names things where it has this many capitalised words no tool knows: one is often a
product or a place (`Android`, `Sydney`)."""
_SENTENCE_MARKS = (".", "?", "!", ":")
"""What ends a sentence or opens a list: the word after it is capitalised for that alone."""
_SYNONYMS = stems()
"""The words of the synonym groups: general tool vocabulary (`read`, `write`, `input`)."""
_COMMIT_CHARS = 7
"""A hash this long or longer is a commit (git's short hashes have seven hex digits); shorter, an id."""
_CLOCK = re.compile(r"(?:[01]?\d|2[0-3])(?:[:.][0-5]\d)?[ap]\.?m\.?$|(?:[01]?\d|2[0-3]):[0-5]\d$", re.I)
"""A time of day: `8am`, `5:30pm`, `17:00`."""
_ZONE_TEXT = (
    "utc gmt cet cest eet eest wet west bst ist est edt cst cdt mst mdt pst pdt akst hst jst kst aest aedt nzst nzdt"
)
_ZONES = frozenset(_ZONE_TEXT.split())
"""Common time zones' abbreviations, written in capitals in a query (`PST`, `CET`)."""
_PHRASE_TEXT = {
    "turn on": "enable",
    "switch on": "enable",
    "turn off": "disable",
    "switch off": "disable",
    "shut down": "close",
    "take back": "undo",
    "back out": "revert",
    "roll back": "revert",
    "get rid": "delete",
    "tear down": "delete",
    "kick off": "start",
    "start up": "start",
    "look over": "review",
    "go over": "review",
    "pull up": "open",
    "bring up": "show",
    "jot down": "note",
    "write down": "note",
    "hang on": "wait",
    "hold on": "wait",
    "hand over": "assign",
    "hand off": "assign",
    "sign up": "register",
    "sign off": "approve",
}
_PHRASES: Mapping[tuple[str, str], str] = {
    (stem(phrase.split()[0]), phrase.split()[1]): verb for phrase, verb in _PHRASE_TEXT.items()
}
"""Phrasal verbs of tool tasks and the verb they mean (`turn off` is `disable`), general English;
the verb in any form, its particle after it or after an object pronoun (`turned it off`)."""
_PARTICLES = frozenset(particle for _, particle in _PHRASES)
_KEY_KIND_TEXT = "api access private ssh secret signing deploy gpg pgp aws"
_KEY_KINDS = frozenset(_KEY_KIND_TEXT.split())
"""What a `key` is when one of these names it (`api key`, `AWS access key`): a credential, not a key to press."""
_OBJECT_TEXT = "it them this that these those everything all"
_OBJECTS = frozenset(_OBJECT_TEXT.split())
"""What may stand between a phrasal verb and its particle (`take it back`)."""
_FILE_NAMES = frozenset(
    ("readme", "license", "licence", "makefile", "dockerfile", "changelog", "gemfile", "procfile", "jenkinsfile")
)
"""File names without an extension that name a file all the same."""
_MIXED = re.compile(r"[A-Za-z]*[a-z][A-Z][A-Za-z]*")
_NAMED_NUMBER = re.compile(r"[A-Za-z]{2,}[0-9]{1,4}")
"""A name with a number in it (`base64`, `utf8`, `sha256`, `ipv6`): the number is part of the name."""
_PUNCTUATION = ".,;:!?()[]{}\"'`"
"""Stripped off a query's words (the first, `.`, not off a dotfile's name: `.gitignore`)."""
_POSSESSIVE = re.compile(r"['\u2019]s$", re.I)
_PREFIX_MIN_TOOLS = 3
_PREFIX_SHARE = 0.8
"""A word in at least this share of a server's tool names (of three or more) is the server's prefix."""
_HINTS = (
    ("read_only_hint", "readonly"),
    ("destructive_hint", "destructive"),
    ("idempotent_hint", "idempotent"),
    ("open_world_hint", "openworld"),
)


@dataclass(frozen=True, slots=True)
class Hit:
    """One tool found, with its score and the query words that matched it (directly or by synonym)."""

    name: str
    score: float
    matched: tuple[str, ...]


def _summary(description: str) -> str:
    head = description[:400]
    end = _SENTENCE_END.search(head)
    return head[: end.start() + 1] if end else head


def _parameters(schema: Any, depth: int = 0) -> Iterator[tuple[str, str]]:
    """(name, description) of the schema's properties, nested objects included, bounded in depth."""
    if depth > _MAX_DEPTH or not isinstance(schema, dict):
        return
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for name, spec in properties.items():
        described = spec.get("description") if isinstance(spec, dict) else None
        text = described if isinstance(described, str) else ""
        if isinstance(spec, dict) and isinstance(values := spec.get("enum"), list):
            # A tool that does several things by an `action` names them here (`create_issue`, ...).
            named = [v[:_MAX_ENUM_CHARS] for v in values[:_MAX_ENUM_VALUES] if isinstance(v, str)]
            text = " ".join((text, *named)) if named else text
        yield str(name), text
        if isinstance(spec, dict):
            yield from _parameters(spec, depth + 1)
            yield from _parameters(spec.get("items"), depth + 1)


def _server_words(tools: Mapping[str, Tagged]) -> dict[str, frozenset[str]]:
    """Per server: its name's words, and words in nearly all of its tools' names (a prefix such as `browser_`)."""
    names: dict[str, list[set[str]]] = defaultdict(list)
    for tagged in tools.values():
        route = tagged.route
        names[route.server].append(set(terms(route.local_name or route.remote_name)))
    out = {}
    for server, sets in names.items():
        common: set[str] = set()
        if len(sets) >= _PREFIX_MIN_TOOLS:
            counts: dict[str, int] = defaultdict(int)
            for words in sets:
                for word in words:
                    counts[word] += 1
            common = {w for w, n in counts.items() if n >= _PREFIX_SHARE * len(sets)}
        out[server] = frozenset(terms(server)) | common
    return out


def _exact(name: str) -> list[str]:
    """The words of a name as written, lower-cased, less stop words."""
    return [w for w in (raw.lower() for raw in _WORD.findall(name[:MAX_TEXT_CHARS])) if w not in STOPWORDS]


def _fields(tagged: Tagged, server_words: frozenset[str]) -> dict[str, list[str]]:
    route = tagged.route
    tool = route.tool
    description = (tool.description or "")[:MAX_TEXT_CHARS]
    notes = tool.annotations
    title = " ".join(t for t in (tool.title, notes.title if notes else None) if t)
    params = [p for _, p in zip(range(_MAX_PARAMS), _parameters(tool.input_schema), strict=False)]
    hints = [word for attr, word in _HINTS if notes is not None and getattr(notes, attr)]

    def own(words: list[str]) -> list[str]:
        # The server's own words say which server, never which of its tools: they count once, as `server`.
        return [w for w in words if w not in server_words]

    def text(value: str) -> list[str]:
        return own(terms(value) + compounds(value))

    return {
        "name": own(terms(route.local_name or route.remote_name)),
        "exact": [f"={w}" for w in _exact(route.local_name or route.remote_name) if stem(w) not in server_words],
        "title": text(title),
        "summary": text(_summary(description)),
        "description": text(description),
        "params": [t for name, _ in params for t in terms(name)],
        "param_text": own([t for _, text in params for t in terms(text)][:512]),
        "annotations": hints,
        "tags": [t for tag in sorted(tagged.tags) for t in terms(tag)],
        "server": sorted(server_words),
    }


def _relatives(term: str) -> tuple[str, ...]:
    """The agent noun of a verb's stem and the other way round, which the stemmer keeps apart
    (`customer` is not `custom`, so `-er` is not a suffix it strips): `index` <-> `indexer`,
    `watch` <-> `watcher`, `log` <-> `logger`, `edit` <-> `editor`; and a `sub`-word's word
    (`subfolder` -> `folder`, `subtask` -> `task`)."""
    if term.startswith("sub") and len(term) >= 6 and term.isalpha():
        return (term[3:],)
    if term.endswith(("er", "or")) and len(term) >= 5:
        base = term[:-2]
        out = [base, stem(base + "e")]
        if len(base) > 3 and base[-1] == base[-2]:
            out.append(base[:-1])
        return tuple(dict.fromkeys(o for o in out if o != term))
    if len(term) >= 3 and term.isalpha():
        doubled = term + term[-1] if len(term) <= 4 and term[-1] not in "aeiouywx" and term[-2] in "aeiou" else None
        return tuple(dict.fromkeys(t for t in (f"{term}er", f"{term}or", f"{doubled}er" if doubled else "") if t))
    return ()


@dataclass(frozen=True, slots=True)
class _Word:
    """One word of a query: its stem, its form as written (against names' exact forms), what it is
    worth against a word of the query (intents less), and whether it counts towards coverage."""

    text: str
    term: str
    exact: str | None
    weight: float = 1.0
    counts: bool = True
    literal: bool = False
    """Matched by its own term only: no synonym, relative or name prior (`_history`)."""


def _hexish(token: str) -> bool:
    """A commit hash or an id (`abc123`, `4f2a`): hex digits and letters both, four or more."""
    return (
        len(token) >= 4
        and any(c.isdigit() for c in token)
        and any(c.isalpha() for c in token)
        and all(c in "0123456789abcdef" for c in token)
    )


def _query(query: str, known: Callable[[str], bool]) -> list[_Word]:
    """The words of a query that can tell tools apart, in order, first occurrence only.

    Each word counts stemmed, and as written against the names' exact forms (`=notifications`), so
    a plural asks more for `list_notifications` than for `get_notification_details`. Values in a
    query name a kind of thing, not a tool: a URL counts as `url`, a file name with an extension
    (or a well-known one, `README`) as `file`, an e-mail address as `email`, an `owner/name` pair
    (`acme/widgets`) as `repository`, a hash of seven hex digits or more (`4f2a9c1`) as `commit`, a
    local path (`~/projects/data`, `src/auth`, `./build`) as `path`, a branch under a common prefix
    (`release/1.4`) as `branch`, a version (`v14.2.0`) as `version`, a snake_case name or a call
    (`parse_config`, `refund()`) as `code`, a quote (`'Order placed'`, `` `debug: true` ``) as `text`
    (its words not at all), and a bare number or a shorter hash (`abc123`) not at all; a second value
    of a kind, or one after `every`/`all`, asks for the plural (`a.yml b.yml`: `files`).
    A URL's path on its own (`/api/orders`) keeps its words. A camelCase word the index knows whole
    counts whole (`GitHub`, `localStorage`), else by its parts. Two adjacent words the index knows
    as one count as one (`local storage` finds `localstorage`, `look up` is `lookup`), neither then
    on its own.
    A question word that opens the query or a clause adds its intent (`INTENTS`), worth less than a
    word of the query. A phrasal verb counts as the verb it means (`_phrased`), a time of day
    (`8am`, `17:00`) as `time`, a zone's abbreviation in capitals (`PST`) as `timezone`, and the
    number inside a name (`base64`) as a word, an HTML element in brackets (`<img>`) as `element`,
    and a point on a screen (`x 40 y 80`, `x=40, y=80`) as `position`. A past form of an acting
    verb after its subject (`gists I made`), `get` before a past form (`getting pinged`, not `get
    feed`) and a pronoun (`them`, `their`) count not at all; two capitalised words or more that no
    tool knows (`Dana Liu`, `Payments`) name things, and add `entity` at `_NAMES`.
    The words of a subordinate clause (`_subordinate`: `without merging`, `so it opens a PR`,
    `except the ones under node_modules`) and of a context sentence beside a request (`_context`:
    `The build went red. Show me the log`) count at `_MINOR`: still towards coverage, but their
    matches add half and their forms as written nothing. A word met there and again in the
    request's own words counts in full.
    """
    out: dict[str, _Word] = {}
    previous: str | None = None  # the word before, as written, while it may join the next
    added: str | None = None  # the term the word before added, while it may join the next
    head = query[:MAX_TEXT_CHARS]
    lowered = head.lower().split()
    tokens = _phrased(head.split())
    quoted = _quoted(tokens)
    minor = _subordinate(tokens) | _context(tokens)
    for index, token in enumerate(tokens):
        if index in quoted:  # the words of a quote are its text's, not the task's
            if _QUOTE_KIND not in out:
                out[_QUOTE_KIND] = _Word(quoted[index].strip(_PUNCTUATION), _QUOTE_KIND, "=text")
            previous = added = None
            continue
        bare = _POSSESSIVE.sub("", token.strip(_PUNCTUATION))  # the page's storage: the page, storage
        dotted = token.strip(_PUNCTUATION[1:]).rstrip(".")  # its leading dots kept: `./build`, `.env`
        kind = (
            "time"
            if _CLOCK.match(bare)
            else "timezone"
            if bare.isupper() and bare.lower() in _ZONES
            else "url"
            if _URL.match(bare)
            else "email"
            if _EMAIL.match(bare)
            else "file"
            if _FILE.match(bare) or bare.lower() in _FILE_NAMES or _DOTFILE.match(token.strip(_PUNCTUATION[1:]))
            else "element"
            if _markup(token)
            else "version"
            if _VERSION.fullmatch(bare)
            else "width"
            if _DIMENSION.fullmatch(bare)
            else "path"
            if _path(dotted)
            else "branch"
            if _branch(bare)
            else "repository"
            if _slug(bare)
            else "commit"
            if len(bare) >= _COMMIT_CHARS and _hexish(bare.lower())
            else "code"
            if _identifier(token)
            else None
        )
        if kind is not None:
            term = stem(kind)
            if _new(out, term, index in minor):  # `every package.json` asks for files, as two of them do
                exact = f"={kind}s" if _every(tokens, index) else f"={kind}"
                out[term] = _word(dotted if kind == "path" else bare, term, exact, index in minor)
            elif out[term].exact == f"={kind}":  # a second value of the kind: `a.yml b.yml` asks for files
                out[term] = _Word(out[term].text, term, f"={kind}s", out[term].weight)
            previous = added = None
            continue
        if _hexish(bare.lower()):
            previous = added = None
            continue
        parts = _WORD.findall(bare)
        named = _NAMED_NUMBER.fullmatch(bare) is not None
        whole = bare.lower()
        if len(parts) > 1 and _MIXED.fullmatch(bare) and known(stem(whole)):
            parts = [whole]
        for raw in parts:
            lower = raw.lower()
            joined = stem(previous + lower) if previous is not None and lower.isalpha() and len(lower) > 1 else None
            if joined is not None and known(joined):
                if added is not None:  # the first word was on its own only for want of the second
                    del out[added]
                if joined not in out:
                    out[joined] = _Word(f"{previous} {lower}", joined, None)
                previous = added = None
                continue
            previous = lower if lower.isalpha() else None
            added = None
            if (lower.isdigit() and not named) or lower in STOPWORDS or lower in _PRONOUNS or len(lower) == 1:
                continue
            term = stem(lower)
            if term in _ACTIONS and _done(tokens, index, lower):
                continue  # `gists I made`: what was done says which things, not what to do
            if term in _ACTIONS and _history(tokens, index, lower) and term not in out:
                # `what changed in v14.2.0`: the changes asked about, by the word itself only (the
                # tools that show changes), not by its synonyms (the tools that edit)
                out[term] = _Word(lower, term, f"={lower}", literal=True)
                added = term
                continue
            if lower in _GET and _passive(tokens, index):
                continue  # `stop getting pinged`: `get` as `be`, not as fetching
            if _new(out, term, index in minor):
                out[term] = _word(lower, term, f"={lower}", index in minor)
                added = term
    for asked, intent in _intents(lowered, out):
        if intent not in out:
            out[intent] = _Word(asked, intent, None, _INTENT, counts=False)
    if _POSITION not in out and (point := _COORDINATES.search(" ".join(lowered))) is not None:
        out[_POSITION] = _Word(point.group(), _POSITION, None)
    name = _named(tokens, quoted, known)
    if name is not None and _ENTITY not in out:
        out[_ENTITY] = _Word(name, _ENTITY, None, _NAMES, counts=False)
    return list(out.values())


def _new(out: Mapping[str, _Word], term: str, minor: bool) -> bool:
    """Whether `term` is new to the query's words, or was met only in a minor clause and now in the
    request's own (`... so I can load it. Load sales.csv`): there it counts in full."""
    return term not in out or (not minor and out[term].weight < 1.0)


def _word(text: str, term: str, exact: str | None, minor: bool) -> _Word:
    """A query word, at `_MINOR` in a subordinate clause or a context sentence: it still counts
    towards coverage (a tool that matches it is still the better one), but its match adds less, and
    its form as written (against the names' exact forms) adds nothing."""
    return _Word(text, term, exact, _MINOR) if minor else _Word(text, term, exact)


def _subordinate(tokens: list[str]) -> set[int]:
    """The tokens of subordinate clauses (`close PR 9 without merging`, `hand this bug to copilot so
    it opens a PR`, `every package.json except the ones under node_modules`): from `because`,
    `without`, `except`, `unless` or a purpose's `so` to the clause's comma or the sentence's end.
    They say why, on what condition or what not to do; the main clause says what to do, and a tool
    that answers the subordinate clause's words (`merge`, `open a PR`) is the wrong one. One pass."""
    out: set[int] = set()
    inside = False
    for i, token in enumerate(tokens):
        if token in _DASHES:
            inside = False
            continue
        if inside:
            out.add(i)
            inside = not token.endswith(_CLAUSE_MARKS)
            continue
        word = token.strip(_PUNCTUATION).lower()
        following = tokens[i + 1].strip(_PUNCTUATION).lower() if i + 1 < len(tokens) else ""
        if word in _SUBORDINATES or (word == "so" and following in _SO_SUBJECTS):
            inside = not token.endswith(_CLAUSE_MARKS)
    return out


def _context(tokens: list[str]) -> set[int]:
    """The tokens of a request's context sentences (`Last night's CI build went red. Show me the error
    output`; `Which value is under 'token'? It's not in cookies`), where another sentence is the
    request: one that opens with a verb of a task (after `please`, `can you`, `I want to`...), says
    what is wanted (`I want the notes`) or asks (a question word, a `?`). The context tells which
    things; its words (`build`, `cookies`) find the tools for those things, not for the task. None
    where no sentence is a request, or where the request's verb points back at the context with a
    pronoun (`... the whole checkout flow \u2014 capture it`): there the context holds its object.
    Sentences end at `.`, `?`, `!`, `;` or a lone dash, not at a comma. One pass."""
    sentences: list[list[int]] = [[]]
    for i, token in enumerate(tokens):
        if token in _DASHES:
            sentences.append([])
            continue
        sentences[-1].append(i)
        if token.endswith(_SENTENCE_ENDS):
            sentences.append([])
    sentences = [s for s in sentences if s]
    if len(sentences) < 2:
        return set()
    requests = []
    for sentence in sentences:
        words = [tokens[i].strip(_PUNCTUATION).lower() for i in sentence]
        start = next((n for n, word in enumerate(words) if word not in _FILLERS), len(words))
        verb, following = [*words[start : start + 2], "", ""][:2]
        acts = stem(verb) in _REQUESTS
        if acts and following in _OBJECTS:
            return set()  # `capture it`: what to capture is in the context
        requests.append(
            acts
            or any(word in _WANTS for word in words[:start])
            or verb in _QUESTION_WORDS
            or tokens[sentence[-1]].endswith("?")
        )
    if not any(requests):
        return set()
    return {i for sentence, request in zip(sentences, requests, strict=True) if not request for i in sentence}


def _markup(token: str) -> bool:
    """An HTML element in brackets (`<img>`, `</div>`): it asks about a page's elements."""
    match = _MARKUP.fullmatch(token.strip(".,;:!?()"))
    return match is not None and match.group(1).lower() in _HTML


def _every(tokens: list[str], index: int) -> bool:
    """Whether the value at `index` follows a word that asks for all of its kind (`every package.json`,
    `all *.test.js`): the plural, as a second value asks for it."""
    return index > 0 and tokens[index - 1].lower() in _EVERY


def _done(tokens: list[str], index: int, lower: str) -> bool:
    """Whether the word at `index` (`lower`, one of its words) is a past form right after its subject
    (`gists I made`, `the files we added`, `somebody opened`): it tells which things the request is
    about, and asks for no tool that does it again."""
    return _past(lower) and index > 0 and tokens[index - 1].strip(_PUNCTUATION).lower() in _SUBJECTS


def _history(tokens: list[str], index: int, lower: str) -> bool:
    """Whether the word at `index` asks what was done, in a question about the past: a past form in
    a question that opens with `what`, `which`, `who` or `when` (`what changed in v14.2.0`, `which
    files changed`, `who deleted the branch`), or a verb after `did` (`what did a1b2c3d change`).
    Such a question asks for the history (a commit, a release, a log), not for a tool that does
    it again. Only the question's first sentence counts."""
    opening = tokens[0].strip(_PUNCTUATION).lower() if tokens else ""
    if opening not in _HISTORY_OPENERS:
        return False
    if any(t.endswith(_SENTENCE_ENDS) for t in tokens[:index]):
        return False  # another sentence: the question is over
    return _past(lower) or "did" in (t.strip(_PUNCTUATION).lower() for t in tokens[:index])


def _past(word: str) -> bool:
    """Whether `word` (lowercase) is a past form: `-ed` (not `feed`, `speed`, `embed`) or irregular."""
    if word in _IRREGULAR_PAST:
        return True
    return word.endswith("ed") and not word.endswith("eed") and word not in _NOT_PAST


def _passive(tokens: list[str], index: int) -> bool:
    """Whether `get` at `index` comes before a past form (`getting pinged`, `got merged`): a passive,
    whose verb is the one after it; `get` would find every tool that gets something."""
    following = tokens[index + 1].strip(_PUNCTUATION).lower() if index + 1 < len(tokens) else ""
    return _past(following)  # not `get feed`, `get embed code`: a noun in `-ed`, which `get` fetches


def _named(tokens: list[str], quoted: Mapping[int, str], known: Callable[[str], bool]) -> str | None:
    """The first of the names in a request (`Remember that Dana Liu leads Payments`, `Bob doesn't
    report to Alice`), where it has `_MIN_NAMES` or more: capitalised words inside a sentence, not
    quoted, that no tool's text holds (a tool's own vocabulary, `GitHub`, `Python`, is no name here).
    Names of people, teams and projects are what a store of facts keeps: they add `entity`."""
    names = [
        bare
        for i, token in enumerate(tokens)
        if i > 0
        and i not in quoted
        and not tokens[i - 1].endswith(_SENTENCE_MARKS)
        and (bare := _POSSESSIVE.sub("", token.strip(_PUNCTUATION))).istitle()
        and bare.isalpha()
        and len(bare) > 2
        and not known(stem(bare.lower()))
    ]
    return names[0] if len(names) >= _MIN_NAMES else None


def _identifier(token: str) -> bool:
    """A name out of the user's code: a snake_case name (`retry_with_backoff`, `parse_config`) or a
    call (`refund()`, `retry(`, `client.connect()`). Its words are the code's, not the task's: a
    request that names one asks about code (`where is parse_config called`), and its parts
    (`parse`, `config`) would find the tools that parse or configure. Not `key=value`
    (`dry_run=false` sets an option whose words do say what to run)."""
    raw = token.rstrip(".,;:!?")
    call = raw.endswith(("(", "()"))
    name = raw.rstrip("()").strip(_PUNCTUATION)
    if not name[:1].isalpha() or not name.replace("_", "").replace(".", "").isalnum():
        return False
    return call or "_" in name


def _quoted(tokens: list[str]) -> dict[int, str]:
    """The tokens inside quotes (`'Order placed'`, `"Are you sure?"`, `` `debug: true` ``), each to
    its quote's text: what a page should show, a title, a line of a file, a key; its words say
    nothing of the tool. A quote closes within `_MAX_QUOTED` tokens or is none (an apostrophe:
    `it's`, `users'`), and a query that is all one quote is a query, not a value."""
    out: dict[int, str] = {}
    i = 0
    while i < len(tokens):
        close = _QUOTES.get(tokens[i][:1])
        if close is not None:
            for j in range(i, min(len(tokens), i + _MAX_QUOTED)):
                body = tokens[j].rstrip(_AFTER_QUOTE)
                if body.endswith(close) and (j > i or len(body) > 1):
                    text = " ".join(tokens[i : j + 1])
                    out.update(dict.fromkeys(range(i, j + 1), text))
                    i = j
                    break
        i += 1
    return {} if len(out) == len(tokens) else out


def _path(token: str) -> bool:
    """A local path without an extension (`~/projects/data`, `/var/log/app`, `./build`, `C:\\work`,
    `src/components/forms`): its folders' names are where the thing is, not what the query asks."""
    if len(token) < 3 or token.startswith("//"):
        return False
    if token.startswith(_PATH_HEADS) or _DRIVE.match(token):
        return any(c.isalnum() for c in token)
    if token.startswith("/"):
        return token[1:].split("/", 1)[0].lower() in _ROOTS
    if token.count("/") >= 2:  # `a/b/c`: not `a//b`, nor words (`read/write/execute`)
        parts = token.lower().split("/")
        return all(parts) and not all(_general(part) for part in parts)
    head, slash, tail = token.partition("/")
    if slash and not tail:  # `src/`, `node_modules/`: a folder
        return head.replace("-", "").replace("_", "").replace(".", "").isalnum()
    return bool(tail) and head.lower() in _FOLDERS


def _branch(token: str) -> bool:
    """`release/1.4`, `feature/login`, `origin/main`: a branch under a common prefix or a remote."""
    head, _, tail = token.partition("/")
    return bool(tail) and "/" not in tail and head.lower() in _BRANCHES


def _slug(token: str) -> bool:
    """`owner/name` that names a repository (`acme/widgets`, `octo-org/api-server`): not a path of a
    project's own folders (`src/auth`, `feature/login`), nor a pair of short or common words
    (`read/write`, `and/or`, `on/off`), which the query means as words."""
    if not _SLUG.match(token):
        return False
    owner, name = token.lower().split("/", 1)
    if owner in _FOLDERS or owner in _BRANCHES:
        return False
    return not (_general(owner) and _general(name))


def _general(word: str) -> bool:
    """A short, grammatical or general tool word (`on`, `and`, `read`): one a pair of values is not made of."""
    return len(word) <= 3 or word in STOPWORDS or stem(word) in _SYNONYMS


def _phrased(tokens: list[str]) -> list[str]:
    """`tokens` with each phrasal verb (`take it back`, `turned off`) as the one verb it means, and
    each key named by what it opens (`api key`) as `secret`. Only a particle or `key` is looked
    behind from, so most tokens cost one set lookup."""
    out = list(tokens)
    for j, token in enumerate(tokens):
        particle = token.rstrip(_PUNCTUATION).lower()
        if j > 0 and particle in ("key", "keys") and tokens[j - 1].strip(_PUNCTUATION).lower() in _KEY_KINDS:
            out[j] = "secret" + token[len(particle) :]
            continue
        if particle not in _PARTICLES or j == 0:
            continue
        i = j - 2 if j >= 2 and tokens[j - 1].lower() in _OBJECTS else j - 1
        verb = out[i].lower()
        meant = _PHRASES.get((stem(verb), particle)) if verb.isalpha() else None
        if meant is not None:
            out[i], out[j] = meant, token[len(particle) :]  # the particle's punctuation kept
    return [t for t in out if t]


def _plural(word: str) -> bool:
    """`branches`, `files`, `cookies`: a word the stemmer takes an `s` off (not `status`, `access`)."""
    return word.endswith("s") and not word.endswith(("ss", "us", "is")) and stem(word) != word


def _intents(lowered: list[str], words: Mapping[str, _Word]) -> Iterator[tuple[str, str]]:
    """The intents of a query's question words (`INTENTS`): (the question word, an intent's stem)."""
    bare = [token.strip(_PUNCTUATION) for token in lowered[:MAX_QUERY_WORDS]]
    for i, word in enumerate(bare):
        if i > 0 and not lowered[i - 1].endswith((",", ";", ":", "?", ".")):
            continue  # "turn it off when files change" asks for no time: a question word opens a question
        pair = f"{word} {bare[i + 1]}" if i + 1 < len(bare) else ""
        for key in (pair, word):
            if key in INTENTS:
                for intent in INTENTS[key]:
                    yield key, stem(intent)
                break
    # "which branches", "what files are there", "all the cookies": a plural thing asked for in a
    # question, or with `all`/`every`, asks for a list of them
    if (bare[:1] in (["which"], ["what"]) or "all" in bare or "every" in bare) and any(
        w.exact is not None and _plural(w.exact[1:]) for w in words.values()
    ):
        yield "which", stem("list")


def _deprecated(tagged: Tagged) -> bool:
    """Whether the tool's title or description says it is deprecated."""
    tool = tagged.route.tool
    notes = tool.annotations
    texts = (tool.title, notes.title if notes else None, (tool.description or "")[:MAX_TEXT_CHARS])
    return any(t and _DEPRECATED_TEXT.search(t) for t in texts)


def _reads(query: str) -> bool:
    """Whether the query asks to read rather than to act: a question (`what is staged`, `which
    cookies`, `...?`) or a request to see (`show me`, `list`, `find`)."""
    head = query[:MAX_TEXT_CHARS].strip()
    if head.endswith("?"):
        return True
    opening = [re.split(r"['\u2019]", t.strip(_PUNCTUATION).lower(), maxsplit=1)[0] for t in head.split(maxsplit=2)[:2]]
    if not opening:
        return False
    if opening[:1] == ["how"] and opening[1:] and opening[1] in _HOW_TO:
        return False  # how do I delete ...: asks how to act
    return opening[0] in _QUESTION_WORDS or stem(opening[0]) in _READ_VERBS


def _asked(words: list[_Word]) -> frozenset[str]:
    """Every stem a query's words reach: their own, their synonyms' and their relatives'."""
    out: set[str] = set()
    for word in words:
        out.add(word.term)
        out |= related(word.term)
        out.update(_relatives(word.term))
    return frozenset(out)


_Match = tuple[str, Mapping[int, float], Mapping[int, float], Mapping[int, float], frozenset[int]]
"""A query word that matched: as written, its best matches, its own postings, its exact form's, and
the tools whose name holds it (or a synonym or relative)."""


class SearchIndex:
    """BM25F over the exposed tools; immutable once built."""

    def __init__(self, tools: Mapping[str, Tagged]) -> None:
        self._names: list[str] = []
        self._servers: list[str] = []
        self._tags: list[frozenset[str]] = []
        docs: list[dict[str, list[str]]] = []
        server_words = _server_words(tools)
        for name, tagged in tools.items():
            self._names.append(name)
            self._servers.append(tagged.route.server)
            self._tags.append(tagged.tags)
            docs.append(_fields(tagged, server_words[tagged.route.server]))
        count = len(docs)
        average = {f: (sum(len(d[f]) for d in docs) / count if count else 0.0) or 1.0 for f in FIELD_WEIGHTS}
        weighted: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        named: dict[str, set[int]] = defaultdict(set)
        self._name_sizes: list[int] = []
        self._actions: list[frozenset[str]] = [frozenset(w for w in d["name"] if w in _ACTIONS) for d in docs]
        self._deprecated: list[bool] = [_deprecated(t) for t in tools.values()]
        for doc, fields in enumerate(docs):
            for field, words in fields.items():
                if not words:
                    continue
                b = _B.get(field, 0.75)
                norm = FIELD_WEIGHTS[field] / (1 - b + b * len(words) / average[field])
                for word in words:
                    weighted[word][doc] += norm
            for word in fields["name"]:
                named[word].add(doc)
            self._name_sizes.append(len(set(fields["name"])))
        # Per (term, tool): idf times the saturated weighted frequency; a search only adds these.
        self._postings: dict[str, dict[int, float]] = {}
        for term, per_doc in weighted.items():
            idf = math.log(1 + (count - len(per_doc) + 0.5) / (len(per_doc) + 0.5))
            self._postings[term] = {doc: idf * tf / (_K1 + tf) for doc, tf in per_doc.items()}
        # A term's postings merged with its synonyms' and relatives' (each tool's best match, those at
        # a discount), and the tools whose name holds any of them, once here: a few milliseconds at
        # 2,000 tools, and no search pays for it.
        self._expanded: dict[str, dict[int, float]] = {}
        self._named: dict[str, frozenset[int]] = {}
        for term in sorted(_SYNONYMS | {t for t in self._postings if not t.startswith("=")}):
            kin = sorted(r for r in _relatives(term) if r in self._postings)
            others = [(o, _SYNONYM) for o in sorted(related(term))] + [(r, _RELATIVE) for r in kin]
            best = dict(self._postings.get(term, {}))
            in_name = set(named.get(term, ()))
            for other, discount in others:
                for doc, value in self._postings.get(other, {}).items():
                    if value * discount > best.get(doc, 0.0):
                        best[doc] = value * discount
                in_name |= named.get(other, set())
            if best and len(best) > len(self._postings.get(term, ())):
                self._expanded[term] = best
            if in_name:
                self._named[term] = frozenset(in_name)

    def __len__(self) -> int:
        return len(self._names)

    def _knows(self, term: str) -> bool:
        return term in self._postings or term in self._expanded

    def _matches(
        self, term: str, *, literal: bool = False
    ) -> tuple[Mapping[int, float], Mapping[int, float], frozenset[int]]:
        """For `term`: each tool's best match (the term itself, or one of its synonyms or relatives at
        a discount), the tools that have the term itself, and the tools whose name holds it or a
        synonym or relative of it; `literal` (`_Word.literal`): the term itself only, no name."""
        own = self._postings.get(term, {})
        if literal:
            return own, own, frozenset()
        best = self._expanded.get(term)
        if best is not None or term in self._postings:
            return (best if best is not None else own), own, self._named.get(term, frozenset())
        kin = [r for r in _relatives(term) if r in self._postings]  # a word no tool has: its relatives only
        merged: dict[int, float] = {}
        in_name: frozenset[int] = frozenset()
        for r in kin:
            for doc, value in self._postings[r].items():
                merged[doc] = max(merged.get(doc, 0.0), value * _RELATIVE)
            in_name |= self._named.get(r, frozenset())
        return merged, own, in_name

    def search(self, query: str, k: int, *, server: str | None = None, capability: str | None = None) -> list[Hit]:
        """The `k` best tools for `query`, best first (no match: empty); `server`/`capability` narrow them."""
        scores: dict[int, float] = defaultdict(float)
        matched: list[_Match] = []
        words = _query(query, self._knows)
        for word in words[:MAX_QUERY_WORDS]:
            matches, own, in_name = self._matches(word.term, literal=word.literal)
            exact = self._postings.get(word.exact, {}) if word.exact is not None else {}
            if not matches and not exact:
                continue
            if word.counts:
                matched.append((word.text, matches, own, exact, in_name))
            weight = word.weight
            if weight == 1.0:
                for doc, value in matches.items():
                    scores[doc] += value
                for doc, value in exact.items():
                    scores[doc] += value
            else:
                for doc, value in matches.items():
                    scores[doc] += value * weight
        if server is not None or capability is not None:
            scores = defaultdict(
                float,
                {
                    doc: score
                    for doc, score in scores.items()
                    if (server is None or self._servers[doc] == server)
                    and (capability is None or capability in self._tags[doc])
                },
            )
        if not scores or k < 1:
            return []
        # The best by the sum are re-scored by coverage and the name's prior, the rest come after
        # them, so any k gets a prefix of one order. Every tool's terms are added in the query's order,
        # so equal tools get bit-equal scores: each cut is sharp, and ties go by name.
        if len(scores) > _POOL:
            cut = sorted(scores.values(), reverse=True)[_POOL - 1]
            candidates = [doc for doc, score in scores.items() if score >= cut]
        else:
            candidates = list(scores)
        reading = self._reading(words[:MAX_QUERY_WORDS], query)
        final = self._shaped(candidates, scores, matched, reading)
        best = heapq.nlargest(k, final.values())[-1]
        ranked = sorted(
            (doc for doc, score in final.items() if score >= best), key=lambda d: (-final[d], self._names[d])
        )
        if len(ranked) < k and len(scores) > len(final):
            # past the pool (k over fifty, or few candidates left by a filter): re-scored the same
            # way, ordered after it, and never shown above its last score
            floor = final[ranked[-1]]
            rest = self._shaped([doc for doc in scores if doc not in final], scores, matched, reading)
            after = sorted(rest, key=lambda d: (-rest[d], self._names[d]))[: k - len(ranked)]
            final.update((doc, min(rest[doc], floor)) for doc in after)
            ranked += after
        return [
            Hit(self._names[doc], round(final[doc], 4), tuple(w for w, m, _, e, _ in matched if doc in m or doc in e))
            for doc in ranked[:k]
        ]

    def _reading(self, words: list[_Word], query: str) -> frozenset[str] | None:
        """For a query that asks to read, the stems its words reach (a tool whose name acts with a verb
        none of them reaches is demoted); None for a query that may ask to act."""
        return _asked(words) if _reads(query) else None

    def _factor(self, doc: int, reading: frozenset[str] | None) -> float:
        """A deprecated tool's demotion, and an acting tool's where the query asks to read."""
        factor = _DEPRECATED if self._deprecated[doc] else 1.0
        actions = self._actions[doc]
        if reading is not None and actions and not actions & reading:
            factor *= _UNASKED_ACTION
        return factor

    def _shaped(
        self,
        candidates: list[int],
        scores: Mapping[int, float],
        matched: list[_Match],
        reading: frozenset[str] | None = None,
    ) -> dict[int, float]:
        """Each candidate's score times the share of the query's words it covers (to a power), its
        name's prior, and its demotions (deprecated; acting where the query asks to read)."""
        if not matched:
            return {doc: scores[doc] * self._factor(doc, reading) for doc in candidates}
        covered = dict.fromkeys(candidates, 0.0)
        in_name = dict.fromkeys(candidates, 0)
        for _, matches, own, exact, named in matched:
            for doc in candidates:
                if doc in own or doc in exact:
                    covered[doc] += 1.0
                elif doc in matches:
                    covered[doc] += _COVER_SYNONYM
                if doc in named:
                    in_name[doc] += 1
        asked = len(matched)
        sizes = self._name_sizes
        return {
            doc: scores[doc]
            * self._factor(doc, reading)
            * (covered[doc] / asked) ** _COVERAGE
            * (1.0 + _NAME_PRIOR * min(1.0, in_name[doc] / max(sizes[doc], _NAME_WORDS)) if sizes[doc] else 1.0)
            for doc in candidates
        }

"""The words people use for the same tool action or object, for `search_tools`' queries; pure.

A query word also looks for the other words of its groups (at a discount, see `search.py`), so
"remove a folder" finds `delete_directory`. The groups are small on purpose and hold only words
that mean the same thing in a tool's name or description; a word may sit in several groups
("fetch" is a download and a read). They are the common verbs and nouns of tool catalogs and the
words users bring for them (`ping` for a notification, `paste` for a gist); groups added in a
tuning round were judged on the golden set's tuning batches alone (docs/toolhub.md). The last
groups are consumer services' domains (money, jobs, travel, food, media), judged on the tuning
halves of MetaTool's and BFCL's corpora (`benchmarks/retrieval_external.py`) and the golden set's
tuning batches together, each kept only where no part lost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from toolscore.toolhub.text import stem

__all__ = ["GROUPS", "INTENTS", "related", "stems"]

GROUPS: tuple[tuple[str, ...], ...] = (
    # verbs
    ("read", "open", "show", "view", "display", "retrieve", "load", "cat", "inspect", "get", "print"),
    ("write", "save", "store", "persist", "put"),
    ("create", "new", "make", "add", "generate", "init", "initialize", "register"),
    ("update", "edit", "modify", "change", "set", "patch", "alter", "rename"),
    ("delete", "remove", "erase", "drop", "destroy", "purge", "clear", "unlink", "forget", "wipe", "nuke", "rm"),
    ("list", "enumerate", "ls", "browse"),
    ("search", "find", "grep", "query", "lookup", "look", "locate", "seek", "match"),
    ("fetch", "download", "http", "url", "web", "request", "curl", "scrape", "crawl", "retrieve", "link"),
    ("run", "execute", "exec", "eval", "evaluate", "invoke", "launch"),
    ("send", "post", "publish", "submit", "deliver", "notify"),
    ("move", "rename", "relocate", "transfer", "mv"),
    ("copy", "duplicate", "clone", "cp"),
    ("close", "quit", "exit", "shut"),
    ("stop", "cancel", "kill", "terminate", "abort", "halt"),
    ("start", "begin", "launch", "spawn"),
    ("click", "press", "tap"),
    ("type", "enter", "input", "fill", "write"),
    ("compare", "diff", "difference", "change"),
    ("summarize", "summary", "overview", "outline", "abstract"),
    ("convert", "transform", "translate", "format"),
    ("install", "setup", "add"),
    ("wait", "sleep", "pause", "delay"),
    ("navigate", "go", "visit", "goto", "open"),
    ("reply", "respond", "answer", "comment"),
    ("merge", "combine", "join", "squash", "land"),
    ("upload", "attach", "push"),
    ("calculate", "compute", "math", "arithmetic", "sum", "add", "plus", "minus", "multiply", "divide"),
    ("schedule", "book", "reserve", "plan"),
    ("check", "verify", "validate", "test"),
    # standing in for the real thing: a mocked response, an emulated network, a fake server
    ("mock", "emulate", "simulate", "fake", "pretend", "stub"),
    # asking someone for something (`elicitation` stems apart from `elicit`, so both are here)
    ("ask", "elicit", "elicitation", "prompt"),
    # an approval is a review's verdict; `LGTM` is how developers write one
    ("review", "approve", "approval", "lgtm"),
    # nouns
    ("file", "document", "doc"),
    ("folder", "directory", "dir", "mkdir", "path"),  # a folder is named by its path
    ("repository", "repo"),
    ("issue", "ticket", "bug", "task", "crash"),
    ("pull", "pr", "merge"),
    ("branch", "ref"),
    ("commit", "revision", "changeset"),
    ("message", "chat", "msg", "dm"),
    ("email", "mail", "inbox"),
    ("image", "picture", "photo", "screenshot", "png", "jpeg", "img", "capture"),  # capture a screen: still...
    ("page", "website", "site", "webpage", "browser", "tab"),
    ("code", "source", "script", "snippet", "program", "codebase"),
    ("python", "py", "script"),
    ("database", "db", "sql", "table"),
    ("row", "record", "entry"),
    ("user", "person", "member", "people", "account", "profile"),
    ("calendar", "event", "meeting", "appointment"),
    ("note", "memo", "memory", "observation", "remember", "recall", "fact"),
    ("weather", "forecast", "temperature"),
    ("time", "date", "clock", "timezone", "now", "hour", "today"),
    ("place", "location", "address", "geocode", "map", "coordinate"),
    ("direction", "route", "distance", "travel"),
    ("package", "library", "dependency", "module"),
    ("variable", "namespace", "value", "var"),
    ("log", "console", "output"),
    ("log", "history"),
    ("key", "press", "keyboard"),
    ("tree", "hierarchy", "structure", "layout"),
    ("metadata", "info", "information", "detail", "stat", "property"),
    ("size", "byte", "length", "space"),
    ("content", "text", "body"),
    ("symbol", "function", "class", "definition", "method"),
    ("graph", "knowledge", "entity", "relation"),
    ("relation", "link", "connect", "associate", "relationship"),
    ("web", "internet", "online", "google", "bing"),
    ("secret", "password", "token", "credential"),
    ("research", "investigate", "study", "report"),
    ("environment", "env"),
    ("javascript", "js"),
    ("console", "devtools"),
    ("echo", "repeat", "reflect"),
    ("random", "sample"),
    ("current", "now", "present"),
    ("latest", "newest", "recent", "last"),
    ("config", "configuration", "configure", "setting", "option", "preference"),
    ("error", "failure", "fail", "exception", "crash"),
    ("status", "state", "health"),
    ("permission", "access", "role", "privilege"),
    ("login", "signin", "logon", "auth", "authenticate", "authentication"),
    ("shell", "terminal", "command", "bash", "cli", "cmd"),
    ("archive", "zip", "compress", "gzip", "tar"),
    ("count", "number", "total", "tally"),
    ("toggle", "enable", "disable", "activate", "deactivate"),
    ("undo", "revert", "rollback", "reset", "restore"),
    ("notification", "ping", "mention"),
    ("vulnerability", "vulnerable", "cve", "advisory", "exploit", "dependabot"),
    ("video", "recording", "record", "screencast", "capture"),  # ... or moving
    ("dialog", "popup", "modal", "confirm"),
    ("gist", "paste", "pastebin"),
    ("version", "release", "tag"),
    # consumer services: what a request is about, in the words of the service's description
    ("crypto", "cryptocurrency", "bitcoin", "blockchain"),
    ("currency", "money", "dollar"),
    ("job", "career", "employment", "vacancy"),
    ("trip", "travel", "vacation"),
    ("house", "home", "apartment", "housing"),
    ("recipe", "cook", "meal"),
    ("restaurant", "dining", "dine", "eatery"),
    ("diet", "nutrition"),
    ("movie", "film", "cinema"),
    ("song", "music"),
    ("law", "legal"),
    ("buy", "purchase"),
    ("discount", "coupon", "deal"),
    ("course", "lecture", "lesson", "tutorial"),
    ("podcast", "episode"),
    ("chart", "plot", "diagram", "visualize"),
)
"""Each group: words that name the same thing in a tool catalog. Stemmed on import."""


INTENTS: Mapping[str, tuple[str, ...]] = {
    "who": ("user",),
    "whom": ("user",),
    "whose": ("user",),
    "when": ("time", "date"),
    "where": ("location", "path"),
    "how many": ("count",),
    "how much": ("count",),
    "how big": ("size",),
    "how large": ("size",),
}
"""Question words and what they ask for, whatever the catalog: `who` asks for people (the user
group), `when` for a time, `where` for a place or a path, `how many` for a count, `how big` for a
size. They count at a discount (see `search.py`); `which`/`what` with a plural asks for a list."""


def _index(groups: tuple[tuple[str, ...], ...]) -> dict[str, frozenset[str]]:
    related: dict[str, set[str]] = defaultdict(set)
    for group in groups:
        stems = {stem(w) for w in group}
        for s in stems:
            related[s] |= stems - {s}
    return {s: frozenset(others) for s, others in related.items()}


_RELATED: Mapping[str, frozenset[str]] = _index(GROUPS)


def related(term: str) -> frozenset[str]:
    """The other stems of every group `term` (a stem) is in; empty when it is in none."""
    return _RELATED.get(term, frozenset())


def stems() -> frozenset[str]:
    """Every stem that has synonyms."""
    return frozenset(_RELATED)

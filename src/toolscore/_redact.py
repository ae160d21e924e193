"""Secret redaction in text and JSON values (`Redactor`); pure.

Patterns for credentials that commonly leak through tool output and server stderr: cloud and SaaS
API keys, bearer tokens, JWTs, private key blocks, passwords in URLs, and `key = value`
assignments whose key says secret. A match is replaced by `[REDACTED]` (for assignments and URLs,
only the secret part). `policy.redact` applies it to results and audit records where the config
asks; the downstream layer applies the built-ins to every server stderr line it quotes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from json import dumps, loads
from typing import Any

from toolscore._json import iter_strings, map_strings

__all__ = ["REDACTED", "Redactor", "redact_text"]

REDACTED = "[REDACTED]"

# A key that says secret: password, passwd, secret, token, api_key / apikey, secret_key, any name
# ending in one of these after `_`, `-` or `.` (`db_password`, `client_secret`, `GITHUB_TOKEN`),
# in any case. A whole word only: `passwords`, `password_hash` and `tokens` are not keys. The
# lookbehind pins every match to the start of a name part, so a pattern tries each position once.
_KEY = (
    r"(?i:(?<![A-Za-z0-9])"
    r"(?:password|passwd|secret|token|api[_-]?key|(?:secret|private|access)[_-]key)"
    r"(?![A-Za-z0-9_-]))"
)

_BUILTIN = [
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\bAKIA[0-9A-Z]{16}\b",  # AWS access key id
    r"\bgh[pousr]_[A-Za-z0-9]{36,}\b",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{22,}\b",
    r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{20,}",  # OpenAI / Anthropic style keys
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack
    r"\bAIza[0-9A-Za-z_\-]{35}\b",  # Google API key
    r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JWT
    r"(?i:\bbearer\s+)(?P<secret>[A-Za-z0-9._~+/\-]{16,}=*)",
    r"://[^/\s:@]+:(?P<secret>[^/\s@]+)@",  # user:password@host
    # `key = 'value with spaces'`, `"key": "value"`: a quoted value, whatever its length.
    _KEY + r"""["']?[ \t]{0,3}[:=][ \t]{0,3}(?P<q>["'])(?P<secret>(?:(?!(?P=q))[^\r\n])+)(?P=q)""",
    # `key=value`: an unquoted value of any length.
    _KEY + r"""["']?[ \t]{0,3}=[ \t]{0,3}(?P<secret>[^\s"',;&<>]+)""",
    # `key: value`: only where the value ends the line or the field (`key: value,` or `key: value
    # other_key: …`), so prose such as "reset your password: click below" is left alone.
    # Possessive, and no `:` or `=` in the value, so no text is scanned twice.
    _KEY + r"""["']?[ \t]{0,3}:[ \t]{0,3}(?P<secret>[^\s"',;&<>:=)\]}]++)"""
    r"""(?=[ \t]*(?:[\r\n,;})\]]|$)|[ \t]+[A-Za-z_][\w.-]{0,64}[ \t]?[:=])""",
]


# Every built-in pattern contains one of these (lowercased); text with none of them has no secret
# the built-ins could find, and skips the regular expressions entirely.
_ANCHORS = (
    "-----begin", "akia", "gh", "github_pat_", "sk-", "xox", "aiza", "eyj", "bearer", "://",
    "api_key", "api-key", "apikey", "secret", "token", "password", "passwd",
    "private_key", "private-key", "access_key", "access-key",
)  # fmt: skip


class Redactor:
    """Replaces secrets in strings and, recursively, in JSON values.

    Most tool output holds no secret, so a text is first checked for the built-in patterns'
    literal anchors with plain substring search; only a text containing one (or any text, when
    extra patterns are configured) goes through the regular expressions.
    """

    def __init__(self, extra_patterns: Iterable[str] = ()) -> None:
        self._builtin = [re.compile(p) for p in _BUILTIN]
        self._extra = [re.compile(p) for p in extra_patterns]

    @staticmethod
    def _sub(match: re.Match[str]) -> str:
        if "secret" not in match.re.groupindex or match.group("secret") is None:
            return REDACTED
        start, end = match.span("secret")
        base, whole = match.start(), match.group(0)
        return whole[: start - base] + REDACTED + whole[end - base :]

    def text(self, value: str) -> str:
        """`value` with every secret replaced."""
        lowered = value.lower()
        if any(anchor in lowered for anchor in _ANCHORS):
            for pattern in self._builtin:
                value = pattern.sub(self._sub, value)
        for pattern in self._extra:
            value = pattern.sub(self._sub, value)
        return value

    def json(self, value: Any) -> Any:
        """A JSON value with every string redacted, object keys included; `value` itself when none held a secret."""
        if all(self.text(s) == s for s in iter_strings(value, keys=True)):
            return value  # the common case: nothing to copy
        # `map_strings` leaves object keys alone; the decoder's object hook redacts them, so this
        # module keeps no JSON walk of its own.
        rekeyed = loads(dumps(value), object_pairs_hook=lambda pairs: {self.text(k): v for k, v in pairs})
        return map_strings(rekeyed, self.text)


_BUILTIN_ONLY = Redactor()


def redact_text(value: str) -> str:
    """`value` with every secret the built-in patterns find replaced."""
    return _BUILTIN_ONLY.text(value)

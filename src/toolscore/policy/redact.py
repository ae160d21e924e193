"""Secret redaction for results and audit records; pure.

Patterns for credentials that commonly leak through tool output: cloud and SaaS API keys, bearer
tokens, JWTs, private key blocks, passwords in URLs, and `key = value` assignments whose key says
secret. A match is replaced by `[REDACTED]` (for assignments and URLs, only the secret part).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTED", "Redactor"]

REDACTED = "[REDACTED]"

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
    r"""(?i:(?:api[_-]?key|secret|token|password|passwd)["']?\s{0,3}[:=]\s{0,3}["']?)(?P<secret>[^\s"',;]{8,})""",
]


# Every built-in pattern contains one of these (lowercased); text with none of them has no secret
# the built-ins could find, and skips the regular expressions entirely.
_ANCHORS = (
    "-----begin", "akia", "gh", "sk-", "xox", "aiza", "eyj", "bearer", "://",
    "api_key", "api-key", "apikey", "secret", "token", "password", "passwd",
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
        """A JSON value with every string redacted (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.json(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.json(v) for k, v in value.items()}
        return value

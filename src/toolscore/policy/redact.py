"""Secret redaction for results and audit records (`Redactor`, `RedactingAuditSink`); pure.

Patterns for credentials that commonly leak through tool output: cloud and SaaS API keys, bearer
tokens, JWTs, private key blocks, passwords in URLs, and `key = value` assignments whose key says
secret. A match is replaced by `[REDACTED]` (for assignments and URLs, only the secret part).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from json import dumps, loads
from typing import Any

from toolscore._json import iter_strings, map_strings
from toolscore.audit.sinks import AuditRecord, AuditSink

__all__ = ["REDACTED", "RedactingAuditSink", "Redactor"]

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
    "-----begin", "akia", "gh", "github_pat_", "sk-", "xox", "aiza", "eyj", "bearer", "://",
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
        """A JSON value with every string redacted, object keys included; `value` itself when none held a secret."""
        if all(self.text(s) == s for s in iter_strings(value, keys=True)):
            return value  # the common case: nothing to copy
        # `map_strings` leaves object keys alone; the decoder's object hook redacts them, so this
        # module keeps no JSON walk of its own.
        rekeyed = loads(dumps(value), object_pairs_hook=lambda pairs: {self.text(k): v for k, v in pairs})
        return map_strings(rekeyed, self.text)


class RedactingAuditSink:
    """Redacts argument names and values, violations and error texts before they reach the audit file."""

    def __init__(self, inner: AuditSink, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    def write(self, record: AuditRecord) -> None:
        """Redact, then pass on."""
        update: dict[str, Any] = {}
        if (
            record.arguments is not None
            and (arguments := self._redactor.json(record.arguments)) is not record.arguments
        ):
            update["arguments"] = arguments
        if record.error is not None and (error := self._redactor.text(record.error)) != record.error:
            update["error"] = error
        # A name can be the secret (`{"sk-…": true}`), and a violation quotes what it refused.
        for name in ("argument_names", "violations"):
            texts: tuple[str, ...] = getattr(record, name)
            clean = tuple(self._redactor.text(t) for t in texts)
            if clean != texts:
                update[name] = clean
        self._inner.write(record.model_copy(update=update) if update else record)  # most records hold no secret

    def close(self) -> None:
        """Close the wrapped sink."""
        self._inner.close()

"""Secret redaction for results and audit records (`Redactor`, `RedactingAuditSink`); pure.

The patterns and the `Redactor` live in `toolscore._redact` (the downstream layer uses them too).
"""

from __future__ import annotations

from typing import Any

from toolscore._redact import REDACTED, Redactor
from toolscore.audit.sinks import AuditRecord, AuditSink

__all__ = ["REDACTED", "RedactingAuditSink", "Redactor"]


class RedactingAuditSink:
    """Redacts argument names and values, violations and error texts before they reach the audit file."""

    def __init__(self, inner: AuditSink, redactor: Redactor | None) -> None:
        self._inner = inner
        self.redactor = redactor
        """What redacts (None: records pass as they are); a live reload of the config replaces it."""

    def write(self, record: AuditRecord) -> None:
        """Redact, then pass on."""
        redactor = self.redactor
        if redactor is None:
            self._inner.write(record)
            return
        update: dict[str, Any] = {}
        if record.arguments is not None and (arguments := redactor.json(record.arguments)) is not record.arguments:
            update["arguments"] = arguments
        if record.error is not None and (error := redactor.text(record.error)) != record.error:
            update["error"] = error
        # A name can be the secret (`{"sk-…": true}`), and a violation quotes what it refused.
        for name in ("argument_names", "violations"):
            texts: tuple[str, ...] = getattr(record, name)
            clean = tuple(redactor.text(t) for t in texts)
            if clean != texts:
                update[name] = clean
        self._inner.write(record.model_copy(update=update) if update else record)  # most records hold no secret

    def close(self) -> None:
        """Close the wrapped sink."""
        self._inner.close()

"""servers.json: Claude Desktop's `mcpServers` shape plus toolscore's own options; pure.

A config file looks like::

    {
      "mcpServers": {
        "files": {"command": "mcp-server-filesystem", "args": ["${HOME}/src"], "timeout": 30},
        "web":   {"type": "http", "url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
      },
      "toolscore": {"separator": "__", "default_timeout": 60},
      "constraints": {"enabled": false}
    }

VS Code's top-level `servers` is accepted in place of `mcpServers`. Strings may use `${VAR}` and
`${VAR:-default}`; `${TOOLSCORE_CONFIG_DIR}` is the directory holding the file, and
`${TOOLSCORE_SERVERS}` (unless set) is `<that directory>/.toolscore/servers`, where
`toolscore install` puts servers, and `${TOOLSCORE_PYTHON_PREFIX}` is the Python installation
their venvs link to. Keys other clients
put in a server entry are kept and ignored; toolscore's own sections reject unknown keys, so a
typo there is an error rather than a silently ignored setting.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import structlog
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from toolscore._envfile import env_file_for, read_env_file
from toolscore._json import JsonPath, format_path, map_strings_at
from toolscore.errors import ConfigError

log = structlog.get_logger("toolscore.config")

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_SEPARATOR",
    "DEFAULT_SLOW_CALL_SECONDS",
    "DEFAULT_TIMEOUT",
    "TOKEN_ENV",
    "ArgumentRules",
    "AuditConfig",
    "CapabilitySettings",
    "ConcurrencyRules",
    "Config",
    "ConstraintsConfig",
    "Credentials",
    "FlowRule",
    "GatewaySettings",
    "HttpAuth",
    "HttpSettings",
    "InstallHints",
    "LoopSettings",
    "ModelConfig",
    "PathRules",
    "PlanSettings",
    "PluginConfig",
    "RateLimit",
    "ResultRules",
    "SecretFile",
    "ServerConfig",
    "ServerConstraints",
    "Shorthand",
    "TokenExchangeSettings",
    "ToolFilter",
    "ToolHubSettings",
    "ToolRules",
    "audit_path",
    "config_candidates",
    "default_config_path",
    "load_config",
    "parse_config",
    "server_log_dir",
    "state_dir",
    "trajectory_path",
]

DEFAULT_TIMEOUT = 60.0
"""Seconds a downstream call may take when neither the server nor the call sets a timeout."""
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds a server gets to spawn/connect and list its tools before it is marked down."""
DEFAULT_SEPARATOR = "__"
"""Between the server prefix and the tool name: `files__read_file`."""
TOKEN_ENV = "TOOLSCORE_TOKEN"
"""The environment variable holding the HTTP front's bearer token (docs/security.md)."""
DEFAULT_SLOW_CALL_SECONDS = 5.0
"""Calls slower than this are logged as slow."""
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The largest message a front client may send: the SDK's own HTTP default."""
DEFAULT_MAX_RESULT_BYTES = 32 * 1024 * 1024
"""The largest message a downstream may send (a few full-page screenshots)."""

_MASK = "***"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
CONFIG_DIR_VAR = "TOOLSCORE_CONFIG_DIR"
SERVERS_VAR = "TOOLSCORE_SERVERS"


def _regexes(patterns: tuple[str, ...]) -> tuple[str, ...]:
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
    return patterns


def _glob_list(value: Any) -> Any:
    # A bare string would otherwise read "Input should be a valid tuple", which names our type, not the fix.
    if not isinstance(value, list | tuple):
        raise PydanticCustomError("globs", 'must be a list of tool names or globs, e.g. ["read_*"]')
    return value


_Globs = Annotated[tuple[str, ...], BeforeValidator(_glob_list)]
"""Tool names or glob patterns (allow/deny lists)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolFilter(_Frozen):
    """Which of a server's tools are exposed, and under which names."""

    allow: _Globs | None = None
    """Glob patterns over the downstream tool names; only matches are exposed (None: all)."""
    deny: _Globs = ()
    """Glob patterns over the downstream tool names that are never exposed (wins over allow)."""
    rename: dict[str, str] = Field(default_factory=dict)
    """Downstream tool name -> exposed tool name (before the server prefix is added)."""


class ToolRules(_Frozen):
    """Which tools may be called at all (globs; global rules match exposed names, per-server ones downstream names)."""

    allow: _Globs | None = None
    deny: _Globs = ()


class PathRules(_Frozen):
    """Confinement: every path in a call's arguments must resolve (symlinks and `..` followed) under `roots`.

    Which strings are paths: every string (in arrays and objects too) under an argument whose
    name says path (`path`, `paths`, `file_path`, `filePath`, `dir`, `directory`, ...; see
    docs/policy.md), under a name listed in `arguments` or, for one tool, in `tools`, or under a
    schema property with a path `format`; and every `file:` URI anywhere. A checked path is
    passed on as its resolved real path, so a symlink swapped after the check cannot redirect it.
    """

    roots: tuple[str, ...]
    """Directories paths must resolve under; the entry `"client"` adds the calling client's own
    roots (MCP roots, asked of it at each call)."""
    arguments: tuple[str, ...] = ()
    """More argument names (globs, case-insensitive) holding paths, at any depth."""
    tools: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Exposed tool name (glob) -> more argument names holding paths in that tool's calls."""


class ArgumentRules(_Frozen):
    """Limits on what a call's arguments may hold."""

    max_bytes: int | None = Field(default=None, gt=0)
    """Size of the arguments as compact JSON."""
    deny_patterns: tuple[str, ...] = ()
    """Regular expressions no string argument may match (e.g. `rm\\s+-rf\\s+/`)."""
    paths: PathRules | None = None

    _check_patterns = field_validator("deny_patterns")(lambda v: _regexes(v))


class ResultRules(_Frozen):
    """Limits on what comes back."""

    max_bytes: int | None = Field(default=None, gt=0)
    """Text of the result's content blocks."""
    on_exceed: Literal["truncate", "reject"] = "truncate"
    redact: bool = False
    """Replace secrets (API keys, tokens, private keys, passwords in URLs) in results and audit records."""
    redact_patterns: tuple[str, ...] = ()
    """Extra regular expressions to redact."""

    _check_patterns = field_validator("redact_patterns")(lambda v: _regexes(v))


class ConcurrencyRules(_Frozen):
    """How many calls may run at once on one server; more wait in a bounded queue, then are rejected."""

    per_server: int | None = Field(default=None, ge=1)
    queue: int = Field(default=0, ge=0)


class RateLimit(_Frozen):
    """A token bucket: `rate` calls per second on average, bursts up to `burst`."""

    scope: Literal["tool", "server", "session"] = "tool"
    """One bucket per tool, per server, or per front client session."""
    match: str = "*"
    """Glob over exposed tool names this limit applies to."""
    rate: float = Field(gt=0)
    burst: int = Field(default=1, ge=1)


class PluginConfig(_Frozen):
    """A constraint hook from an installed package (entry point group `toolscore.constraints`)."""

    name: str
    mode: Literal["enforce", "permissive"] = "enforce"
    """`enforce`: a failing hook refuses the call; `permissive`: it is logged and the call goes on."""
    options: dict[str, Any] = Field(default_factory=dict)


class ServerConstraints(_Frozen):
    """Per-server overrides of the constraint rules: each section replaces the global one, but `tools` adds to it."""

    tools: ToolRules | None = None
    destructive: Literal["allow", "deny", "confirm"] | None = None
    arguments: ArgumentRules | None = None
    results: ResultRules | None = None
    concurrency: ConcurrencyRules | None = None


class InstallHints(_Frozen):
    """How `toolscore install` sets a server up, under the servers prefix (`${TOOLSCORE_SERVERS}`)."""

    pip: tuple[str, ...] = ()
    """Requirements installed into the server's own venv, `<prefix>/venvs/<server>`."""
    python: str | None = None
    """The interpreter that venv is made from (default: toolscore's own)."""
    npm: tuple[str, ...] = ()
    """Packages installed under `<prefix>/npm/<server>/node_modules` (launch them by path, not npx)."""
    apt: tuple[str, ...] = ()
    """Debian packages (installed when run as root; otherwise reported)."""
    dirs: tuple[str, ...] = ()
    """Directories created under the prefix (state, work dirs)."""
    run: tuple[tuple[str, ...], ...] = ()
    """Commands run last, in order (pre-warming caches, downloading wheels)."""


class Shorthand(_Frozen):
    """A plan tag bound to one tool of a server: `<tag>text</tag>` calls `tool` with the text."""

    tag: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
    """The tag (default: the server name)."""
    tool: str
    """The downstream tool name."""
    primary: str | None = None
    """The parameter that text content binds to; a dotted path for nested arguments (`params.code`)."""


_TAG = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def _tags(value: Any, where: str = "") -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) and _TAG.fullmatch(t) for t in value):
        raise PydanticCustomError(
            "tags",
            "{where}must be a list of capability tags (lower-case a-z, 0-9, _ and -, at most 32 characters), "
            'e.g. ["search", "web"]',
            {"where": where},
        )
    return tuple(value)


def _capabilities(value: Any) -> Any:
    # One readable message for the list-or-object union, naming the tool at fault.
    if value is None or isinstance(value, list | tuple):
        return value if value is None else _tags(value)
    if isinstance(value, dict):
        return {str(tool): _tags(tags, f"'{tool}': ") for tool, tags in value.items()}
    raise PydanticCustomError("capabilities", "must be a list of tags for every tool, or tool name -> list of tags")


_PRINCIPAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
"""A principal's name, as a token file or an access token gives it (`toolscore.front.oauth.PRINCIPAL_NAME`)."""
_BEARER_VALUE = re.compile(r"[\x21-\x7e]{1,16384}")
"""A secret sent as `Authorization: Bearer <secret>`: visible ASCII, no spaces (nothing that breaks a header)."""


def _bearer_secret(value: Any) -> Any:
    # Messages never quote the value: it is a secret.
    if isinstance(value, str) and not _BEARER_VALUE.fullmatch(value):
        hint = " (give the secret alone: the gateway sends 'Authorization: Bearer <secret>')" if " " in value else ""
        raise PydanticCustomError(
            "bearer_secret", "must be one line of visible ASCII without spaces, at most 16 KiB{hint}", {"hint": hint}
        )
    return value


_BearerSecret = Annotated[str, BeforeValidator(_bearer_secret)]


def _principal_key(value: Any) -> Any:
    if isinstance(value, str) and not _PRINCIPAL_NAME.fullmatch(value):
        raise PydanticCustomError(
            "principal_name",
            "'{name}' is not a principal's name: 1-64 of A-Z a-z 0-9 _ . @ - starting with a letter or digit",
            {"name": value[:80]},
        )
    return value


_PrincipalName = Annotated[str, BeforeValidator(_principal_key)]


@dataclass(frozen=True, slots=True)
class SecretFile:
    """`credentials.per_principal_file`: the file's path and the (principal, secret) lines read from it."""

    path: str
    entries: tuple[tuple[str, str], ...] = field(default=(), repr=False)


def parse_secret_lines(text: str, source: str) -> tuple[tuple[str, str], ...]:
    """`NAME SECRET` lines (blank lines and `#` comments skipped), as a token file's; messages name
    the file and line, never a secret."""
    entries: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {n}"
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{where}: expected 'NAME SECRET' (a principal's name, a space, its secret)")
        name, secret = parts
        if not _PRINCIPAL_NAME.fullmatch(name):
            raise ValueError(f"{where}: a name is 1-64 of A-Z a-z 0-9 _ . @ - and starts with a letter or digit")
        if not _BEARER_VALUE.fullmatch(secret):
            raise ValueError(f"{where}: the secret must be visible ASCII, at most 16 KiB")
        if name in entries:
            raise ValueError(f"{where}: the name '{name}' is given twice")
        entries[name] = secret
    if not entries:
        raise ValueError(f"the file {source} holds no 'NAME SECRET' line")
    return tuple(entries.items())


def _read_secret_file(value: Any, info: ValidationInfo) -> SecretFile:
    """The file read now (so a reload that cannot read it keeps the running config), its mode
    checked as the HTTP front's token file's is; a disabled server's is not read."""
    if isinstance(value, SecretFile):
        return value
    if not isinstance(value, str) or not value.strip():
        raise PydanticCustomError("secret_file", "must be the path of a file of 'NAME SECRET' lines")
    if (info.context or {}).get("disabled"):
        return SecretFile(value)
    path = Path(value).expanduser()
    return SecretFile(value, parse_secret_lines(read_secret_text(path, "the file"), str(path)))


def read_secret_text(path: Path, what: str) -> str:
    """The text of a file of secrets (`what` names it in errors: "the token file"), refused unless
    only its owner can read and write it.

    Raises:
        ValueError: it is open to group or others, cannot be read, or is not text.
    """
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        # Like ssh with private keys: a secret others can read (or replace) is not a secret.
        if os.name == "posix" and mode & 0o077:
            raise ValueError(f"{what} {path} is open to group or others (mode {mode:o}): chmod 600 it")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what} {path} is not text") from None


def _check_endpoint(value: str) -> str:
    if not re.fullmatch(r'https?://[^\s/?#"\\]+(/[^\s#"\\]*)?', value):
        raise ValueError(f"{value!r} is not an http(s) URL")
    if value.startswith("http://"):
        host = re.sub(r":\d+$", "", value.removeprefix("http://").split("/")[0]).strip("[]")
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("reach the token endpoint over https (plain http only on a loopback address)")
    return value


_SecretFileField = Annotated[SecretFile, PlainValidator(_read_secret_file), PlainSerializer(lambda f: f.path)]
"""Given as a path, held as the path and the lines read from it, written back as the path."""


class TokenExchangeSettings(_Frozen):
    """`credentials.token_exchange`: OAuth 2.0 token exchange (RFC 8693) for the caller's access token."""

    token_endpoint: str
    """The authorization server's token endpoint: https (plain http only on loopback)."""
    client_id: str = Field(min_length=1)
    """The gateway's own client at that server."""
    client_secret: str | None = None
    """Its secret (write `${VAR}`); none: a public client (`client_id` sent in the form)."""
    client_auth: Literal["basic", "post"] = "basic"
    """How the client authenticates: HTTP Basic (`client_secret_basic`) or in the form (`client_secret_post`)."""
    audience: str | None = Field(default=None, min_length=1)
    """Whom the issued token is for (default: the server's `url`)."""
    scope: str | None = None
    """The scopes asked for the issued token, space-separated."""

    _check_endpoint = field_validator("token_endpoint")(lambda v: _check_endpoint(v))

    @field_validator("scope")
    @classmethod
    def _check_scope(cls, value: str | None) -> str | None:
        if value is not None and not all(_SCOPE_TOKEN.fullmatch(s) for s in value.split()):
            raise ValueError("scopes are printable ASCII without quotes or backslashes, separated by spaces")
        return value

    def __repr_args__(self) -> Any:
        for key, value in super().__repr_args__():
            yield key, (_MASK if key == "client_secret" and value else value)


class Credentials(_Frozen):
    """A server's `credentials`: how the gateway authenticates to it for each principal
    (docs/security.md#downstream-credentials). Exactly one of the three; the client's own token is
    never sent."""

    per_principal: dict[_PrincipalName, _BearerSecret] | None = None
    """Principal name -> the bearer secret sent for it (write `${VAR}`)."""
    per_principal_file: (
        Annotated[SecretFile, PlainValidator(_read_secret_file), PlainSerializer(lambda f: f.path)] | None
    ) = None
    """A file of `NAME SECRET` lines, mode 600 (read when the config is loaded or reloaded)."""
    token_exchange: TokenExchangeSettings | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Credentials:
        given = [k for k in ("per_principal", "per_principal_file", "token_exchange") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'per_principal', 'per_principal_file' and 'token_exchange'"
                + (f" (not {' and '.join(given)})" if given else "")
            )
        return self

    @property
    def secrets(self) -> Mapping[str, str] | None:
        """Principal -> secret, from `per_principal` or its file (None: token exchange)."""
        if self.per_principal is not None:
            return self.per_principal
        return dict(self.per_principal_file.entries) if self.per_principal_file is not None else None

    def __repr_args__(self) -> Any:
        for key, value in super().__repr_args__():
            yield key, (dict.fromkeys(value, _MASK) if key == "per_principal" and isinstance(value, dict) else value)


class ServerConfig(BaseModel):
    """One downstream server: stdio (`command`) or HTTP/SSE (`url`)."""

    # Other MCP clients put their own keys here; they are kept and ignored.
    model_config = ConfigDict(frozen=True, extra="allow")

    name: str
    type: Literal["stdio", "http", "streamable-http", "streamableHttp", "sse", "memory"] | None = None
    """How to reach it; inferred from `command`/`url`. `memory`: an SDK server the embedding program
    runs in process (`open_gateway(memory_servers=...)`, `toolscore.testing`)."""
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # toolscore's own per-server options
    disabled: bool = False
    credentials: Credentials | None = None
    """How the gateway authenticates to this HTTP server for each calling principal: a secret per
    principal, or a token exchanged for the caller's access token (docs/security.md#downstream-credentials).
    Calls then go over one connection per principal; `headers` stay on every connection, the
    tools are listed on one that carries `headers` alone."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds a call may take on this server (default: the gateway's `default_timeout`)."""
    spill_bytes: int | None = Field(default=None, ge=1024)
    """Results larger than this are kept by the gateway and previewed (docs/toolhub.md#results-by-reference);
    None: `toolscore.spill_bytes`."""
    connect_timeout: float | None = Field(default=None, gt=0)
    on_timeout: Literal["ping", "restart"] = "ping"
    """After a call times out: `ping` the server and restart it if it does not answer within
    `ping_timeout` (it is wedged), or `restart` it at once (code runners stuck in user code)."""
    ping_timeout: float = Field(default=5.0, gt=0)
    sampling: Literal["allow", "deny", "confirm"] = "allow"
    """A sampling request of this server during a client's request: forwarded to that client, refused
    (the server gets an error), or forwarded once the user agrees (elicitation; refused if the client
    cannot ask)."""
    era: Literal["auto", "handshake", "2026-07-28"] | None = None
    """`auto`: a 2026-07-28 client's calls go to the server in that era where it offers it, on a
    second connection (a second process, for stdio) opened at the first such call; `handshake`:
    every client's calls share the one handshake-era connection; `2026-07-28`: one connection in
    that era for every client, the server's questions to a handshake-era client asked by
    back-channel (docs/servers.md). Default: `auto` for a server reached by URL, `handshake` for a
    stdio server, whose second process would hold a state of its own; a server that speaks only
    2026-07-28 (it refuses `initialize`) gets one connection in that era unless this says `handshake`."""
    backoff_reset_seconds: float = Field(default=10.0, gt=0)
    """Uptime after which a crash counts as a fresh failure: the restart delay (0.5 s, doubling to
    10 s while the server keeps failing) starts over at 0.5 s."""
    health_interval: float | None = Field(default=10.0, gt=0)
    """Seconds between health checks (a ping that must answer within `ping_timeout`) while the
    server is up; null turns them off."""
    breaker_failures: int = Field(default=2, ge=1, le=1000)
    """Failed health checks in a row that open the circuit breaker: calls fail fast meanwhile."""
    breaker_cooldown: float = Field(default=5.0, ge=0)
    """Seconds the breaker stays open before the next health check probes the server again."""
    health_failures: int = Field(default=3, ge=1, le=1000)
    """Failed health checks in a row that restart the server (a wedged process is killed)."""
    isolation: Literal["shared", "session"] = "shared"
    """`session`: each front client gets its own instance of this server, started on its first
    call (a code sandbox whose state must not be shared between clients)."""
    max_sessions: int = Field(default=8, ge=1)
    """With `isolation: session`: instances kept at once; the least recently used idle one goes."""
    session_idle_seconds: float = Field(default=600.0, gt=0)
    """With `isolation: session`: an instance unused this long is stopped."""
    tools: ToolFilter = Field(default_factory=ToolFilter)
    prefix: str | None = None
    """Namespace for this server's tools (default: the server name); "" exposes them unprefixed."""
    shorthand: Shorthand | tuple[Shorthand, ...] | None = None
    """Plan tags bound to this server's tools (see docs/plan-language.md)."""
    constraints: ServerConstraints = Field(default_factory=ServerConstraints)
    """Overrides of the top-level `constraints` rules for this server."""
    install: InstallHints | None = None
    """What `toolscore install` does for this server."""
    capabilities: Annotated[tuple[str, ...] | dict[str, tuple[str, ...]] | None, BeforeValidator(_capabilities)] = None
    """Capability tags (docs/toolhub.md): a list for every tool of this server, or downstream tool
    name -> tags."""
    priority: int = Field(default=0, ge=-1000, le=1000)
    """Among tools offering one capability whose live scores tie, a higher priority goes first."""
    argument_maps: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Downstream tool name -> {capability argument: this tool's argument}, for capability calls."""
    poisoning: Literal["flag", "quarantine", "off"] = "flag"
    """The poisoning scan of this server's tool, prompt, template and skill definitions (docs/security.md):
    `flag` lists one with findings and warns in `check` and the console; `quarantine` does not route
    it until it is approved in `poisoning_approved`; `off` skips the scan."""
    poisoning_approved: tuple[str, ...] = ()
    """Tools listed despite their findings: `name@digest` (that definition only, the digest `check
    --json` shows) or a downstream tool name glob (whatever its definition becomes)."""
    pinning: Literal["off", "warn", "enforce"] = "off"
    """Pin each tool's (prompt's, template's, skill's) first definition seen (`<state dir>/pins.json`,
    docs/security.md): `warn` logs a changed one and lists it; `enforce` holds it (not routed) until
    `toolscore pins approve`."""
    trust: Annotated[Literal["trusted", "untrusted"], BeforeValidator(_trust)] = "trusted"
    """Whether this server's results may carry text written by others (web pages, search results):
    `untrusted` labels every result of it (docs/security.md#data-flow-labels)."""
    untrusted_tools: tuple[str, ...] = ()
    """Downstream tool name globs whose results are untrusted on a trusted server."""

    @property
    def shorthands(self) -> tuple[Shorthand, ...]:
        """The shorthand bindings as a tuple, with each tag filled in."""
        if self.shorthand is None:
            return ()
        items = self.shorthand if isinstance(self.shorthand, tuple) else (self.shorthand,)
        return tuple(s if s.tag else s.model_copy(update={"tag": self.name}) for s in items)

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if self.type == "memory":
            if self.command is not None or self.url is not None:
                raise ValueError("type 'memory' takes neither 'command' nor 'url'")
            return self
        if self.command is None and self.url is None:
            raise ValueError("needs either 'command' (stdio) or 'url' (http/sse)")
        if self.command is not None and self.url is not None:
            raise ValueError("has both 'command' and 'url': keep one")
        if self.url is not None and self.type == "stdio":
            raise ValueError("type 'stdio' needs 'command', not 'url'")
        if self.command is not None and self.type not in (None, "stdio"):
            raise ValueError(f"type '{self.type}' needs 'url', not 'command'")
        if self.credentials is not None and self.url is None:
            raise ValueError("'credentials' is for a server reached by 'url' (http or sse); a stdio server takes 'env'")
        if self.era == "2026-07-28" and self.type == "sse":
            raise ValueError("era '2026-07-28' is not spoken over SSE (a handshake-era transport): use 'http'")
        return self

    @property
    def transport(self) -> Literal["stdio", "http", "sse", "memory"]:
        """The transport in use, normalised over the spellings different clients write."""
        if self.type == "memory":
            return "memory"
        if self.command is not None:
            return "stdio"
        return "sse" if self.type == "sse" else "http"

    def __repr_args__(self) -> Any:
        # Environment values and headers hold credentials: never print them.
        for key, value in super().__repr_args__():
            if key in ("env", "headers") and isinstance(value, dict):
                yield key, dict.fromkeys(value, _MASK)
            else:
                yield key, value


class AuditConfig(_Frozen):
    """Where the audit log goes and what it keeps."""

    path: str | None = None
    """JSON Lines file (default: `<state dir>/audit.jsonl`); "" turns the file off."""
    include_arguments: bool = False
    """Record argument values, not just their names (arguments can hold secrets)."""
    fsync: bool = False
    """Force every record to disk before the call is answered (survives a power cut; slower)."""
    max_bytes: int | None = Field(default=None, gt=0)
    """Rotate the file past this size."""
    backups: int = Field(default=3, ge=0)
    """Rotated files kept (`audit.jsonl.1` is the newest)."""
    stream: bool = False
    """Also append every record to the Redis stream `<prefix>audit` of `toolscore.state` (shared by
    replicas; `toolscore audit stats --shared` reads it). Needs `state` to be a Redis URL."""
    stream_max_records: int = Field(default=1_000_000, ge=1000)
    """The stream is trimmed to about this many records."""
    stream_ttl_seconds: float = Field(default=7 * 86400.0, gt=0)
    """The stream expires this long after its last record."""


class Quota(_Frozen):
    """What one principal may use (`constraints.principals`); each limit off unless set."""

    calls_per_minute: int | None = Field(default=None, ge=1)
    """Tool calls a minute, as a bucket that refills evenly (bursts up to the whole minute's)."""
    concurrent: int | None = Field(default=None, ge=1)
    """Tool calls running at once."""
    calls_per_day: int | None = Field(default=None, ge=1)
    """Tool calls a day (UTC)."""
    result_bytes_per_day: int | None = Field(default=None, ge=1)
    """Bytes of results a day (UTC); the call that crosses the line is answered, the next refused."""
    delegate_tasks_per_hour: int | None = Field(default=None, ge=1)
    """`delegate` tasks started an hour, as a bucket that refills evenly (a resumed task is not a new one)."""


class PrincipalRules(_Frozen):
    """Rules for one principal or role (`constraints.principals`), on top of the global ones."""

    tools: ToolRules = Field(default_factory=ToolRules)
    """Globs over exposed tool names: deny wins; with `allow`, only what it names."""
    quota: Quota = Field(default_factory=Quota)


_PrincipalKey = Annotated[str, Field(pattern=r"^(role:)?[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")]


_FLOW_LABEL = re.compile(r"untrusted|server:\S{1,128}")
"""A data-flow label (`toolscore.trust.labels`): `untrusted`, or `server:NAME` for one server's results."""


def _flow_label(value: Any) -> Any:
    if isinstance(value, str) and not _FLOW_LABEL.fullmatch(value):
        raise PydanticCustomError(
            "flow_label", "'{label}' is not a label: `untrusted` or `server:NAME`", {"label": value[:80]}
        )
    return value


class FlowRule(_Frozen):
    """What data carrying one label may reach (docs/policy.md#the-flow-rule): tools named by globs over the
    exposed and the canonical name (`microsandbox__*`, `*__write*`)."""

    deny: tuple[str, ...] = ()
    """Tools that may never receive such data."""
    confirm: tuple[str, ...] = ()
    """Tools that may receive it only once the user agrees (refused in plans and `delegate`)."""
    identifiers: Literal["carry", "pass"] = "carry"
    """`pass`: a plan reference whose value is an identifier (a number, a boolean, or one token of
    at most 64 characters without spaces) brings no label: it cannot hold an instruction."""
    after_reading: Literal["quoted", "every_call"] = "quoted"
    """For a call the model wrote after reading such data (a later `orchestrate` turn, a `delegate`
    call, a client's own call): `quoted` labels it when its arguments quote what was read;
    `every_call` labels every such call, since a model that read the text may have been steered."""


def _trust(value: Any) -> Any:
    # Gemini CLI's `trust: true|false` (whether to skip its own confirmations) says nothing about
    # the content a server returns: a boolean leaves the default.
    return "trusted" if isinstance(value, bool) else value


class ConstraintsConfig(_Frozen):
    """The constraint-hook phase of the engine; off unless enabled."""

    enabled: bool = False
    tools: ToolRules = Field(default_factory=ToolRules)
    destructive: Literal["allow", "deny", "confirm"] = "allow"
    """What to do with tools annotated `destructiveHint`: call, refuse, or ask the user first."""
    arguments: ArgumentRules = Field(default_factory=ArgumentRules)
    results: ResultRules = Field(default_factory=ResultRules)
    concurrency: ConcurrencyRules = Field(default_factory=ConcurrencyRules)
    rate_limits: tuple[RateLimit, ...] = ()
    batching: bool = False
    """Coalesce identical concurrent calls to read-only tools into one downstream call."""
    plugins: tuple[PluginConfig, ...] = ()
    """Third-party hooks, run after the built-in rules, in this order."""
    principals: dict[_PrincipalKey, PrincipalRules] = Field(default_factory=dict)
    """Rules per principal (`NAME`, as a token file or an access token names it) or per role
    (`role:NAME`), composed with the global rules: deny wins (docs/policy.md#per-principal-rules)."""
    flow: dict[Annotated[str, BeforeValidator(_flow_label)], FlowRule] | None = None
    """Label -> the tools data carrying it may not reach (docs/policy.md#the-flow-rule): a plan step's
    arguments carry the labels of the results they reference; a `delegate` call those of the
    results the model saw that its arguments quote."""
    flow_passthrough: Literal["off", "warn", "enforce"] = "warn"
    """With `flow`: a client's own calls checked against the client's recent untrusted results
    (8 or more characters quoted): `warn` logs it, `enforce` refuses it (asks, for `confirm`)."""


class PlanSettings(_Frozen):
    """Limits of `orchestrate` plans."""

    max_steps: int = Field(default=64, ge=1, le=1000)
    max_depth: int = Field(default=8, ge=1, le=32)
    max_bytes: int = Field(default=64 * 1024, ge=1024, le=1024 * 1024)
    """The size cap of one plan (UTF-8 bytes); at most 1 MiB, since parsing blocks the event loop."""
    max_alternatives: int = Field(default=8, ge=1, le=64)
    budget_seconds: float = Field(default=300.0, gt=0)
    """Wall-time budget of one plan; when it runs out, running steps are cancelled."""
    server_concurrency: int = Field(default=8, ge=1)
    """Plan steps running at once on one server, across all plans."""
    result_view_bytes: int = Field(default=4096, ge=256)
    """How much of one step's result the model sees; references always use the full result."""
    turn_view_bytes: int = Field(default=16384, ge=1024)
    episodes: int = Field(default=64, ge=1)
    """Episodes kept in memory for references across turns (least recently used dropped)."""


_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
"""An OAuth scope (RFC 6749 section 3.3): printable ASCII without spaces, quotes or backslashes."""


class HttpAuth(_Frozen):
    """`toolscore.http.auth`: the HTTP front as an OAuth 2.1 resource server (docs/security.md)."""

    issuer: str
    """The authorization server's issuer identifier, exactly as its tokens' `iss` spell it."""
    audience: str
    """This gateway's resource URL (`https://gateway.example.com/mcp`): tokens must name it in `aud`."""
    jwks: str
    """The issuer's signing keys (a JWK Set): an https URL, or a file path (re-read when it changes)."""
    scopes: tuple[str, ...] = ()
    """Scopes every token must carry (`scope` or `scp`)."""
    roles_claim: str = Field(default="roles", min_length=1)
    """The claim holding the principal's roles (a list of strings); a dotted path reaches into objects."""
    leeway_seconds: int = Field(default=30, ge=0, le=300)
    """Clock skew allowed on `exp`, `nbf` and `iat`."""

    @field_validator("issuer", "audience")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not re.fullmatch(r'https?://[^\s/?#"\\]+(/[^\s?#"\\]*)?', value):
            raise ValueError(f"{value!r} is not an http(s) URL without query or fragment")
        return value

    @field_validator("jwks")
    @classmethod
    def _check_jwks(cls, value: str) -> str:
        if value.startswith("http://"):
            host = re.sub(r":\d+$", "", value.removeprefix("http://").split("/")[0]).strip("[]")
            if host not in ("127.0.0.1", "localhost", "::1"):
                raise ValueError("fetch the keys over https (plain http only from a loopback address)")
        elif not value.strip():
            raise ValueError("name the issuer's JWK Set: an https URL or a file path")
        return value

    @field_validator("scopes")
    @classmethod
    def _check_scopes(cls, scopes: tuple[str, ...]) -> tuple[str, ...]:
        for scope in scopes:
            if _SCOPE_TOKEN.fullmatch(scope) is None:
                raise ValueError(f"{scope!r} is not a scope: printable ASCII without spaces, quotes or backslashes")
        return scopes


class HttpSettings(_Frozen):
    """`toolscore.http`: who may reach `serve --transport http`, and how (docs/security.md)."""

    token_file: str | None = None
    """File holding the bearer token clients must send; mode 600 (`--token-file` and `$TOOLSCORE_TOKEN` win)."""
    allowed_hosts: tuple[str, ...] = ()
    """Host headers accepted besides the bind address and the loopback names: `host`, `host:port`, `host:*`."""
    allowed_origins: tuple[str, ...] = ()
    """Origin headers accepted besides the defaults: `scheme://host[:port]` or `scheme://host:*`."""
    tls_cert: str | None = None
    """Serve HTTPS with this PEM certificate (chain)."""
    tls_key: str | None = None
    """Its PEM private key (default: inside `tls_cert`)."""
    auth: HttpAuth | None = None
    """OAuth access tokens (JWTs) from this issuer instead of a token file (docs/security.md#oauth-access-tokens)."""

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        for host in hosts:
            if not re.fullmatch(r"[^\s/@]+", host):
                raise ValueError(f"{host!r} is not a Host header: write host, host:port or host:* (no scheme, no path)")
        return hosts

    @field_validator("allowed_origins")
    @classmethod
    def _check_origins(cls, origins: tuple[str, ...]) -> tuple[str, ...]:
        for origin in origins:
            if not re.fullmatch(r"https?://[^\s/@]+", origin):
                raise ValueError(
                    f"{origin!r} is not an origin: write scheme://host[:port], e.g. https://app.example.com"
                )
        return origins


class CapabilitySettings(_Frozen):
    """How `call_capability` runs one capability's candidates (docs/toolhub.md)."""

    strategy: Literal["first_success", "all", "fallback"] = "first_success"
    """`first_success`: all at once, the first success wins and the rest are cancelled; `all`: all
    at once, successes merged; `fallback`: one at a time, in order, until one succeeds."""
    fan_out: int | None = Field(default=None, ge=1, le=16)
    """Candidates called (default: `toolhub.fan_out`)."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds each candidate call may take (default: its server's timeout)."""
    item_bytes: int = Field(default=600, ge=40, le=65536)
    """With `all`: each merged item is cut at a sentence boundary to this many UTF-8 bytes."""
    max_items: int = Field(default=20, ge=1, le=500)
    """With `all`: merged items kept."""
    synthesis: Literal["merge", "sampling"] = "merge"
    """With `all`: `sampling` has the client's model (MCP sampling) write one answer from the merged
    items, citing them; the plain merge is the answer whenever that fails or times out."""
    synthesis_timeout: float = Field(default=30.0, gt=0)
    """Seconds to wait for the client's model before answering with the plain merge."""
    synthesis_tokens: int = Field(default=1024, ge=16, le=16384)
    """The most tokens the model may write."""


class ToolHubSettings(_Frozen):
    """`toolscore.toolhub`: capability calls and the search catalog."""

    fan_out: int = Field(default=3, ge=1, le=16)
    """Candidates one capability call reaches, unless the capability sets its own."""
    capabilities: dict[str, CapabilitySettings] = Field(default_factory=dict)
    """Capability tag -> how its calls run (default: `first_success`)."""
    search_above_tools: int = Field(default=60, ge=1)
    """With `catalog: auto`: search mode once more tools than this are exposed..."""
    search_above_bytes: int = Field(default=32768, ge=1024)
    """...or once the full `tools/list` would be larger than this (bytes of JSON)."""
    half_life_seconds: float = Field(default=300.0, gt=0)
    """How fast a tool's past failures are forgiven when ranking candidates."""
    persist_scores: bool = True
    """Keep the learned scores across restarts: in Redis with `toolscore.state`, else in `scores_path`."""
    scores_path: str | None = None
    """The scores file (default `<state dir>/toolhub-scores.json`)."""
    save_seconds: float = Field(default=60.0, gt=0)
    """While the gateway runs, scores changed since the last save are saved this often (and at a stop)."""
    rerank: Literal["off", "embedding"] = "off"
    """`embedding`: `search_tools` re-ranks its best fifty with a small embedding model, where the
    package that ships it is installed (`pip install 'toolscore[rerank]'`; docs/toolhub.md)."""
    rerank_model: str = Field(default="wordllama", pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    """The installed Python package whose bundled files hold the re-ranker's model (nothing is fetched)."""


class ModelConfig(_Frozen):
    """`toolscore.model`: the model `delegate` uses when the client cannot sample (docs/agent-loop.md)."""

    provider: Literal["openai-compatible", "anthropic"]
    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """The API base (`http://127.0.0.1:8080/v1`); default: Anthropic's for `anthropic`, required otherwise."""
    model: str = Field(min_length=1)
    api_key: str | None = None
    """Write `${VAR}` to take it from the environment rather than the file."""
    timeout: float = Field(default=300.0, gt=0)
    """Seconds one model turn may take to stream (the task's wall time still applies)."""

    @model_validator(mode="after")
    def _url_for_provider(self) -> ModelConfig:
        if self.url is None and self.provider == "openai-compatible":
            raise ValueError("an openai-compatible model needs its 'url' (e.g. http://127.0.0.1:8080/v1)")
        return self

    def __repr_args__(self) -> Any:
        for key, value in super().__repr_args__():
            yield key, (_MASK if key == "api_key" and value else value)


class LoopSettings(_Frozen):
    """`toolscore.loop`: limits of one `delegate` task, and where its records go."""

    max_turns: int = Field(default=12, ge=1, le=200)
    wall_seconds: float = Field(default=600.0, gt=0)
    result_bytes: int = Field(default=1 << 20, ge=1024)
    """Tool result bytes one task may read, all turns together."""
    tokens: int = Field(default=200_000, ge=1000)
    """Model tokens one task may spend (as reported, else estimated at 4 characters a token)."""
    server_calls: int = Field(default=64, ge=1)
    """Calls one task may make to any one server."""
    max_actions_per_step: int = Field(default=4, ge=1, le=32)
    max_tokens_per_turn: int = Field(default=4096, ge=16)
    trajectories: str | None = None
    """JSON Lines file of (S, A, O) turn records (default: `<state dir>/trajectories.jsonl`); "" turns it off."""
    episodes_db: str | None = None
    """SQLite file that keeps episodes across restarts (default: `<state dir>/episodes.sqlite3`); "" keeps
    them in memory only."""
    episode_ttl_seconds: float = Field(default=86400.0, gt=0)


class GatewaySettings(_Frozen):
    """The `toolscore` section: gateway-wide options."""

    separator: str = Field(default=DEFAULT_SEPARATOR, pattern=r"^[A-Za-z0-9_-]{1,4}$")
    default_timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    connect_timeout: float = Field(default=DEFAULT_CONNECT_TIMEOUT, gt=0)
    startup_grace_seconds: float | None = Field(default=5.0, ge=0)
    """How long opening the gateway waits for servers to come up before clients are served; a
    server up later joins with `tools/list_changed`. null: wait for every server (up to its
    connect_timeout)."""
    slow_call_seconds: float = Field(default=DEFAULT_SLOW_CALL_SECONDS, gt=0)
    max_request_bytes: int = Field(default=DEFAULT_MAX_REQUEST_BYTES, ge=1024)
    """The largest JSON-RPC message a front client may send (stdio and HTTP)."""
    max_calls_in_flight: int = Field(default=256, ge=1)
    """Tool calls one client may have in flight at once; the next ones are answered at once with
    an error naming this limit (a plan's steps count as its one call)."""
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, ge=1024)
    reload: bool = True
    spill_bytes: int | None = Field(default=None, ge=1024)
    """Results larger than this (of servers that set none) are kept and previewed; None: off."""
    results_ttl_seconds: float = Field(default=3600.0, gt=0)
    """How long a kept result can be read (`toolscore://results/<id>`)."""
    results_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    """All kept results together; past it the oldest go first."""
    """Watch the config file (and take SIGHUP) to reload it while serving (docs/configuration.md#live-reload)."""
    """The largest JSON-RPC message accepted from a downstream server."""
    log_dir: str | None = None
    """Where each server's stderr log goes (default: `<state dir>/logs`)."""
    audit: AuditConfig = Field(default_factory=AuditConfig)
    plan: PlanSettings = Field(default_factory=PlanSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    catalog: Literal["full", "search", "auto"] = "full"
    """What `tools/list` shows: every tool, or `search`: only `orchestrate`, `search_tools` and
    `call_tool`; `auto`: search once `toolhub.search_above_tools`/`_bytes` is passed."""
    toolhub: ToolHubSettings = Field(default_factory=ToolHubSettings)
    model: ModelConfig | None = None
    """The model `delegate` uses for clients that cannot sample; none: sampling only."""
    loop: LoopSettings = Field(default_factory=LoopSettings)
    state: str | None = Field(default=None, pattern=r"^(redis|rediss|unix)://\S+$")
    """Where state shared by replicas lives: a `redis://`, `rediss://` or `unix://` URL; none: this
    process's memory (docs/operations.md)."""
    state_prefix: str = Field(default="toolscore:", pattern=r"^[A-Za-z0-9:_.-]{0,64}$")
    """Put before every Redis key, so several gateways can share one Redis."""

    @model_validator(mode="after")
    def _stream_needs_redis(self) -> GatewaySettings:
        if self.audit.stream and self.state is None:
            raise ValueError("audit.stream needs toolscore.state to be a Redis URL")
        return self


class Config(_Frozen):
    """A whole validated servers.json."""

    servers: dict[str, ServerConfig] = Field(default_factory=dict)
    settings: GatewaySettings = Field(default_factory=GatewaySettings)
    constraints: ConstraintsConfig = Field(default_factory=ConstraintsConfig)
    path: Path | None = None
    servers_prefix: Path = Field(default_factory=lambda: Path(".toolscore") / "servers")
    """Where `toolscore install` puts servers: `${TOOLSCORE_SERVERS}`."""

    @property
    def enabled_servers(self) -> list[ServerConfig]:
        """Servers not marked `disabled`, in file order."""
        return [s for s in self.servers.values() if not s.disabled]

    def server_timeout(self, server: str) -> float:
        """The call timeout for `server`: its own, else the gateway default."""
        own = self.servers[server].timeout
        return own if own is not None else self.settings.default_timeout

    def server_connect_timeout(self, server: str) -> float:
        """The connect timeout for `server`: its own, else the gateway default."""
        own = self.servers[server].connect_timeout
        return own if own is not None else self.settings.connect_timeout


_OTHER_CLIENTS_KEYS = frozenset(
    {"envFile", "alwaysAllow", "autoApprove", "disabledTools", "description", "transportType",
     "includeTools", "excludeTools", "startup_timeout_sec", "tool_timeout_sec", "enabled", "icon", "version"}
)  # fmt: skip
"""Keys other MCP clients keep in a server entry: kept and ignored without a word."""


def _warn_unknown_keys(server: ServerConfig, source: str | None) -> None:
    """A key toolscore does not know (a typo such as `timout`) is ignored, but never silently."""
    known = set(ServerConfig.model_fields)
    for key in server.model_extra or {}:
        if key in _OTHER_CLIENTS_KEYS:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        log.warning(
            "unknown key in a server entry: ignored",
            file=source or "(inline)",
            server=server.name,
            key=key,
            did_you_mean=close[0] if close else None,
        )


def _loc(parts: Sequence[int | str]) -> str:
    return format_path(parts, top="")


def _expand(value: Any, env: Mapping[str, str], where: list[int | str], source: str | None) -> Any:
    """Expand `${VAR}` / `${VAR:-default}` in every string of a JSON value."""

    def expand(text: str, path: JsonPath) -> str:
        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(
                f"environment variable {name} is not set (write ${{{name}:-default}} for a fallback)",
                path=source,
                field=_loc(path),
            )

        return _VAR.sub(sub, text)

    return map_strings_at(value, expand, tuple(where))


def _validate(
    model: type[BaseModel], data: Any, where: list[int | str], source: str | None, *, disabled: bool = False
) -> Any:
    try:
        return model.model_validate(data, context={"disabled": disabled})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [*where, *(p for p in first["loc"] if p != "name")]
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise ConfigError(first["msg"] + more, path=source, field=_loc(loc)) from None


def parse_config(data: Any, *, source: str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Validate an already-decoded servers.json document.

    Args:
        data: The decoded JSON.
        source: The file name, used in error messages.
        env: Variables for `${VAR}` expansion (default: the process environment).

    Raises:
        ConfigError: naming `source` and the JSON path of the first problem.
    """
    variables = dict(os.environ if env is None else env)
    base = Path(source).resolve().parent if source is not None else Path.cwd()
    variables.setdefault(CONFIG_DIR_VAR, str(base))
    variables.setdefault(SERVERS_VAR, str(base / ".toolscore" / "servers"))
    # The Python install that venvs made by `toolscore install` link to (a sandbox must see it).
    variables.setdefault("TOOLSCORE_PYTHON_PREFIX", sys.base_prefix)
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a JSON object", path=source)
    if "mcpServers" in data and "servers" in data:
        raise ConfigError("has both 'mcpServers' and 'servers': keep one", path=source)
    key = "servers" if "servers" in data else "mcpServers"
    raw_servers = data.get(key, {})
    if not isinstance(raw_servers, dict):
        raise ConfigError("must be an object mapping server names to entries", path=source, field=key)

    servers: dict[str, ServerConfig] = {}
    for name, raw in raw_servers.items():
        where: list[int | str] = [key, name]
        if not name.strip():
            raise ConfigError("server names must not be empty", path=source, field=key)
        if not isinstance(raw, dict):
            raise ConfigError("must be an object", path=source, field=_loc(where))
        # A disabled entry may name variables (and files) that are not on this machine.
        disabled = raw.get("disabled") is True
        entry = raw if disabled else _expand(raw, variables, where, source)
        servers[name] = _validate(ServerConfig, {**entry, "name": name}, where, source, disabled=disabled)
        _warn_unknown_keys(servers[name], source)

    settings = _validate(
        GatewaySettings, _expand(data.get("toolscore", {}), variables, ["toolscore"], source), ["toolscore"], source
    )
    # Paths in constraints name places as server entries do (`${TOOLSCORE_CONFIG_DIR}/docs`).
    constraints = _validate(
        ConstraintsConfig,
        _expand(data.get("constraints", {}), variables, ["constraints"], source),
        ["constraints"],
        source,
    )
    return Config(
        servers=servers,
        settings=settings,
        constraints=constraints,
        path=Path(source).resolve() if source else None,
        servers_prefix=Path(variables[SERVERS_VAR]),
    )


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a servers.json file, with the variables of its env file (`servers.env`) beneath `env`.

    Raises:
        ConfigError: the file is missing, is not JSON, or does not validate; the env file is unsafe or malformed.
    """
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the file ({exc.strerror})", path=source) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", path=source) from None
    stored = read_env_file(env_file_for(Path(source)))
    return parse_config(data, source=source, env={**stored, **(os.environ if env is None else env)})


def _user_dir(xdg_var: str, fallback: str) -> Path:
    base = os.environ.get(xdg_var)
    return Path(base) if base else Path.home() / fallback


def config_candidates(cwd: Path | None = None) -> tuple[Path, Path]:
    """Where a servers.json is looked for, in order: `./servers.json`, then the user's config file."""
    return (cwd or Path.cwd()) / "servers.json", _user_dir("XDG_CONFIG_HOME", ".config") / "toolscore" / "servers.json"


def default_config_path(cwd: Path | None = None) -> Path:
    """`./servers.json` if it exists, else the user's `toolscore/servers.json` config file."""
    local, user = config_candidates(cwd)
    return local if local.is_file() else user


def state_dir() -> Path:
    """Where logs and the audit file go by default (`$XDG_STATE_HOME/toolscore`)."""
    return _user_dir("XDG_STATE_HOME", ".local/state") / "toolscore"


def server_log_dir(config: Config) -> Path:
    """Where each stdio server's stderr log goes: `toolscore.log_dir`, else `<state dir>/logs`."""
    return Path(config.settings.log_dir or state_dir() / "logs")


def audit_path(config: Config) -> Path:
    """Where the config puts the audit file."""
    path = config.settings.audit.path
    return Path(path).expanduser() if path else state_dir() / "audit.jsonl"


def trajectory_path(config: Config) -> Path | None:
    """Where the config puts the trajectory log (None: off)."""
    path = config.settings.loop.trajectories
    if path == "":
        return None
    return Path(path).expanduser() if path else state_dir() / "trajectories.jsonl"

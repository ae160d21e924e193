"""Skills (SEP-2640, the `io.modelcontextprotocol/skills` extension) as the gateway carries them; pure.

A server that declares the extension answers `skills/list` (a page of entries) and `skills/get`
(one entry, by the URI of its `SKILL.md`). An entry is `{uri, frontmatter, resources}`: `uri` is
`skill://<skill-path>/SKILL.md`, `frontmatter` the file's YAML frontmatter as JSON, and
`resources` either the string `"dynamic"` or every file of the skill (`SKILL.md` included) as
`{uri, digest, size}`, the digest `sha256:<64 lowercase hex>` of the file's bytes and the size
their length. The files themselves are read with `resources/read`.

The gateway exposes each entry with its URIs made public (`downstream/catalog.py`:
`skill://<server>/<skill-path>/...` for a server with a prefix), keeps what each server listed as
the manifest of its files, and checks a file read through it against that manifest
(`check`): a file whose bytes are not the ones listed is not passed on.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["SKILLS_EXTENSION", "Listed", "check", "content_bytes", "digest_of", "manifest_of", "public_entry"]

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"

Listed = tuple[str, int]
"""A file's digest and size, as its server listed them."""


def digest_of(data: bytes) -> str:
    """`sha256:<hex>` of `data`, as SEP-2640 spells digests."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def content_bytes(contents: Mapping[str, Any]) -> bytes | None:
    """The raw bytes of one `resources/read` contents item (text as UTF-8, a blob decoded); None if neither."""
    text = contents.get("text")
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    blob = contents.get("blob")
    if isinstance(blob, str):
        try:
            return base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


def manifest_of(entry: Mapping[str, Any]) -> dict[str, Listed]:
    """The files an entry lists, by their server's URI (none for `"dynamic"` or a malformed list)."""
    found: dict[str, Listed] = {}
    resources = entry.get("resources")
    if not isinstance(resources, list):
        return found
    for item in resources:
        if not isinstance(item, Mapping):
            continue
        uri, digest, size = item.get("uri"), item.get("digest"), item.get("size")
        if isinstance(uri, str) and isinstance(digest, str) and isinstance(size, int) and not isinstance(size, bool):
            found[uri] = (digest.lower(), size)
    return found


def public_entry(entry: Mapping[str, Any], public: Callable[[str], str]) -> dict[str, Any]:
    """The entry with its URIs as clients see them (`public` maps one of the server's URIs); the
    rest, frontmatter included, verbatim."""
    out = dict(entry)
    if isinstance(uri := entry.get("uri"), str):
        out["uri"] = public(uri)
    resources = entry.get("resources")
    if isinstance(resources, list):
        out["resources"] = [
            {**item, "uri": public(item["uri"])}
            if isinstance(item, Mapping) and isinstance(item.get("uri"), str)
            else item
            for item in resources
        ]
    return out


def check(uri: str, listed: Listed, contents: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the contents read for `uri` are not the file listed (None: they are, byte for byte)."""
    digest, size = listed
    items = [c for c in contents if c.get("uri") == uri] or list(contents)
    if len(items) != 1:
        return f"{len(items)} contents items where one file was listed"
    data = content_bytes(items[0])
    if data is None:
        return "neither text nor base64 blob content"
    if len(data) != size:
        return f"{len(data)} bytes where {size} were listed"
    if (found := digest_of(data)) != digest:
        return f"digest {found} where {digest} was listed"
    return None

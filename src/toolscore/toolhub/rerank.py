"""The optional second stage of `search_tools`: a small embedding model joins the first stage, only
where a package that ships the model's weights is installed.

Off by default (`toolhub.rerank`). On, the gateway checks at start that the model's package
(`toolhub.rerank_model`, default `wordllama`) and its bundled files are there, without importing
it; when they are not, it logs one warning that says how to install them and searches as before.
Nothing is ever fetched: the weights and the tokenizer are read from the installed package's own
folder. The model is loaded once, before the first search, in a worker thread (`load`: a few
tenths of a second of CPU that would otherwise stall every other request), and so is the catalog:
each tool's text (its name's words, title, description's head and parameter names) is embedded
once, kept by a digest of that text, so a reload that leaves a tool as it was embeds nothing again.

The model (WordLlama's `l2_supercat`, 256 dimensions) is a table of token vectors: a text's vector
is the mean of its tokens' rows, normalised. We read the package's files and pool ourselves rather
than import the package, because importing it configures the root logger (`logging.basicConfig`)
and its loader's default path looks for the tokenizer in a folder the wheel does not have, then
downloads it; pooling the same rows gives the package's own vectors.

Hybrid retrieval: the candidates are the first stage's best fifty and the `NEAREST` tools whose
vectors are nearest the query's over the whole catalog (within the same `server`/`capability`
filter, a cosine of `FLOOR` at least), so a request in words no tool uses still reaches its tool.
Each candidate gets `(1 - WEIGHT) * score / best score + WEIGHT * cosine(query, tool)` (a tool only
the model found has a first-stage score of 0); the first stage's other tools keep their order after
them. The cosines are summed in float64 without BLAS and the blend rounded before sorting, so equal
inputs give one order; ties go by tool name.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import structlog

from toolscore.toolhub.capabilities import Tagged
from toolscore.toolhub.text import MAX_TEXT_CHARS

if TYPE_CHECKING:
    from toolscore.config import ToolHubSettings
    from toolscore.toolhub.search import Hit, SearchIndex

__all__ = ["FLOOR", "INSTALL_HINT", "NEAREST", "POOL", "WEIGHT", "Reranker", "reranker_for", "tool_text"]

log = structlog.get_logger("toolscore.toolhub")

POOL = 50
"""How many of the first stage's best tools are re-ranked."""
WEIGHT = 0.6
"""The cosine's share of the blend; chosen on the tuning parts of the golden set and of MetaTool's
corpus together (docs/toolhub.md)."""
INSTALL_HINT = "pip install 'toolscore[rerank]'"
_WEIGHTS = Path("weights") / "l2_supercat_256.safetensors"
_TOKENIZER = Path("tokenizers") / "l2_supercat_tokenizer_config.json"
_NEEDS = ("numpy", "safetensors", "tokenizers")
"""What reading and pooling the files takes (the model package's own dependencies)."""
NEAREST = 20
"""The model's nearest tools that join the first stage's fifty as candidates."""
FLOOR = 0.25
"""The least cosine at which a tool only the model found is a candidate."""
_MAX_CACHED = 20_000
"""Tool vectors kept (2 KiB each): more tools than any catalog holds, a bound all the same."""
_DESCRIPTION_CHARS = 1000
"""A description's head: past it a mean of token vectors only blurs what the tool is for."""
_DIGITS = 6
"""The blend is rounded to this many digits before sorting, so last-bit noise cannot reorder."""
_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|[0-9]+")
"""A name's words, split where people join them (`_`, `-`, camelCase, digits), as `text.py` splits them."""
_MAX_PARAMS = 64


def _split(name: str) -> str:
    return " ".join(w.lower() for w in _WORD.findall(name[:MAX_TEXT_CHARS]))


def tool_text(tagged: Tagged) -> str:
    """What the model reads for a tool: its name's words, title, description's head, parameter names."""
    tool = tagged.route.tool
    notes = tool.annotations
    title = " ".join(t for t in (tool.title, notes.title if notes else None) if t)
    properties = tool.input_schema.get("properties") if isinstance(tool.input_schema, dict) else None
    params = list(properties)[:_MAX_PARAMS] if isinstance(properties, dict) else []
    parts = [_split(tool.name), title, (tool.description or "")[:_DESCRIPTION_CHARS], " ".join(map(_split, params))]
    return ". ".join(p.strip() for p in parts if p.strip())


def _locate(package: str) -> tuple[Path, Path] | str:
    """The model's weights and tokenizer inside the installed `package`, or why they are not there.
    Finds the package without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return f"the package {package!r} is not installed"
    missing = [need for need in _NEEDS if importlib.util.find_spec(need) is None]
    if missing:
        return f"{', '.join(missing)} (needed to read {package!r}'s model) not installed"
    root = Path(next(iter(spec.submodule_search_locations)))
    weights, tokenizer = root / _WEIGHTS, root / _TOKENIZER
    for path in (weights, tokenizer):
        if not path.is_file():
            return f"the package {package!r} has no {path.relative_to(root)}"
    return weights, tokenizer


class _Model:
    """The token vectors and the tokenizer, read from the package's files."""

    def __init__(self, weights: Path, tokenizer: Path) -> None:
        from safetensors import safe_open
        from tokenizers import Tokenizer

        with safe_open(str(weights), framework="np") as f:
            self._table: Any = f.get_tensor("embedding.weight")
        self._tokenizer = Tokenizer.from_file(str(tokenizer))

    @property
    def dimensions(self) -> int:
        """The length of a vector."""
        return int(self._table.shape[1])

    def embed(self, text: str) -> Any:
        """`text`'s unit vector (float64), or zeros where it has no token."""
        import numpy as np

        # a lone surrogate (JSON may escape one) is no text the tokenizer takes: it becomes "?"
        text = text[:MAX_TEXT_CHARS].encode("utf-8", "replace").decode("utf-8")
        ids = np.asarray(self._tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)
        if ids.size == 0:
            return np.zeros(self._table.shape[1], dtype=np.float64)
        np.clip(ids, 0, self._table.shape[0] - 1, out=ids)
        vector = self._table[ids].astype(np.float32).mean(axis=0).astype(np.float64)
        norm = float(np.sqrt((vector * vector).sum()))
        return vector / norm if norm > 0 else vector


@dataclass(frozen=True, slots=True)
class _Space:
    """One catalog's tool vectors, a row per tool in name order (so ties in the model's order go by
    name), for the mapping they were made from."""

    tools: Mapping[str, Tagged]
    names: list[str]
    matrix: Any
    """float64, one unit row per tool (zeros where a tool's text has no token)."""
    rows: dict[str, int]
    """A tool's row, by name."""

    def allowed(self, server: str | None, capability: str | None) -> list[bool] | None:
        """Which rows `search_tools`' filters keep (None: all)."""
        if server is None and capability is None:
            return None
        return [
            (server is None or self.tools[n].route.server == server)
            and (capability is None or capability in self.tools[n].tags)
            for n in self.names
        ]


class Reranker:
    """The second stage, for one model package; its model loaded by the first search, tool vectors cached."""

    def __init__(self, package: str, weights: Path, tokenizer: Path, *, weight: float = WEIGHT) -> None:
        self.package = package
        self.weight = weight
        self._files = (weights, tokenizer)
        self._model: _Model | None = None
        self._failed = False
        self._loading: anyio.Lock | None = None
        self._vectors: OrderedDict[bytes, Any] = OrderedDict()
        self._space: _Space | None = None
        self._refused = False
        self._embedding = threading.Lock()
        """Held while a catalog is embedded: a worker thread's `load` and, after a reload that came
        between it and the search, the search's own."""

    async def load(self, tools: Mapping[str, Tagged] | None = None) -> None:
        """Load the model and embed `tools` in a worker thread, once each (concurrent callers wait
        for the one load), so the event loop goes on serving meanwhile; a search before it would do
        both inline."""
        if self._failed or (self._model is not None and (tools is None or self._made_for(tools))):
            return
        if self._loading is None:
            self._loading = anyio.Lock()
        async with self._loading:
            await anyio.to_thread.run_sync(self._prepared, tools)

    def _prepared(self, tools: Mapping[str, Tagged] | None) -> None:
        model = self._loaded()
        if model is not None and tools is not None:
            self._embedded(model, tools)

    def _loaded(self) -> _Model | None:
        if self._model is None and not self._failed:
            try:
                self._model = _Model(*self._files)
            except Exception as exc:  # a damaged file or an incompatible version: search as before
                self._failed = True
                log.warning(
                    "toolhub.rerank: the embedding model could not be loaded; searching without it",
                    package=self.package,
                    error=f"{type(exc).__name__}: {str(exc)[:200]}",
                )
        return self._model

    def _made_for(self, tools: Mapping[str, Tagged]) -> _Space | None:
        """The space of this very mapping, if made (an index's catalog is never changed in place: a
        reload makes a new one)."""
        space = self._space
        return space if space is not None and space.tools is tools else None

    def _embedded(self, model: _Model, tools: Mapping[str, Tagged]) -> _Space:
        """`tools`' vectors: the space made for them, or a new one."""
        space = self._made_for(tools)
        if space is not None:
            return space
        with self._embedding:
            # made while this one waited for the lock, or made now
            return self._made_for(tools) or self._embed(model, tools)

    def _embed(self, model: _Model, tools: Mapping[str, Tagged]) -> _Space:
        import numpy as np

        names = sorted(tools)
        rows = []
        for name in names:
            text = tool_text(tools[name])
            key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
            found = self._vectors.get(key)
            if found is None:
                # a text the model cannot read is near nothing; the rest of the catalog is embedded
                vector = self._embedding_of(model, text)
                found = vector if vector is not None else np.zeros(model.dimensions, dtype=np.float64)
                self._vectors[key] = found
            else:
                self._vectors.move_to_end(key)
            rows.append(found)
        while len(self._vectors) > _MAX_CACHED:
            self._vectors.popitem(last=False)
        matrix = np.stack(rows) if rows else np.zeros((0, model.dimensions), dtype=np.float64)
        self._space = space = _Space(tools, names, matrix, {name: i for i, name in enumerate(names)})
        return space

    def search(
        self,
        index: SearchIndex,
        tools: Mapping[str, Tagged],
        query: str,
        k: int,
        *,
        server: str | None = None,
        capability: str | None = None,
    ) -> list[Hit]:
        """The `k` best of the first stage's best fifty and the model's nearest tools, by the blend;
        then the first stage's other tools in its order."""
        hits = index.search(query, max(k, POOL), server=server, capability=capability)
        model = self._loaded()
        if model is None:
            return hits[:k]
        space = self._embedded(model, tools)
        vector = self._embedding_of(model, query)
        if vector is None:  # the words' order, as with the stage off
            return hits[:k]
        return self.rerank(space, vector, hits, space.allowed(server, capability))[:k]

    def _embedding_of(self, model: _Model, text: str) -> Any | None:
        """`text`'s vector, or None where the tokenizer refuses it (logged once): the optional stage
        never fails a search."""
        try:
            return model.embed(text)
        except Exception as exc:
            if not self._refused:
                self._refused = True
                log.warning(
                    "toolhub.rerank: the embedding model refused a text; that search ranks by its words",
                    package=self.package,
                    error=f"{type(exc).__name__}: {str(exc)[:200]}",
                )
            return None

    def rerank(self, space: _Space, query: Any, hits: list[Hit], allowed: list[bool] | None = None) -> list[Hit]:
        """`hits` (best first, tools of `space`): its first fifty and the `NEAREST` tools of `space`
        nearest `query` (of the `allowed` rows, a cosine of `FLOOR` at least) ordered by the blend; the
        rest of `hits` after them, never scored above the last of those."""
        import numpy as np

        from toolscore.toolhub.search import Hit

        # elementwise products summed by numpy's own reduction, not a BLAS product, whose result may
        # depend on the memory's alignment; rounded, so last-bit noise cannot reorder
        cosines = np.round((space.matrix * query).sum(axis=1), _DIGITS)
        head = hits[:POOL]
        taken = {h.name for h in head}
        near: list[Hit] = []
        for i in np.argsort(-cosines, kind="stable").tolist():  # rows are in name order: ties by name
            if len(near) >= NEAREST or cosines[i] < FLOOR:
                break
            if (allowed is None or allowed[i]) and space.names[i] not in taken:
                near.append(Hit(space.names[i], 0.0, ()))
        pulled = {h.name for h in near}
        head += near
        best = max((h.score for h in head), default=0.0) or 1.0
        first = np.asarray([h.score for h in head], dtype=np.float64) / best
        on_head = np.asarray([cosines[space.rows[h.name]] for h in head])
        blended = np.round((1 - self.weight) * first + self.weight * on_head, _DIGITS).tolist()
        order = sorted(range(len(head)), key=lambda i: (-blended[i], head[i].name))
        out = [Hit(head[i].name, round(blended[i], 4), head[i].matched) for i in order]
        last = out[-1].score if out else 0.0
        # past the candidates: the first stage's own order, never shown above the last candidate's score
        tail = [h for h in hits[POOL:] if h.name not in pulled]
        out += [Hit(h.name, round(min((1 - self.weight) * h.score / best, last), 4), h.matched) for h in tail]
        return out


def reranker_for(settings: ToolHubSettings) -> Reranker | None:
    """The re-ranker `settings` ask for, or None: off, or its model not installed (then one warning
    that says how to install it)."""
    if settings.rerank == "off":
        return None
    found = _locate(settings.rerank_model)
    if isinstance(found, str):
        log.warning(
            f"toolhub.rerank is 'embedding' but {found}: search_tools ranks without the re-ranker; "
            f"install the model with: {INSTALL_HINT}",
            package=settings.rerank_model,
        )
        return None
    return Reranker(settings.rerank_model, *found)

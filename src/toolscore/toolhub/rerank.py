"""The optional second stage of `search_tools`: the first stage's best fifty re-ranked by a small
embedding model, only where a package that ships the model's weights is installed.

Off by default (`toolhub.rerank`). On, the gateway checks at start that the model's package
(`toolhub.rerank_model`, default `wordllama`) and its bundled files are there, without importing
it; when they are not, it logs one warning that says how to install them and searches as before.
Nothing is ever fetched: the weights and the tokenizer are read from the installed package's own
folder. The model is loaded once, before the first search, in a worker thread (`load`: a few
tenths of a second of CPU that would otherwise stall every other request), and each tool's text
(its name's words, title, description and parameter names) is embedded the first time the tool is
among a search's best fifty, then kept, keyed by a digest of that text, so a reload that leaves a
tool as it was embeds nothing again.

The model (WordLlama's `l2_supercat`, 256 dimensions) is a table of token vectors: a text's vector
is the mean of its tokens' rows, normalised. We read the package's files and pool ourselves rather
than import the package, because importing it configures the root logger (`logging.basicConfig`)
and its loader's default path looks for the tokenizer in a folder the wheel does not have, then
downloads it; pooling the same rows gives the package's own vectors.

Each of the best fifty gets `(1 - WEIGHT) * score / best score + WEIGHT * cosine(query, tool)`;
tools past the fifty keep their order after them. The cosines are summed in float64 without BLAS
and the blend rounded before sorting, so equal inputs give one order; ties go by tool name.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections import OrderedDict
from collections.abc import Mapping
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

__all__ = ["INSTALL_HINT", "POOL", "WEIGHT", "Reranker", "reranker_for", "tool_text"]

log = structlog.get_logger("toolscore.toolhub")

POOL = 50
"""How many of the first stage's best tools are re-ranked."""
WEIGHT = 0.2
"""The cosine's share of the blend; chosen on the golden set's tuning parts only (docs/toolhub.md)."""
INSTALL_HINT = "pip install 'toolscore[rerank]'"
_WEIGHTS = Path("weights") / "l2_supercat_256.safetensors"
_TOKENIZER = Path("tokenizers") / "l2_supercat_tokenizer_config.json"
_NEEDS = ("numpy", "safetensors", "tokenizers")
"""What reading and pooling the files takes (the model package's own dependencies)."""
_MAX_CACHED = 20_000
"""Tool vectors kept (1 KiB each): more tools than any catalog holds, a bound all the same."""
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

    def embed(self, text: str) -> Any:
        """`text`'s unit vector (float64), or zeros where it has no token."""
        import numpy as np

        ids = np.asarray(self._tokenizer.encode(text[:MAX_TEXT_CHARS], add_special_tokens=False).ids, dtype=np.int64)
        if ids.size == 0:
            return np.zeros(self._table.shape[1], dtype=np.float64)
        np.clip(ids, 0, self._table.shape[0] - 1, out=ids)
        vector = self._table[ids].astype(np.float32).mean(axis=0).astype(np.float64)
        norm = float(np.sqrt((vector * vector).sum()))
        return vector / norm if norm > 0 else vector


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
        self._by_tool: dict[int, tuple[Tagged, Any]] = {}
        """The vector of each definition met, by identity (the index's definitions do not change): a
        search that meets it again neither rebuilds its text nor hashes it."""

    async def load(self) -> None:
        """Load the model in a worker thread, once (concurrent callers wait for the one load), so the
        event loop goes on serving while it is read; a search before it would load it inline."""
        if self._model is not None or self._failed:
            return
        if self._loading is None:
            self._loading = anyio.Lock()
        async with self._loading:
            if self._model is None and not self._failed:
                await anyio.to_thread.run_sync(self._loaded)

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

    def _vector(self, model: _Model, tagged: Tagged) -> Any:
        seen = self._by_tool.get(id(tagged))
        if seen is not None and seen[0] is tagged:
            return seen[1]
        if len(self._by_tool) >= _MAX_CACHED:
            self._by_tool.clear()  # definitions of an older tool list, held alive only by this
        text = tool_text(tagged)
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        found = self._vectors.get(key)
        if found is None:
            found = self._vectors[key] = model.embed(text)
            if len(self._vectors) > _MAX_CACHED:
                self._vectors.popitem(last=False)
        self._by_tool[id(tagged)] = (tagged, found)
        return found

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
        """`index.search`'s `k` best with its best fifty re-ranked (the rest after them, in its order)."""
        hits = index.search(query, max(k, POOL), server=server, capability=capability)
        model = self._loaded() if len(hits) > 1 else None
        if model is None:
            return hits[:k]
        return self.rerank(model.embed(query), hits, [self._vector(model, tools[h.name]) for h in hits[:POOL]])[:k]

    def rerank(self, query: Any, hits: list[Hit], vectors: list[Any]) -> list[Hit]:
        """`hits` (best first) with the first `len(vectors)` re-ordered by the blend; the rest after them."""
        import numpy as np

        from toolscore.toolhub.search import Hit

        head, tail = hits[: len(vectors)], hits[len(vectors) :]
        best = max((h.score for h in head), default=0.0) or 1.0
        # elementwise products summed by numpy's own reduction, not a BLAS dot product, whose
        # result may depend on the memory's alignment
        cosines = (np.stack(vectors) * query).sum(axis=1)
        first = np.asarray([h.score for h in head], dtype=np.float64) / best
        blended = np.round((1 - self.weight) * first + self.weight * cosines, _DIGITS).tolist()
        order = sorted(range(len(head)), key=lambda i: (-blended[i], head[i].name))
        out = [Hit(head[i].name, round(blended[i], 4), head[i].matched) for i in order]
        floor = out[-1].score if out else 0.0
        # past the fifty: their own order, never shown above the last re-ranked score
        out += [Hit(h.name, round(min((1 - self.weight) * h.score / best, floor), 4), h.matched) for h in tail]
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

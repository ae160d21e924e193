"""`toolscore-deepsearch`: a research MCP server over local documents and, optionally, the web.

    toolscore-deepsearch --corpus ./docs [--corpus ./notes] [--searxng http://127.0.0.1:8888]

Tools: `research(question, max_sources?)`, `quick_research(question)`,
`comprehensive_research(question, depth?)`. Each answers with extractive sentences carrying `[n]`
citations and the numbered sources, as text and as structured content. With `--searxng`, each
question is also sent to that SearXNG-compatible endpoint (`/search?format=json`) and the top
result pages are fetched (bounded in count, bytes and time) into the corpus before answering.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from toolscore_deepsearch import __version__
from toolscore_deepsearch._corpus import Corpus, html_to_text
from toolscore_deepsearch._research import research

__all__ = ["build_server", "main"]

MAX_PAGE_BYTES = 1024 * 1024


def _question_schema(extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"question": {"type": "string", "description": "What to find out."}, **extra},
        "required": ["question"],
        "additionalProperties": False,
    }


TOOLS = [
    types.Tool(
        name="research",
        description="Research a question in the corpus: cited extractive answer plus numbered sources.",
        input_schema=_question_schema({"max_sources": {"type": "integer", "minimum": 1, "maximum": 20}}),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name="quick_research",
        description="A fast answer from the 3 best sources, without following links.",
        input_schema=_question_schema({}),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name="comprehensive_research",
        description="A broader answer: more sources, following links between documents up to `depth` hops.",
        input_schema=_question_schema({"depth": {"type": "integer", "minimum": 0, "maximum": 4}}),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
]


class WebSearch:
    """A SearXNG-compatible endpoint and a bounded page fetcher feeding the corpus."""

    def __init__(self, url: str, *, max_pages: int, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.max_pages = max_pages
        self.timeout = timeout

    async def gather(self, corpus: Corpus, question: str) -> int:
        """Search, fetch the top pages, index them; returns how many pages were added."""
        added = 0
        with anyio.move_on_after(self.timeout * 3):
            async with httpx2.AsyncClient(timeout=self.timeout, follow_redirects=True) as http:
                response = await http.get(f"{self.url}/search", params={"q": question, "format": "json"})
                response.raise_for_status()
                results = response.json().get("results", [])[: self.max_pages]
                for result in results:
                    url = result.get("url")
                    if not url or corpus.has(url):
                        continue
                    try:
                        page = await http.get(url)
                    except httpx2.HTTPError:
                        continue
                    body = page.content[:MAX_PAGE_BYTES].decode(page.encoding or "utf-8", errors="replace")
                    if "html" in page.headers.get("content-type", "html"):
                        title, text, links = html_to_text(body)
                    else:
                        title, text, links = result.get("title", url), body, []
                    added += corpus.add(url, title or result.get("title", url), text, links) is not None
        return added


def build_server(corpus: Corpus, web: WebSearch | None = None) -> Server[Any]:
    """The MCP server over `corpus` (and `web`, when given)."""

    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        question = args.get("question")
        if not isinstance(question, str) or not question.strip():
            return types.CallToolResult(
                content=[types.TextContent(text="'question' must be a non-empty string")], is_error=True
            )
        if web is not None:
            try:
                await web.gather(corpus, question)
            except (httpx2.HTTPError, ValueError) as exc:
                # The local corpus still answers; say what the web part could not do.
                await ctx.session.report_progress(0, None, f"web search failed: {exc}")
        if params.name == "quick_research":
            report = research(corpus, question, max_sources=3, depth=0)
        elif params.name == "comprehensive_research":
            report = research(corpus, question, max_sources=10, depth=int(args.get("depth", 2)), max_sentences=10)
        elif params.name == "research":
            report = research(corpus, question, max_sources=int(args.get("max_sources", 5)))
        else:
            return types.CallToolResult(content=[types.TextContent(text=f"unknown tool {params.name}")], is_error=True)
        return types.CallToolResult(
            content=[types.TextContent(text=report.as_text())], structured_content=report.as_dict()
        )

    return Server("toolscore-deepsearch", version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `toolscore-deepsearch` (stdio)."""
    parser = argparse.ArgumentParser(prog="toolscore-deepsearch", description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", type=Path, default=[], help="a folder or file (repeatable)")
    parser.add_argument("--searxng", help="a SearXNG-compatible base URL to search the web through")
    parser.add_argument("--max-pages", type=int, default=5, help="pages fetched per question (web mode)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per web request")
    args = parser.parse_args(argv)
    corpus = Corpus()
    for path in args.corpus or [Path("docs")]:
        if path.is_dir():
            corpus.add_folder(path)
        elif path.is_file():
            corpus.add_file(path)
        else:
            print(f"toolscore-deepsearch: no such corpus path: {path}", file=sys.stderr)
            return 2
    print(f"toolscore-deepsearch: {corpus.documents} documents indexed", file=sys.stderr)
    web = WebSearch(args.searxng, max_pages=args.max_pages, timeout=args.timeout) if args.searxng else None
    server = build_server(corpus, web)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())

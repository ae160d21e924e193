"""toolscore's own research MCP server (`toolscore-deepsearch`): cited answers from a corpus."""

__version__ = "0.1.0"

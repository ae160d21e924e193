"""toolscore's own research MCP server (`toolscore-deepsearch`): cited answers from a corpus."""

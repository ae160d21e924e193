"""MCP clients' configuration files: `toolscore import`, `register` and `doctor` (docs/configuration.md#client-files).

locations.py   where each client keeps its file, per OS (pure)
jsonc.py       JSON with comments, read and edited in place (pure)
toml_tables.py Codex's `[mcp_servers.*]` tables, read and edited in place (pure)
entries.py     a client's entries in servers.json's shape; toolscore's entry in the client's (pure)
merge.py       the merge into servers.json: clashes, secrets to the env file (pure)
files.py       safe reads, atomic writes after a timestamped backup, undo
documents.py   a client's file decoded and edited; diffs for --dry-run
importing.py register.py doctor.py   the three commands; commands.py their arguments
"""

"""The agent loop: `delegate` runs a whole task with a model, streaming tool calls as they are written."""

"""A tenant's remote tool servers (MCP servers), their tools, and calls of them from flows."""

"""The MCP server at ``/mcp/``: the tenant's agents as MCP tools, over the thread services."""

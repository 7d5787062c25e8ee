"""`tatolab mcp`: the runtime's operations as MCP tools, over stdin/stdout, through the local socket only."""

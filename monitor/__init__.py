"""drift-monitor: watches what MCP servers claim about their tools."""

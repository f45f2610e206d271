"""Collection: the MCP client, polling, the scheduler and watch sessions."""

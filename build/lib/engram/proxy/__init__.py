"""The LibreChat front door: an OpenAI/Anthropic-compatible memory proxy and its MCP tools."""

"""Workflows as services: each workflow of a folder called as an MCP tool, started by a
signed webhook or by a cron schedule (docs/services.md)."""

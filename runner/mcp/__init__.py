"""MCP servers as tools: the client (one event-loop thread per server), where a server runs
(host, the job's Docker container, its SSH host), and one run's servers as tool entries.

Nothing here is imported unless a job names an ``mcp:`` toolset (or ``runner tools list`` runs);
the ``mcp`` SDK itself is imported only when a server starts.
"""

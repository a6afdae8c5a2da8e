"""Where agents plug memory in: the MCP server and the agent-framework adapters.

Each module is an optional extra (``pip install 'observational-memory[mcp]'`` and so on) and
talks to the service only through :mod:`om_api.client`, so it runs beside any deployment.
"""

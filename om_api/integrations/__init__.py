"""Where agents plug memory in: the MCP server and the agent-framework adapters.

- :mod:`om_api.integrations.mcp_server`: ``om mcp``, the service as MCP tools (stdio, HTTP);
- :mod:`om_api.integrations.openai_agents`: ``OMSession``, an OpenAI Agents SDK session;
- :mod:`om_api.integrations.pydantic_ai`: a pydantic-ai history capability and recorder;
- :mod:`om_api.integrations.langgraph`: a LangGraph pre-model hook and recorder.

Each module is an optional extra (``pip install '.[mcp]'`` in a checkout,
``pip install 'observational-memory-service[mcp]'`` from the package index, and so on) and
talks to the service only through :mod:`om_api.client`, so it runs beside any deployment.
"""

"""Where agents plug memory in: the MCP server and the agent-framework adapters.

- :mod:`om_api.integrations.mcp_server`: the service as MCP tools (``om mcp`` over stdio, and
  the API's ``/mcp``);
- :mod:`om_api.integrations.openai_agents`: ``OMSession``, an OpenAI Agents SDK session;
- :mod:`om_api.integrations.pydantic_ai`: a pydantic-ai history capability and recorder;
- :mod:`om_api.integrations.langgraph`: a LangGraph pre-model hook and recorder.

Each adapter is an optional extra (``pip install '.[openai-agents]'`` in a checkout,
``pip install 'observational-memory-service[openai-agents]'`` from the package index, and so
on; the MCP SDK comes with the ``server`` extra) and talks to the service only through
:mod:`om_api.client`, so it runs beside any deployment.
"""

"""The edge of observational memory, one subpackage per part:

- :mod:`om_api.schemas`: the wire models (pydantic), shared by the server and the client;
- :mod:`om_api.client`: the Python clients of the HTTP API (needs only httpx and pydantic);
- :mod:`om_api.server`: the HTTP API (FastAPI under uvicorn);
- :mod:`om_api.cli`: the ``om`` command line, with the embedded stack runner and the demo;
- :mod:`om_api.evaluation`: ``om eval``, the LoCoMo replay harness;
- :mod:`om_api.integrations`: the MCP server and the agent-framework adapters (optional extras).

``om_api`` may import ``om_workers`` (the server and the command line) and ``om_core``;
nothing imports it. The client and the integrations use only the client and the schemas.
"""

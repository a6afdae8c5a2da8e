"""The OpenAI-compatible proxy behind ``POST /v1/proxy/chat/completions``.

:mod:`.wire` reads chat-completions messages into the core's and names each one by its place in
the conversation; :mod:`.answer` assembles the upstream's answer (whole or streamed);
:mod:`.upstream` talks to the model server; :mod:`.turns` trims a request against what the
session holds and records the turn, through the same store and flush services as the routes.
"""

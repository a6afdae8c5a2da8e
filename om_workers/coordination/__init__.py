"""Redis coordination: key names, TTLs and Lua scripts (:mod:`.keys`, ``lua/``), the session
lock (:mod:`.locks`) and its process-wide heartbeat thread (:mod:`.heartbeats`), flush
coalescing (:mod:`.coalesce`), the pure timing rules (:mod:`.timing`), the client and its error
translation (:mod:`.connection`) and the private development server (:mod:`.embedded`).

Redis only saves duplicate LLM spend and latency here: correctness comes from the fenced writes
of the SQL store, so losing everything in Redis loses no work.
"""

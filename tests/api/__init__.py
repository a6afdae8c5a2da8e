"""HTTP API tests over real HTTP: uvicorn, a private Redis, a SQLite store."""

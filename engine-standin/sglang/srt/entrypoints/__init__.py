"""Entry points: the engine (process launch) and the HTTP server."""

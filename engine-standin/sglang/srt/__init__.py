"""SGLang runtime (stand-in): argument parsing, process launch, HTTP server."""

"""SGLang stand-in: behaves like SGLang 0.5.x wherever a deploy can observe it.

Standard-library code; SGLang's HTTP/JSON stack (fastapi, orjson, pydantic, uvicorn) is
imported where SGLang imports it, so the venv has a real closure. `python -m
sglang.launch_server ARGS` parses SGLang's flags, spawns one scheduler process per
tensor-parallel rank plus a detokenizer, keeps the HTTP port closed while "loading", then
serves SGLang's HTTP API with a fixed token rate. See README.md.
"""

from sglang.version import __version__

__all__ = ["__version__"]

"""pyinfra's config file, loaded from the working directory before any host is connected."""

import sys
from pathlib import Path

from sglang_deploy.report import outcome

# Record connection errors from the start, so a deploy's last lines can say why a host was
# unreachable (deploy.py asks for those lines; it never runs if no host could be reached).
outcome.watch().report = any(Path(arg).name == "deploy.py" for arg in sys.argv[1:])

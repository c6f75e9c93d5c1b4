"""reports/failed-hosts.txt: the hosts whose last deploy failed, could not be reached or never
ran, one name a line, for the next run to take (`make deploy RETRY=1`, or
`LIMIT=@reports/failed-hosts.txt`).

Written at the end of every run that executed (a dry run or `make plan` changes nothing): the
hosts of this run are taken out of the list and those that did not deploy put back, so a run
limited to some hosts leaves the others' entries as they were, and a run in which every host
deployed leaves the file empty (the Makefile refuses to re-run an empty list: an empty --limit
would be every host).
"""

from __future__ import annotations

from pathlib import Path

from sglang_deploy.plan.hosts import REPO_ROOT

PATH = REPO_ROOT / "reports" / "failed-hosts.txt"
RETRY_STATES = ("failed", "unreachable", "not run")  # report/outcome.py's FAILED, UNREACHABLE, NOT_RUN


def read(path=PATH) -> list:
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def update(outcomes, path=PATH, inventory=None) -> list:
    """Rewrite ``path`` from this run's ``outcomes`` (report/outcome.Outcome, one per host of
    the run); the hosts it lists now. ``inventory``: the names of the run's inventory (None:
    any), so an entry of another inventory (another sandbox, a host since removed) goes."""
    ran = {o.host for o in outcomes}
    failed = [o.host for o in outcomes if o.state in RETRY_STATES]
    kept = [name for name in read(path) if name not in ran and (inventory is None or name in inventory)]
    names = kept + failed
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text("".join(f"{name}\n" for name in dict.fromkeys(names)))
    temporary.replace(path)
    return names

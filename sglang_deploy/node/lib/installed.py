"""The distributions a Python environment has installed, by their PEP 503 names.

Standard library only, Python >= 3.9: run by the venv's interpreter on the node, and imported by
the controller, which compares names the same way.
"""

import importlib.metadata
import re

# Run as `python -c VERSIONS_PY` by a venv's interpreter: {name: version}, one JSON line.
VERSIONS_PY = (
    "import importlib.metadata as m, json; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
)
# Per distribution: version and when it was installed (its RECORD is written last by pip).
INSTALLED_PY = """
import importlib.metadata as m, json, os
found = {}
for d in m.distributions():
    record = [f for f in (d.files or []) if f.name == 'RECORD' and f.parent.name.endswith('.dist-info')]
    found[d.metadata['Name']] = [d.version, os.stat(record[0].locate()).st_mtime if record else None]
print(json.dumps(found))
"""


def canonical(name):
    """PEP 503 normalised distribution name: 'Typing_Extensions' -> 'typing-extensions'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions():
    """{canonical name: Distribution}, the first one on sys.path winning (as imports do)."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonical(name) not in found:
            found[canonical(name)] = dist
    return found


def unique_names(names):
    """Names in order, the first spelling of each distribution kept ('torch', 'Torch' -> 'torch')."""
    seen, out = set(), []
    for name in names:
        if canonical(name) not in seen:
            seen.add(canonical(name))
            out.append(name)
    return out


def wanted_names(names, installed, everything=False):
    """`names` without repeats, then with `everything` every other installed distribution."""
    wanted = unique_names(names)
    if everything:
        wanted += sorted(
            d.metadata["Name"] for k, d in installed.items() if k not in {canonical(n) for n in wanted}
        )
    return wanted

"""A node's GPUs as the profile's `gpu:` section asks for them: driver version, model, count,
persistence mode; from one nvidia-smi query (standard library only: preflight runs it on the
node, `make verify` and the deploy's facts parse the same output on the controller).

    nvidia-smi --query-gpu=index,name,driver_version,persistence_mode,pci.bus_id --format=csv
    index, name, driver_version, persistence_mode, pci.bus_id
    0, NVIDIA H200, 580.159.04, Enabled, 00000000:00:06.0

    python3 gpu_settings.py persistence    # exit 1 naming the GPUs whose persistence mode is off
"""

import re
import subprocess
import sys

QUERY = ["--query-gpu=index,name,driver_version,persistence_mode,pci.bus_id", "--format=csv"]
FIELDS = ("index", "name", "driver_version", "persistence_mode", "pci.bus_id")
_NO_DEVICES = "no devices were found"


class Unparsed(ValueError):
    """nvidia-smi output in a shape this parser does not know."""


def parse(text):
    """[{"index", "name", "driver_version", "persistence_mode", "pci.bus_id"}, ...]; the header
    line is optional (format=csv prints it, csv,noheader does not)."""
    gpus = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.lower().rstrip(".") == _NO_DEVICES:
            return []
        cells = [cell.strip() for cell in line.split(",")]
        if cells[0] == "index":
            continue
        if len(cells) != len(FIELDS) or not cells[0].isdigit():
            raise Unparsed(
                "nvidia-smi --query-gpu: expected %d fields (%s), got %r"
                % (len(FIELDS), ", ".join(FIELDS), line)
            )
        gpus.append(dict(zip(FIELDS, cells)))
    return gpus


def version_key(version):
    """'580.159.04' -> (580, 159, 4); a part that is not a number sorts as -1."""
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.-]", version.strip()))


def problems(gpus, needed=None, min_driver=None, model=None):
    """Why these GPUs do not meet the settings (empty: they do)."""
    found = []
    if needed is not None and len(gpus) < needed:
        found.append("%d GPUs needed, nvidia-smi lists %d" % (needed, len(gpus)))
    if min_driver:
        old = sorted(
            {
                gpu["driver_version"]
                for gpu in gpus
                if version_key(gpu["driver_version"]) < version_key(min_driver)
            }
        )
        if old:
            found.append("NVIDIA driver %s, %s or newer needed" % (", ".join(old), min_driver))
    if model:
        other = sorted({gpu["name"] for gpu in gpus if model.lower() not in gpu["name"].lower()})
        if other:
            found.append("GPU model %s, %s wanted" % (", ".join(other), model))
    return found


def persistence_off(gpus):
    """Indices of the GPUs whose persistence mode is not Enabled."""
    return [gpu["index"] for gpu in gpus if gpu["persistence_mode"].lower() != "enabled"]


def summary(gpus):
    """'1 × NVIDIA H200, driver 580.159.04'."""
    names = sorted({gpu["name"] for gpu in gpus})
    drivers = sorted({gpu["driver_version"] for gpu in gpus})
    return "%d × %s, driver %s" % (len(gpus), "/".join(names), "/".join(drivers))


def main(argv=None):
    """`persistence`: the deploy's step confirms what it set, read as every other reader reads it."""
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["persistence"]:
        print("usage: gpu_settings.py persistence", file=sys.stderr)
        return 2
    done = subprocess.run(["nvidia-smi"] + QUERY, stdout=subprocess.PIPE, text=True)
    off = persistence_off(parse(done.stdout)) if done.returncode == 0 else ["?"]
    if off:
        print("persistence mode still off on GPU %s" % ", ".join(off), file=sys.stderr)
        return 1
    print("persistence mode on for every GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())

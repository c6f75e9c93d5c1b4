"""The tiny stand-in model's weight shard: a few MB of reproducible bytes (the same bytes on
every machine, so its sha256 and the manifest never change), so that copy and hash rates
mean something. The stand-in engine never reads it.

    python3 sandbox/models/make_shard.py [--mib 8]   # writes tiny-standin/model.safetensors
"""

import argparse
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARD = os.path.join(HERE, "tiny-standin", "model.safetensors")
SEED = b"sglang-deploy tiny-standin shard v1"


def shard_bytes(mib):
    """``mib`` MiB of a SHA-256 counter stream seeded by SEED."""
    out = bytearray()
    counter = 0
    while len(out) < mib << 20:
        out += hashlib.sha256(SEED + counter.to_bytes(8, "big")).digest() * 128
        counter += 1
    return bytes(out[: mib << 20])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=8)
    parser.add_argument("--out", default=SHARD)
    args = parser.parse_args(argv)
    data = shard_bytes(args.mib)
    try:
        with open(args.out, "rb") as f:
            if f.read() == data:
                return 0  # already there: keep its mtime, nothing to re-stage
    except OSError:
        pass
    with open(args.out + ".tmp", "wb") as f:
        f.write(data)
    os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

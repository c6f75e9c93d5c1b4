#!/usr/bin/env python3
"""Write a copy of a PyPI wheel without some members, fetching only the kept members (HTTP
range requests), and drop those members from its RECORD.

    python3 slim_wheel.py OUTDIR FILENAME DROP_REGEX [DROP_REGEX ...]

e.g.
    python3 slim_wheel.py .whl sglang_kernel-0.4.5-cp310-abi3-manylinux2014_x86_64.whl \
        '^sgl_kernel/flash_ops\\.' '^sgl_kernel/sm100/' '^sgl_kernel/flashmla_ops\\.' '^sgl_kernel/infllm_ops\\.'
    python3 slim_wheel.py .whl xgrammar-0.2.1-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl \
        '^xgrammar/lib/.*\\.a$'
"""

import io
import os
import re
import sys
import urllib.request
import zipfile


class HttpFile(io.RawIOBase):
    def __init__(self, url):
        self.url = url
        head = urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60)
        self.size = int(head.headers["Content-Length"])
        self.pos = 0

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, off, whence=0):
        self.pos = off if whence == 0 else self.pos + off if whence == 1 else self.size + off
        return self.pos

    def readinto(self, b):
        if self.pos >= self.size or not len(b):
            return 0
        end = min(self.pos + len(b), self.size) - 1
        req = urllib.request.Request(self.url, headers={"Range": "bytes=%d-%d" % (self.pos, end)})
        data = urllib.request.urlopen(req, timeout=300).read()
        b[: len(data)] = data
        self.pos += len(data)
        return len(data)


def wheel_url(filename):
    name = re.sub(r"[-_.]+", "-", filename.split("-")[0]).lower()
    html = urllib.request.urlopen("https://pypi.org/simple/%s/" % name, timeout=60).read().decode()
    for href, text in re.findall(r'<a href="([^"#]+)[^"]*"[^>]*>([^<]+)</a>', html):
        if text == filename:
            return href
    raise SystemExit("not on PyPI: " + filename)


def main(outdir, filename, *drops):
    rx = [re.compile(d) for d in drops]
    src = zipfile.ZipFile(io.BufferedReader(HttpFile(wheel_url(filename)), buffer_size=1 << 20))
    os.makedirs(outdir, exist_ok=True)
    out_path = os.path.join(outdir, filename)
    dropped = []
    with zipfile.ZipFile(out_path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if any(r.search(info.filename) for r in rx):
                dropped.append(info.filename)
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = (
                    "\n".join(
                        row
                        for row in lines
                        if row.split(",")[0] not in dropped
                        and not any(r.search(row.split(",")[0]) for r in rx)
                    )
                    + "\n"
                ).encode()
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)
    print(
        "%s: %.1f MiB (dropped %d members: %s)"
        % (out_path, os.path.getsize(out_path) / 2**20, len(dropped), ", ".join(dropped))
    )


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])

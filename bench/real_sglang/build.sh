#!/usr/bin/env bash
# Build the SGLang 0.5.17 bundle for the GPU machine (torch 2.11.0+cu130, Python 3.12), as
# `python3 bench/real_engine.py prepare` does it: on this machine (x86-64, glibc >= 2.34, a
# CPython 3.12 with pip, PyPI reachable; ~4 min, ~52 MiB downloaded).
#   bash bench/real_sglang/build.sh [OUTDIR]   -> OUTDIR/sglang-0.5.17-site.tar.xz + OUTDIR/manifest.txt
# OUTDIR defaults to .sgl-bundle in the current directory (the project root).
set -euo pipefail
OUT=$(realpath -m "${1:-.sgl-bundle}"); HERE=$(dirname "$(realpath "$0")"); PY=${PY:-$( (python3.12 --version >/dev/null 2>&1 && command -v python3.12) || ls -d "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)}   # any CPython 3.12 with pip
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; mkdir -p "$OUT" "$W/whl"
# 1. sglang-kernel and xgrammar without what a Llama on an H200 never loads (ranged reads:
#    ~28 MiB fetched instead of 408): FA3/FlashMLA/InfLLM/SM100 .so files, a static .a.
python3 "$HERE/slim_wheel.py" "$W/whl" sglang_kernel-0.4.5-cp310-abi3-manylinux2014_x86_64.whl \
  '^sgl_kernel/flash_ops\.' '^sgl_kernel/sm100/' '^sgl_kernel/flashmla_ops\.' '^sgl_kernel/infllm_ops\.'
python3 "$HERE/slim_wheel.py" "$W/whl" xgrammar-0.2.1-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl \
  '^xgrammar/lib/.*\.a$'
# 2. everything else the server imports that the GPU machine lacks (exact versions)
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 --abi abi3 --abi none --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
  --platform manylinux1_x86_64 --platform any -d "$W/whl" \
  sglang==0.5.17 flashinfer-python==0.6.15.post1 apache-tvm-ffi==0.1.11 \
  transformers==5.12.1 tokenizers==0.22.2 \
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34 opentelemetry-api==1.45.2 \
  pydantic==2.14.4 pydantic-core==2.50.5 typing-extensions==4.16.0 annotated-types==0.8.0 typing-inspection==0.4.5 \
  openai==2.6.1 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 \
  orjson==3.13.0 msgspec==0.23.0 pyzmq==27.3.0 setproctitle==1.3.8 pybase64==1.5.1 \
  partial-json-parser==0.2.1.1.post7 zstandard==0.25.0 dill==0.4.1 gguf==0.19.0 \
  compressed-tensors==0.18.0 loguru==0.7.3 soundfile==0.13.1 cffi==2.1.1 pycparser==3.12 \
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
  ipython==9.18.1 ipython-pygments-lexers==1.1.1 jedi==0.20.1 parso==0.8.7 matplotlib-inline==0.2.2 \
  traitlets==5.16.1 pexpect==4.9.0 ptyprocess==0.7.0 prompt-toolkit==3.0.53 wcwidth==0.9.4 \
  stack-data==0.6.3 executing==2.3.0 asttokens==3.0.2 pure-eval==0.2.4
# 3. unpack into one site dir (no compilation: every wheel is binary), pack it
$PY -m pip install -q --no-index --no-deps --no-compile --target "$W/site" "$W/whl"/*.whl
# never imported by launch_server on this path: diffusion runtime, jedi stubs, zstd cffi backend
rm -rf "$W/site/bin" "$W/site/sglang/multimodal_gen" "$W/site/jedi/third_party" "$W/site/zstandard/_cffi".*
(cd "$W/whl" && ls -l --block-size=K *.whl) > "$OUT/manifest.txt"
tar -C "$W/site" -cf - . | xz -T0 -9e > "$OUT/sglang-0.5.17-site.tar.xz.part"
mv "$OUT/sglang-0.5.17-site.tar.xz.part" "$OUT/sglang-0.5.17-site.tar.xz"   # whole, or absent
ls -l "$OUT"; du -sh "$W/whl" "$W/site"

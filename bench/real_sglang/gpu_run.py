"""The engine a run serves with, set up on the machine it runs on (derived from the smoke-run
script gpu_run.sh that first ran SGLang 0.5.17 on the GPU machine):

- real: SGLang 0.5.17 from the bundle (`.sgl-bundle/sglang-0.5.17-site.tar.xz`, made by
  build.sh) unpacked into the venv `.sgl-venv` beside the image's own torch (a `zz_image.pth`
  puts the image's site-packages after the bundle's), the kernel caches in `.sgl-cache`
  (`jit-cache.tgz` from an earlier run unpacked there first), CUDA_HOME from nvcc, the pip
  CUDA libraries on LD_LIBRARY_PATH when sgl_kernel does not load without them, and the tiny
  Llama made by make_tiny_llama.py in `.sgl-cache/tiny-llama`;
- standin: the stand-in wheel (`make wheels`: build/wheels/) in a venv of its own
  (`.sgl-cache/standin-venv`), serving the sandbox's tiny model.

Both venvs survive between runs on a machine that stays up (`.ok` marks a finished one).
Standard library only.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

SITE_TARBALL = "sglang-0.5.17-site.tar.xz"
JIT_CACHE = "jit-cache.tgz"
JIT_DIRS = ("tvm-ffi", "triton")
VERSIONS = ("sglang", "sglang-kernel", "flashinfer-python", "xgrammar", "transformers", "torch", "triton")

# What each engine is expected to show where the two differ (report.py's verdicts read it).
EXPECT = {
    "real": {
        "title": "Real SGLang on the GPU machine",
        # setproctitle (a C extension) reuses argv *and* environ memory for the title.
        "environ_blanked": True,
        "crash_args": ["--tp-size", "2"],
        "crash_env": {},
        "crash_cause": "torch.AcceleratorError: CUDA error: invalid device ordinal",
    },
    "standin": {
        "title": "The stand-in engine, same flow",
        "environ_blanked": True,  # titled with the same setproctitle package
        # No GPU to be short of: the crash is the stand-in's own, in loading.
        "crash_args": ["--tp-size", "2"],
        "crash_env": {"SGLANG_STANDIN_FAIL": "crash-load", "SGLANG_STANDIN_FAIL_AFTER_SECONDS": "0.5"},
        "crash_cause": "SafetensorError",
    },
}


class SetupError(RuntimeError):
    """The engine cannot be set up here: the run stops before any promise."""


@dataclass
class Engine:
    name: str
    python: str
    env: dict  # the environment the server and the venv's interpreter run in
    model_path: str
    site_packages: str
    versions: dict = field(default_factory=dict)
    gpu: str = ""
    cache_dir: str = ""  # kernel caches (real): jit-cache.tgz is made of them
    notes: list = field(default_factory=list)


def _run(argv, env=None, timeout=300, check=True):
    found = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if check and found.returncode != 0:
        raise SetupError(
            "%s: exit %d: %s" % (" ".join(map(str, argv[:3])), found.returncode, found.stderr[-800:])
        )
    return found


def site_packages(venv, python=sys.executable):
    """The venv's purelib, for the interpreter version that made it."""
    version = "python%d.%d" % sys.version_info[:2] if python == sys.executable else None
    if version is None:
        return _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    return str(Path(venv) / "lib" / version / "site-packages")


def _versions_probe(names):
    return (
        "import json, importlib.metadata as m\n"
        "out = {}\n"
        "for d in %r:\n"
        "    try:\n"
        "        out[d] = m.version(d)\n"
        "    except m.PackageNotFoundError:\n"
        "        out[d] = None\n"
        "print(json.dumps(out))\n" % (tuple(names),)
    )


def gpu_name():
    if shutil.which("nvidia-smi") is None:
        return ""
    found = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    )
    return "; ".join(line.strip() for line in found.stdout.splitlines() if line.strip())


def real_engine(repo, bundle, say):
    repo, bundle = Path(repo), Path(bundle)
    venv, cache = repo / ".sgl-venv", repo / ".sgl-cache"
    cache.mkdir(exist_ok=True)
    tarball = bundle / SITE_TARBALL
    if not tarball.is_file():
        raise SetupError("%s is missing: run `python3 bench/real_engine.py prepare` and carry it" % tarball)
    site = site_packages(venv)
    if not (venv / ".ok").is_file():  # the bundle first, then the image's packages (torch ...)
        say("venv %s: unpacking %s" % (venv, tarball.name))
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
        with tarfile.open(tarball) as tar:
            tar.extractall(site, filter="tar")
        torch = importlib.util.find_spec("torch")
        if torch is None:
            raise SetupError(
                "this interpreter (%s) has no torch: the image's python3 holds it" % sys.executable
            )
        image_site = os.path.dirname(os.path.dirname(torch.origin))
        Path(site, "zz_image.pth").write_text(image_site + "\n")
        (venv / ".ok").touch()
    jit = bundle / JIT_CACHE
    if jit.is_file() and not (cache / JIT_DIRS[0]).is_dir():
        say("kernel cache: unpacking %s" % jit)
        with tarfile.open(jit) as tar:
            tar.extractall(cache, filter="tar")
    env = dict(os.environ)
    env["PATH"] = env.get("PATH", "") + os.pathsep + os.path.dirname(sys.executable)  # ninja
    nvcc = shutil.which("nvcc")
    if "CUDA_HOME" not in env and nvcc:
        env["CUDA_HOME"] = os.path.dirname(os.path.dirname(nvcc))
    env.update(
        TVM_FFI_CACHE_DIR=str(cache / "tvm-ffi"),
        TRITON_CACHE_DIR=str(cache / "triton"),
        XDG_CACHE_HOME=str(cache),
        HF_HUB_OFFLINE="1",
    )
    python = str(venv / "bin" / "python")
    probe = "import torch, sgl_kernel\n" + _versions_probe(VERSIONS)
    found = _run([python, "-c", probe], env=env, check=False)
    notes = []
    if found.returncode != 0:  # sgl_kernel's sm90 .so links libcudart/libcublas/libnvrtc.so.13
        libs = _run(
            [
                python,
                "-c",
                "import os, nvidia; print(':'.join(sorted({d for p in nvidia.__path__ for d, _, fs in "
                "os.walk(p) if any('.so.' in f for f in fs)})))",
            ],
            env=env,
        ).stdout.strip()
        env["LD_LIBRARY_PATH"] = libs + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        notes.append("sgl_kernel needed the pip CUDA libraries on LD_LIBRARY_PATH")
        found = _run([python, "-c", probe], env=env, check=False)
        if found.returncode != 0:
            raise SetupError("sgl_kernel does not load: %s" % found.stderr[-800:])
    versions = json.loads(found.stdout.strip().splitlines()[-1])
    model = cache / "tiny-llama"
    if not (model / "model.safetensors").is_file():
        say("model: making the tiny Llama in %s" % model)
        _run([python, str(Path(__file__).with_name("make_tiny_llama.py")), str(model)], env=env)
    return Engine("real", python, env, str(model), site, versions, gpu_name(), str(cache), notes)


def standin_engine(repo, say):
    repo = Path(repo)
    wheels = sorted((repo / "build" / "wheels").glob("sglang-*.whl"))
    if not wheels:
        raise SetupError("no stand-in wheel in build/wheels: run `make wheels`")
    venv = repo / ".sgl-cache" / "standin-venv"
    stamp = "%s %d\n" % (wheels[-1].name, wheels[-1].stat().st_mtime_ns)
    ok = venv / ".ok"
    if not ok.is_file() or ok.read_text() != stamp:
        say("venv %s: the stand-in wheel %s" % (venv, wheels[-1].name))
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheels[-1])], timeout=600)
        ok.write_text(stamp)
    python = str(venv / "bin" / "python")
    env = dict(os.environ)
    for name in [n for n in env if n.startswith("SGLANG_STANDIN_")]:
        del env[name]  # the stand-in's defaults, unless the run sets a knob itself
    versions = json.loads(_run([python, "-c", _versions_probe(VERSIONS)], env=env).stdout)
    return Engine(
        "standin",
        python,
        env,
        str(repo / "sandbox" / "models" / "tiny-standin"),
        site_packages(venv, python),
        versions,
        gpu_name(),
    )


def install_hook(engine, staged, module):
    """The rendered start-up hook into the venv's site-packages, where the interpreter runs a
    .pth at start-up; whether a fresh interpreter of the venv then has it loaded."""
    for suffix in (".py", ".pth"):
        shutil.copyfile(Path(staged) / (module + suffix), Path(engine.site_packages) / (module + suffix))
    found = _run(
        [engine.python, "-c", "import sys; print(%r in sys.modules)" % module], env=engine.env, check=False
    )
    return {
        "module": module,
        "site_packages": engine.site_packages,
        "loaded": found.stdout.strip() == "True",
        "probe_stderr": found.stderr[-300:],
    }


def jit_cache(engine, out):
    """The kernel caches of this machine as jit-cache.tgz (put it into .sgl-bundle/ for the
    next run); its size, or None when there is none."""
    dirs = [d for d in JIT_DIRS if engine.cache_dir and (Path(engine.cache_dir) / d).is_dir()]
    if not dirs:
        return None
    path = Path(out) / JIT_CACHE
    with tarfile.open(path, "w:gz") as tar:
        for d in dirs:
            tar.add(Path(engine.cache_dir) / d, arcname=d)
    return path.stat().st_size


def sysconfig_note():
    return "runner: %s (Python %s, %s)" % (sys.executable, sys.version.split()[0], sysconfig.get_platform())

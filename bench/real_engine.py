"""The real SGLang engine as a project tool: what the deploy promises about the engine, proved
against a real SGLang 0.5.17 on the GPU machine (one H200), with the project's own node scripts
and files rendered by the project's own code exactly as the deploy renders them.

    python3 bench/real_engine.py prepare            # here: the bundle, then the staged files
    python3 bench/real_engine.py gpu --out $OUT     # there, carrying .sgl-bundle
    python3 bench/real_engine.py gpu --engine standin --out /tmp/x   # here: the same flow, stand-in

    # the operators' shape: bound to 127.0.0.2, a reasoning parser, an API key (promise k)
    python3 bench/real_engine.py prepare --profile tiny-llama-operator.yml \
        --standin-profile tiny-llama-operator-standin.yml

prepare builds the engine bundle (bench/real_sglang/build.sh: ~52 MiB from PyPI, ~4 min) into
.sgl-bundle/ unless it is there, then stages into .sgl-bundle/deploy/: `after` (this working
tree's sglang_deploy/node), `before` (the same directory at BEFORE), and per engine
(bench/real_sglang/tiny-llama.yml, tiny-llama-standin.yml, linted first) the start-up hook
(<HOOK_MODULE>.py/.pth), the env file, the server's argv (argv.json), the workers' expected
variables (hook_vars.json) and the scripts' arguments (plan.json: gate.py's as the deploy
gives them, decode_check.py's as NodeScripts builds them). A profile whose secrets give the
server an API key (`server_arg: api-key`) gets a fresh key in its env file; the run writes the
--config file with the unit's ExecStartPre= (node/secret_args.py) and every probe sends the key. Run it again after any change to
sglang_deploy/ or templates/: the GPU side runs what is staged.

gpu (bench/real_sglang/promises.py, standard library only) sets the engine up, installs the
hook into the venv's site-packages, and proves each promise with a time budget (--budget);
it writes $OUT/real-sglang-<date>.txt (the table), real-engine.json (every script's result
line), the server logs and a fresh jit-cache.tgz (put it into .sgl-bundle/: later cold starts
are shorter). Exit 0 when every promise held or does not apply to the engine.
"""

import argparse
import io
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
BEFORE = "575ddb1"  # the node scripts before the workers' check read the hook's records
PROFILES = {"real": "tiny-llama.yml", "standin": "tiny-llama-standin.yml"}
SITE_TARBALL = "sglang-0.5.17-site.tar.xz"
TREE_LIMIT_MIB, TREE_WARN_MIB = 64, 60
UNIT = "sglang.service"


def say(text):
    print(text, flush=True)


def tree_bytes(repo=REPO):
    """What travels to the GPU machine besides the carried paths: tracked files and untracked
    files git does not ignore."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    total = 0
    for name in set(filter(None, listing.split(b"\0"))):
        path = Path(os.fsdecode(repo / os.fsdecode(name)))
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def dir_bytes(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())


def stage_node_scripts(deploy):
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "sglang_deploy" / "node", deploy / "after", ignore=ignore)
    archive = subprocess.run(
        ["git", "archive", BEFORE, "sglang_deploy/node"], cwd=REPO, capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="tar")
        shutil.move(os.path.join(tmp, "sglang_deploy", "node"), deploy / "before")


def stage_profile(engine, deploy):
    """One engine's files, rendered by the deploy's own code; its lint findings."""
    sys.path.insert(0, str(REPO))
    from sglang_deploy.node.lib import env_records
    from sglang_deploy.plan import render
    from sglang_deploy.plan.commands import gate_args, secret_args_argv
    from sglang_deploy.plan.commands.unit import NodeScripts
    from sglang_deploy.profile.lint import finding_lines
    from sglang_deploy.profile.schema import load_profile

    profile = load_profile(HERE / "real_sglang" / PROFILES[engine])
    errors, warnings = finding_lines(profile)
    if errors:
        raise SystemExit("profile lint errors:\n" + "\n".join(errors))
    out = deploy / engine
    out.mkdir()
    (out / (render.HOOK_MODULE + ".py")).write_text(render.render_hook_module(profile))
    (out / (render.HOOK_MODULE + ".pth")).write_text(render.render_hook_pth(profile))
    env_file = out / (profile.service.name + ".env")
    # A secret server argument (--api-key) gets a fresh key of this staging, in the env file
    # only (0600), as the operator's environment puts it there on a deploy.
    keys = {var: "sk-run-" + secrets.token_hex(16) for var in profile.secret_server_args.values()}
    env_file.write_text(render.render_env_file(profile, keys))
    env_file.chmod(0o600)
    (out / "argv.json").write_text(json.dumps(profile.argv(), indent=1) + "\n")
    (out / "hook_vars.json").write_text(json.dumps(profile.hook_vars(), indent=1, sort_keys=True) + "\n")
    scripts = NodeScripts("@SCRIPTS@", UNIT, profile, {"env": "@ENVFILE@"}, "@STATE@/last-good", "", "")
    plan = {
        "profile": profile.name,
        "unit": UNIT,
        "env_file": env_file.name,
        "hook_module": render.HOOK_MODULE,
        "records_var": env_records.RECORDS_VAR,
        "gate_args": [str(a) for a in [*gate_args(profile), *scripts.api_key_args()]],
        "gate_timeout_s": profile.readiness.timeout_s,
        "decode_check": shlex.split(scripts.decode_check()),
        "gpus_needed": profile.gpus_per_node,
        "timeout_stop_sec": profile.service.timeout_stop_sec,
        "probe_host": profile.service.probe_host,
        "port": profile.service.port,
        "rendered_from": rendered_from(),
        # The unit's ExecStartPre= (secret_args.py) and the --config path in argv it writes
        "secret_args": secret_args_argv("@SCRIPTS@", "@RUN@/secret-args.yaml", profile.secret_server_args)
        if keys
        else None,
        "config_path": env_records.secret_args_path(profile.service.name) if keys else None,
        "key_var": profile.secret_server_args.get("api-key"),
    }
    (out / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    return errors, warnings


def rendered_from():
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "sglang_deploy", "templates"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return head.stdout.strip() + (" + working-tree changes" if dirty else "")


def prepare(args):
    bundle = REPO / args.bundle
    if (bundle / SITE_TARBALL).is_file():
        say("bundle: %s is there, reused" % (bundle / SITE_TARBALL).relative_to(REPO))
    elif args.no_build:
        say("bundle: not built (--no-build): only the stand-in can run")
    else:
        say("bundle: building into %s (~4 min, ~52 MiB from PyPI)" % bundle)
        subprocess.run(["bash", str(HERE / "real_sglang" / "build.sh"), str(bundle)], cwd=REPO, check=True)
    deploy = bundle / "deploy"
    shutil.rmtree(deploy, ignore_errors=True)
    deploy.mkdir(parents=True)
    stage_node_scripts(deploy)
    if args.profile:
        PROFILES["real"] = args.profile
    if args.standin_profile:
        PROFILES["standin"] = args.standin_profile
    for engine in PROFILES:
        _, warnings = stage_profile(engine, deploy)
        say("staged %s: %s (%d lint warnings, no errors)" % (engine, PROFILES[engine], len(warnings)))
    say("staged %s: node scripts after (this tree, %s) and before (%s)" % (deploy, rendered_from(), BEFORE))
    carried, tree = dir_bytes(bundle), tree_bytes()
    total = (carried + tree) / 2**20
    say(
        "carry: [%r] (%.1f MiB) + the working tree (%.1f MiB) = %.1f MiB of %d MiB"
        % (args.bundle, carried / 2**20, tree / 2**20, total, TREE_LIMIT_MIB)
    )
    if total > TREE_WARN_MIB:
        say(
            "warning: %.1f MiB is above %d MiB: leave jit-cache.tgz out of the bundle"
            % (total, TREE_WARN_MIB)
        )
        return 1
    return 0


def gpu(args):
    from real_sglang import promises  # bench/ is this script's directory, on sys.path

    return promises.main(args, REPO)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="verb", required=True)
    pp = sub.add_parser("prepare", help="build the bundle (once) and stage the rendered files")
    pp.add_argument("--no-build", action="store_true", help="stage only (enough for --engine standin)")
    pp.add_argument(
        "--profile",
        help="the real engine's profile, a file in bench/real_sglang/ (default %s)" % PROFILES["real"],
    )
    pp.add_argument(
        "--standin-profile",
        help="the stand-in's profile, a file in bench/real_sglang/ (default %s)" % PROFILES["standin"],
    )
    g = sub.add_parser("gpu", help="prove the promises against a running engine")
    g.add_argument("--out", required=True, help="where the table, JSON, logs and jit-cache.tgz go")
    g.add_argument("--engine", choices=("real", "standin"), default="real")
    g.add_argument("--budget", type=float, default=470.0, help="seconds the whole run may take")
    for q in (pp, g):
        q.add_argument("--bundle", default=".sgl-bundle", help="relative to the project root")
    args = p.parse_args(argv)
    return prepare(args) if args.verb == "prepare" else gpu(args)


if __name__ == "__main__":
    sys.exit(main())

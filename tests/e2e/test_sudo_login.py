"""The main scenarios as a login user with sudo, as real GPU fleets are reached (`ubuntu`,
`admin`): the sandbox's `deploy` user (`sandbox.py up --nodes 2 --bare 1 --sudo-user`: node2
bare), serving as operators run it: bound to one address that is not 127.0.0.1 (127.0.0.2, as a
node's cluster address) with an API key (a secret with `server_arg: api-key`). Bare node ->
serving, a re-run that changes nothing, a restart, a rollback, model staging, `make verify`; the
Hugging Face token nowhere but its two root-only files and the API key nowhere but those and the
start's --config file: a search of the node's whole filesystem after a passing and after a
failing run, /tmp, /var/tmp and /dev/shm polled all along, the process list and the journal.

    python3 sandbox/sandbox.py up --nodes 2 --bare 1 --sudo-user
    python3 -m pytest -m sudo tests/e2e/test_sudo_login.py -q -s
"""

import os
import secrets
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from .sandbox import (  # noqa: F401 (a fixture)
    deploy,
    env_values,
    nodes,
    profile_dir,
    ssh,
    ssh_argv,
    unit_start,
    verify,
    wipe,
    write_profile,
)

pytestmark = pytest.mark.sudo

NODE = "node2"  # the bare one
TOKEN = "hf_" + secrets.token_hex(16)
KEY = "sk-" + secrets.token_hex(16)  # the server's API key
ADDRESS = "127.0.0.2"  # what the server binds: not 127.0.0.1, not every interface
# The only files that may ever hold the token: the env file and its last known good copy.
SECRET_COPIES = {
    "/etc/sglang/sglang.env": "/etc/sglang",
    "/var/lib/sglang-deploy/sglang/last-good/env": "/var/lib/sglang-deploy/sglang/last-good",
}
# ... and the API key those and the file of the running start that SGLang's --config reads.
KEY_FILE = "/run/sglang-env/sglang/secret-args.yaml"
# Every top-level directory but the kernel's: the token is read from stdin, never an argument
# (grep takes it on its standard input from the shell's printf, a builtin: on no command line,
# where the process list check would find the test's own search).
SEARCH = (
    'IFS= read -r t; for d in /* /dev/shm; do case "$d" in /proc|/sys|/dev) continue;; esac; '
    'printf "%s\\n" "$t" | grep -rlsF -f - "$d"; done; true'
)
POLL = (
    "IFS= read -r t; IFS= read -r k; while :; do "
    'for f in $(printf "%s\\n%s\\n" "$t" "$k" | grep -rlsF -f - /tmp /var/tmp /dev/shm); do echo "hit $f"; done; '
    'for f in /tmp/pyinfra-*; do [ -e "$f" ] && echo "seen $(stat -c %a "$f") $f"; done; '
    "sleep 0.2; done"
)


SECRETS = {"HF_TOKEN": TOKEN, "SGLANG_API_KEY": KEY}


def run(profiles, **kwargs):
    return deploy(profiles, limit=NODE, extra_env=SECRETS, **kwargs)


def holders(value=TOKEN):
    """Every file of the node that holds ``value``."""
    return sorted(set(ssh(NODE, SEARCH, stdin=value + "\n").split()))


def assert_secrets_where_they_belong():
    assert holders() == sorted(SECRET_COPIES)
    assert holders(KEY) == sorted([*SECRET_COPIES, KEY_FILE])
    assert ssh(NODE, f"stat -c '%a %U' {KEY_FILE}").strip() == "600 root"
    assert KEY not in ssh(NODE, "ps -eo args")  # no command line of any process
    assert KEY not in ssh(NODE, "journalctl --no-pager -o cat")  # SGLang logs server_args


@pytest.fixture(scope="module")
def keyed(profile_dir):
    """The sandbox profile bound to ADDRESS with an API key; `make verify` gets the operator's
    secrets as the deploy does."""
    saved = {name: os.environ.get(name) for name in SECRETS}
    os.environ.update(SECRETS)
    yield write_profile(
        profile_dir,
        "sudo-keyed",
        f"""
        extends: {{profiles}}/sandbox.yml
        service:
          host: {ADDRESS}
        secrets:
          SGLANG_API_KEY: {{{{from_env: SGLANG_API_KEY, required: true, server_arg: api-key}}}}
        """,
    )
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def extending(profile_dir, name, keyed, body):
    """A profile ``name`` over the keyed one, with ``body`` (YAML) added."""
    return write_profile(profile_dir, name, f"extends: {keyed}\n" + body)


@pytest.fixture(scope="module")
def tmp_poll():
    """/tmp, /var/tmp and /dev/shm searched for the token every 0.2 s while the module runs;
    pyinfra's upload copies (/tmp/pyinfra-*) noted with their modes."""
    seen = []
    poller = subprocess.Popen(
        ssh_argv(NODE, POLL), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    poller.stdin.write(TOKEN + "\n" + KEY + "\n")
    poller.stdin.flush()
    reader = threading.Thread(target=lambda: seen.extend(poller.stdout), daemon=True)
    reader.start()
    yield seen
    poller.kill()
    poller.wait(timeout=10)


@pytest.fixture(scope="module")
def login():
    _, all_nodes = nodes()
    for name in ("node1", NODE):
        assert all_nodes[name]["ssh_user"] == "deploy" and all_nodes[name]["sudo"] is True, (
            "boot with: sandbox.py up --nodes 2 --bare 1 --sudo-user"
        )
    assert all_nodes[NODE]["bare"] is True
    return all_nodes[NODE]


def test_the_login_is_not_root_and_sudo_needs_no_password(login):
    assert ssh(NODE, "id -un", as_login=True).strip() == "deploy"
    assert ssh(NODE, "sudo -n id -u", as_login=True).strip() == "0"
    assert ssh(NODE, "id -u").strip() == "0"  # the tests' own root checks go through sudo


@pytest.fixture(scope="module")
def served(login, tmp_poll, keyed):
    wipe(NODE)
    started = time.monotonic()
    first = run({NODE: keyed})
    assert first.returncode == 0, first.output[-6000:]
    return first, time.monotonic() - started


def test_a_bare_node_serves_when_deployed_as_the_sudo_user(served):
    first, seconds = served
    assert TOKEN not in first.output and KEY not in first.output
    assert ssh(NODE, "systemctl is-active sglang.service").strip() == "active"
    assert "config.json" in ssh(NODE, "cat /models/tiny-standin/.sglang-deploy-manifest.json")
    for path, directory in SECRET_COPIES.items():
        assert ssh(NODE, f"stat -c '%a %U %G' {path}").strip() == "600 root root", path
        assert ssh(NODE, f"stat -c '%a %U' {directory}").strip() == "700 root", directory
    print(f"\nbare node -> serving as a sudo user: {seconds:.1f}s")


def test_after_a_passing_run_only_the_two_root_files_hold_the_token(served):
    assert_secrets_where_they_belong()


def get(path, key=None):
    """The HTTP status the server at ADDRESS answers ``path`` with (0: no answer)."""
    port = nodes()[1][NODE]["server_port"]
    request = urllib.request.Request(f"http://{ADDRESS}:{port}{path}")
    if key:
        request.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def test_the_server_is_bound_to_its_address_and_asks_for_its_key(served):
    assert get("/v1/models") == 401 and get("/v1/models", KEY) == 200
    assert get("/health") == 200  # open, as SGLang keeps it
    port = nodes()[1][NODE]["server_port"]
    assert ssh(NODE, f"ss -Hltn 'sport = :{port}' | awk '{{print $4}}'").split() == [f"{ADDRESS}:{port}"]


def test_a_rerun_changes_nothing_and_restarts_nothing(served, keyed):
    before = unit_start(NODE)
    again = run({NODE: keyed})
    assert again.returncode == 0 and again.changed == 0, again.output[-5000:]
    assert unit_start(NODE) == before


def test_a_changed_value_restarts_through_the_gate(served, profile_dir, keyed):
    changed = extending(profile_dir, "sudo-restart", keyed, "env:\n  NCCL_NTHREADS: 256\n")
    before = unit_start(NODE)
    done = run({NODE: changed})
    assert done.returncode == 0, done.output[-5000:]
    assert unit_start(NODE) != before
    assert env_values(NODE)["NCCL_NTHREADS"] == "256"
    assert verify({NODE: changed}).returncode == 0


def test_a_crashing_start_is_rolled_back_and_leaves_the_token_in_its_two_files_only(
    served, profile_dir, keyed
):
    crashing = extending(
        profile_dir,
        "sudo-crash",
        keyed,
        "env:\n  SGLANG_STANDIN_FAIL: crash-load\n  SGLANG_STANDIN_FAIL_AFTER_SECONDS: 1\n",
    )
    failed = run({NODE: crashing})
    assert failed.returncode != 0
    assert f"[{NODE}] rolled back: serving" in failed.output, failed.output[-5000:]
    assert TOKEN not in failed.output and KEY not in failed.output
    assert ssh(NODE, "systemctl is-active sglang.service").strip() == "active"
    assert_secrets_where_they_belong()  # after a failing run too


def test_a_model_directory_is_restaged_through_sudo(served, keyed):
    ssh(NODE, "rm /models/tiny-standin/.sglang-deploy-manifest.json /models/tiny-standin/config.json")
    done = run({NODE: keyed})
    assert done.returncode == 0, done.output[-5000:]
    assert ssh(NODE, "test -s /models/tiny-standin/config.json && echo ok").strip() == "ok"
    assert "config.json" in ssh(NODE, "cat /models/tiny-standin/.sglang-deploy-manifest.json")
    assert verify({NODE: keyed}).returncode == 0


def test_a_failing_hub_download_leaves_no_token_file(served, profile_dir, keyed):
    hub = extending(
        profile_dir,
        "sudo-hub",
        keyed,
        "model:\n  path: /models/sudo-hub-missing\n  source:\n    huggingface: "
        '{{repo: sglang-deploy/no-such-repo, revision: "0000000000000000000000000000000000000000"}}\n',
    )
    failed = run({NODE: hub})
    assert failed.returncode != 0
    if "staging failed" not in failed.output:
        pytest.skip("the run stopped before the download (no Hub client venv on this sandbox)")
    assert TOKEN not in failed.output
    assert ssh(NODE, "ls -A /run/sglang-deploy/hub 2>/dev/null || true").strip() == ""
    assert_secrets_where_they_belong()


def test_the_node_serves_its_profile_and_make_verify_passes_as_the_sudo_user(served, keyed):
    done = run({NODE: keyed})
    assert done.returncode == 0, done.output[-5000:]
    verified = verify({NODE: keyed})
    assert verified.returncode == 0, verified.stdout[-5000:]
    assert TOKEN not in verified.stdout + verified.stderr and KEY not in verified.stdout + verified.stderr


def test_no_temporary_file_ever_held_the_token(served, tmp_poll):
    """Last: the poll ran through every run above."""
    assert not [line for line in tmp_poll if line.startswith("hit ")], tmp_poll  # token or key
    uploads = sorted({line.split()[-1] for line in tmp_poll if line.startswith("seen ")})
    print(f"\npyinfra upload copies seen in /tmp (no secret among them): {len(uploads)}")

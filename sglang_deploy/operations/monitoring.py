"""Monitoring's operations: pinned distribution packages, a unit's drop-in, Prometheus'
configuration checked by promtool before it replaces the running one, the (re)start,
reload and serving checks of Prometheus and the node exporter, each through its gate
(node/prometheus_gate.py), and Grafana's provisioning where Grafana is."""

from __future__ import annotations

import posixpath
import shlex
from io import StringIO
from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.command import FileUploadCommand
from pyinfra.facts.apt import noninteractive_apt
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import Directory

from sglang_deploy.facts.monitoring import PrometheusGate
from sglang_deploy.facts.serving import FileDigests, UnitState
from sglang_deploy.node.lib import status
from sglang_deploy.operations import remote
from sglang_deploy.operations.files import log_redacted_diff, same_content, written_whole
from sglang_deploy.operations.remote import NEW_SUFFIX
from sglang_deploy.operations.service import script_cause
from sglang_deploy.operations.streamed import run_streamed
from sglang_deploy.plan.monitoring import unmet_pins

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


@operation()
def pinned_packages(packages: Sequence[str]):
    """
    Install distribution packages at their pinned versions.

    Those dpkg does not list at their pinned version are installed (up or down to it), from the
    package lists the node has; the lists are refreshed only when that install fails (none yet, or
    too old to hold the version), and a re-run makes no apt call.

    + packages: ``name=version`` pins (Debian's versions)

    **Examples:**

    .. code:: python

        monitoring.pinned_packages(
            name="Prometheus package",
            packages=list(plan.packages),
        )
    """
    unmet = unmet_pins(packages, host.get_fact(DebPackages))
    if not unmet:
        host.noop(f"installed: {', '.join(packages)}")
        return
    pins = " ".join(shlex.quote(pin) for pin in unmet)
    install = noninteractive_apt(f"install --no-install-recommends --allow-downgrades {pins}")
    yield f"{install} || {{ apt-get update && {install}; }}"


@operation()
def drop_in(path: str, content: str):
    """
    A unit's drop-in, written whole when it differs, then daemon-reload.

    The drop-in is ``<unit>.d/<file>``, written before the package, so the unit it installs starts
    as the drop-in says.

    + path: the drop-in's path
    + content: its text

    **Examples:**

    .. code:: python

        monitoring.drop_in(
            name="Prometheus drop-in",
            path=plan.drop_in_path,
            content=plan.drop_in_text,
        )
    """
    if same_content(host.get_fact(FileDigests, paths=[path]).get(path), content):
        host.noop(f"{path} is up to date")
        return
    log_redacted_diff(path, content, ())
    yield f"mkdir -p {shlex.quote(posixpath.dirname(path))}"
    yield from written_whole(path, StringIO(content), "0644")
    yield "systemctl daemon-reload"


@operation()
def checked_configuration(files: Mapping[str, str], config_path: str, staging_dir: str):
    """
    Install Prometheus' configuration and rule files once promtool accepted them.

    ``promtool check config`` checks them together: every file is staged under ``staging_dir`` as it
    lies under the configuration's directory (rule_files are relative to it, so the check reads the
    staged rules), checked, then each changed one is copied beside its target and renamed over it. A
    configuration or rule that does not parse fails here, before anything is replaced or reloaded:
    the running Prometheus keeps what it has.

    + files: {path on the node: text}; the configuration last
    + config_path: the configuration's path (one of ``files``)
    + staging_dir: where the set is checked (emptied first)

    **Examples:**

    .. code:: python

        monitoring.checked_configuration(
            name="Prometheus configuration and rules",
            files=plan.files,
            config_path=CONFIG_PATH,
            staging_dir=plan.staging_dir,
        )
    """
    remote_files = host.get_fact(FileDigests, paths=list(files))
    changed = [dest for dest, text in files.items() if not same_content(remote_files.get(dest), text)]
    if not changed:
        host.noop(f"{config_path} and {len(files) - 1} rule file(s) are up to date")
        return
    config_dir = posixpath.dirname(config_path)
    stage = shlex.quote(staging_dir)
    yield f"rm -rf {stage} && mkdir -p {stage}"
    for dest, text in files.items():
        staged = posixpath.join(staging_dir, posixpath.relpath(dest, config_dir))
        yield f"mkdir -p {shlex.quote(posixpath.dirname(staged))}"
        yield FileUploadCommand(StringIO(text), staged, remote_temp_filename=host.get_temp_filename(staged))
    checked = shlex.quote(posixpath.join(staging_dir, posixpath.basename(config_path)))
    refused = shlex.quote("promtool refused the configuration or its rules: nothing was replaced or reloaded")
    yield f"promtool check config {checked} || {{ echo {refused} >&2; exit 1; }}"
    for dest in changed:
        log_redacted_diff(dest, files[dest], ())
        staged = shlex.quote(posixpath.join(staging_dir, posixpath.relpath(dest, config_dir)))
        temp = shlex.quote(f"{posixpath.dirname(dest)}/.{posixpath.basename(dest)}{NEW_SUFFIX}")
        yield (
            f"mkdir -p {shlex.quote(posixpath.dirname(dest))} && "
            f"install -m 0644 -o root -g root {staged} {temp} && sync {temp} && mv -f {temp} {shlex.quote(dest)}"
        )
    yield f"rm -rf {stage}"


@operation()
def grafana_provisioned(
    provisioning_dir: str,
    files: Mapping[str, str],
    read_at_start: Sequence[str],
    unit: str,
    warnings: Sequence[str] = (),
):
    """
    Grafana's provisioning where the host has Grafana.

    Grafana is there when ``provisioning_dir`` exists (the deploy never installs it). Each file that
    differs, or is not 0644 root, is written whole (nothing in them is secret: Grafana reads them
    whatever user it runs as); then, when one of those Grafana reads only at start changed, ``unit``
    is restarted if it runs (a stopped Grafana reads them when it starts). Where Grafana is not
    there, this says so and changes nothing.

    + provisioning_dir: Grafana's provisioning directory
    + files: {path on the node: text}
    + read_at_start: the paths among ``files`` a running Grafana does not read again
    + unit: Grafana's unit (``grafana-server.service``)
    + warnings: what the plan left out (a dashboard file missing on the controller), said here

    **Examples:**

    .. code:: python

        monitoring.grafana_provisioned(
            name="Grafana provisioning",
            provisioning_dir=plan.provisioning_dir,
            files=plan.files,
            read_at_start=list(plan.read_at_start),
            unit=plan.unit,
        )
    """
    if not host.get_fact(Directory, path=provisioning_dir):
        host.noop(f"Grafana is not installed here ({provisioning_dir} does not exist): nothing provisioned")
        return
    for line in warnings:
        host.log(f"grafana: {line}", logger.warning)
    remote_files = host.get_fact(FileDigests, paths=list(files))
    changed = [dest for dest, text in files.items() if not _provisioned(remote_files.get(dest), text)]
    if not changed:
        host.noop(
            f"Grafana's datasource, dashboard provider and {len(files) - len(read_at_start)} dashboard(s) are up to date"
        )
        return
    for dest in changed:
        log_redacted_diff(dest, files[dest], ())
        yield f"mkdir -p {shlex.quote(posixpath.dirname(dest))}"
        yield from written_whole(dest, StringIO(files[dest]), "0644")
    if not any(dest in read_at_start for dest in changed):
        return  # the provider reads the dashboards again by itself
    if host.get_fact(UnitState, unit=unit).get("LoadState") != "loaded":
        host.log(f"{unit} is not installed: Grafana reads its provisioning when it starts")
        return
    yield f"systemctl try-restart {shlex.quote(unit)}"


def _provisioned(remote, text):
    return same_content(remote, text) and remote["mode"] == "644" and remote["user"] == "root"


@operation(is_idempotent=False)
def restarted(unit: str, gate: str):
    """
    Restart ``unit`` (its package or drop-in changed), then its gate.

    + unit: e.g. ``prometheus.service``
    + gate: its gate's command line (plan/monitoring.py)

    **Examples:**

    .. code:: python

        monitoring.restarted(
            name="Prometheus restart",
            unit=plan.unit,
            gate=plan.gate(scripts_dir),
        )
    """
    yield f"systemctl restart {shlex.quote(unit)}"
    yield FunctionCommand(_gate, (unit, gate), {})


@operation(is_idempotent=False)
def reloaded(unit: str, gate: str):
    """
    Have Prometheus load its configuration again, gated on its word that it did.

    SIGHUP through systemd; a refused configuration fails with the cause from its journal.

    + unit: ``prometheus.service``
    + gate: the gate's command line with ``--reload``

    **Examples:**

    .. code:: python

        monitoring.reloaded(
            name="Prometheus reload",
            unit=plan.unit,
            gate=plan.gate(scripts_dir, reload=True),
        )
    """
    yield FunctionCommand(_gate, (unit, gate), {})


@operation()
def serving(unit: str, gate: str, gate_once: str):
    """
    ``unit`` enabled, running and passing its gate; nothing changes when it is.

    + unit: the service
    + gate: its gate's command line
    + gate_once: the same with timeout 0 (read as a fact)

    **Examples:**

    .. code:: python

        monitoring.serving(
            name="Prometheus serving",
            unit=plan.unit,
            gate=plan.gate(scripts_dir),
            gate_once=plan.gate(scripts_dir, timeout=0),
        )
    """
    state = host.get_fact(UnitState, unit=unit)
    if state.get("UnitFileState") != "enabled":
        yield f"systemctl enable {shlex.quote(unit)}"
    if state.get("ActiveState") not in ("active", "activating", "reloading"):
        yield f"systemctl start {shlex.quote(unit)}"
        yield FunctionCommand(_gate, (unit, gate), {})
        return
    found = host.get_fact(PrometheusGate, command=gate_once)
    if found and found.get("status") == status.READY:
        host.noop(f"{unit}: active, ready")
        return
    yield FunctionCommand(_gate, (unit, gate), {})


def _gate(state, host, unit, gate):
    ok, output = run_streamed(host, gate)
    if not ok:
        host.log_styled(f"{unit} gate failed: {script_cause(output)}", fg="red", log_func=logger.error)
        _, journal = remote.run(
            host, StringCommand(f"journalctl -u {shlex.quote(unit)} -n 15 --no-pager -o cat | cut -c1-300")
        )
        for line in journal.stdout_lines:
            host.log(f"  {unit}: {line}", logger.error)
    return ok

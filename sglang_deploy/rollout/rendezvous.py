"""Every host arrives, one plans, the rest wait: how the hosts of one operation meet.

pyinfra runs an operation on every host at once, each in its greenlet. Where the hosts must
decide something together (a restart's waves, a fan-out's trees, a canary's bake), each host
*arrives* with what it brings; the last to arrive *plans* once, with what every host brought,
and the others wait for the plan. Who is expected is known before the first host arrives:
the hosts registered for the meeting in the run state (``expect``, while the deploy is
planned), or the hosts given by the caller.

Below pyinfra's ``--parallel`` (fewer hosts run at once than the run has) the hosts cannot
all arrive before one of them goes on: nothing is planned (``together`` is false) and the
hosts take turns instead, ``size`` at a time (``take_turn``/``end_turn``).
"""

from __future__ import annotations

from gevent.event import Event
from gevent.lock import BoundedSemaphore

from sglang_deploy import run_state


class Rendezvous:
    """One meeting of ``names``; ``plan(arrived)`` ({name: what it brought}) runs once, in the
    greenlet of the last to arrive (or of the first whose wait gave up). A meeting with a plan
    of its own (a restart's waves, a fan-out's trees) is a Rendezvous."""

    def __init__(self, names, plan, together=True, size=1):
        self.names = list(names)
        self.together = together
        self.arrived = {}
        self.planned = Event()
        self._planner = plan
        self._turns = BoundedSemaphore(size)
        self._holding = set()

    def arrive(self, name, brought=None):
        """``name`` is here with ``brought``; the last one to arrive plans."""
        self.arrived[name] = brought
        if self.together and not self.missing():
            self.plan()

    def missing(self) -> list:
        """The hosts expected that have not arrived yet, by name."""
        return sorted(set(self.names) - set(self.arrived))

    def plan(self):
        """Plan now, with what arrived (once; the plan is set even when planning raised, so
        nobody waits for it forever)."""
        if self.planned.is_set():
            return
        try:
            self._planner(self.arrived)
        finally:
            self.planned.set()

    def wait(self, timeout=None, late=None) -> bool:
        """Wait for the plan; after ``timeout`` seconds plan with what arrived (``late(missing)``
        first, to say who never came): False then."""
        if self.planned.wait(timeout):
            return True
        if late is not None and not self.planned.is_set():
            late(self.missing())
        self.plan()
        return False

    def take_turn(self, name):
        """Below --parallel: wait until fewer than ``size`` hosts hold a turn."""
        self._turns.acquire()
        self._holding.add(name)

    def end_turn(self, name):
        if name in self._holding:
            self._holding.discard(name)
            self._turns.release()


def together(state) -> tuple[bool, int]:
    """(whether pyinfra runs every active host at once, how many active hosts there are):
    below --parallel, the hosts of an operation cannot all arrive before one goes on."""
    hosts = len(list(state.inventory.get_active_hosts()))
    pool = getattr(getattr(state, "pool", None), "size", None)
    return pool is None or pool >= hosts, hosts


def expect(key, name, when=None, state=None):
    """While the deploy is planned: host ``name`` comes to ``key``'s meeting, when ``when()``
    (an operation's ``_if``) holds once the operation runs; returns ``when``."""
    run_state.of(state).expected.setdefault(key, {})[name] = when
    return when


def expected(state, key) -> list:
    """The active hosts registered for ``key`` (expect) whose condition holds now."""
    registered = run_state.of(state).expected.get(key, {})
    names = []
    for other in state.inventory.get_active_hosts():
        if other.name not in registered:
            continue
        when = registered[other.name]
        if when is None or when():
            names.append(other.name)
    return names


def meeting(state, key, make):
    """The run's meeting for ``key``, made by the first host to ask (``make()``: a Rendezvous,
    or an object that holds one; None: no meeting, asked again by the next host)."""
    meetings = run_state.of(state).meetings
    if key not in meetings:
        made = make()
        if made is None:
            return None
        meetings[key] = made
    return meetings[key]

"""`make status`: the fleet on one screen, read-only and quick.

One SSH round trip per host, every host at once: node/node_status.py reads what the node runs
and how it last did; on each router host it asks the router for its workers. The controller
adds what the inventory says (profile, serving group) and the drift that `make verify` last
recorded (reports/verify.json: read, not re-hashed; its age is shown).

    targets.py   what to run on each host, from the inventory
    probe.py     the SSH round trips, in parallel; an answer or why there is none
    drift.py     the last recorded drift per host
    rows.py      one row per node, one per router (the JSON's shape)
    render.py    the table, or a block per node where it does not fit
    __main__.py  the command line
"""

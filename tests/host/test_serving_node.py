"""The state a deploy leaves on a node, asserted from the outside: one test per host and per
check of sglang_deploy.verify.checks.REGISTRY (`test_check[node1-serving]`), the same checks the
per-host table shows."""

import pytest

from sglang_deploy.verify.verdict import FAILED, WARNING


def test_check(node, check):
    found = check.run(node.host, node.plan)
    failed = [
        c.line()
        for c in found
        if c.state == FAILED or (c.state == WARNING and c.applies and check.warning_fails)
    ]
    assert not failed, f"{node.name}: {'; '.join(failed)}"
    # Nothing to check here (not requested, nothing recorded yet, no tool to look with).
    idle = [c.line() for c in found if not c.applies or not c.checked]
    if len(idle) == len(found):
        pytest.skip(f"{node.name}: {'; '.join(idle)}")

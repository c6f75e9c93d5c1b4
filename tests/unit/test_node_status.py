"""Exit statuses shared by the on-node scripts and the controller."""

from sglang_deploy.node.lib import status


def test_status_values_are_distinct_and_described(capsys):
    codes = [
        status.READY,
        status.UNEXPECTED,
        status.USAGE,
        status.FAILED_START,
        status.TIMEOUT,
        status.HUNG,
        status.STOP_TIMEOUT,
        status.WORKER_ENV_MISMATCH,
        status.NO_WORKERS,
        status.LOCKED,
        status.NO_LAST_GOOD,
        status.PREFLIGHT_FAILED,
        status.DRIFT,
        status.NOT_INSTALLED,
        status.NOT_INSTALLED_CONFIG,
        status.NO_GPU,
        status.GPUS_BUSY,
        status.MEASUREMENT_FAILED,
        status.THROUGHPUT_REGRESSION,
        status.ACS_NOT_CLEARED,
        status.DECODE_UNMEASURED,
        status.NO_SYSTEMD,
        status.MODEL_MISMATCH,
        status.NO_SPACE,
        status.HUB_ERROR,
        status.TARGETS_DOWN,
        status.RELOAD_FAILED,
    ]
    assert len(set(codes)) == len(codes) and status.READY == 0 and status.USAGE == 2
    assert set(codes) == set(status.DESCRIPTIONS)
    assert status.name(status.HUNG) == "HUNG" and status.name(77) == "EXIT_77"
    assert status.main([]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(codes)


def test_describe_a_code():
    assert status.describe(status.TIMEOUT) == "4 TIMEOUT: the server was not ready within the timeout"

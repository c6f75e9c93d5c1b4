"""`make verify`'s report for hosts that serve no profile (routers, monitoring hosts): one row
per host from its checks (an unreachable host still a row, with the reason), and their part of
the summary as a table or one block per host."""

from sglang_deploy.verify import layout
from sglang_deploy.verify.registry import of_kind
from sglang_deploy.verify.verdict import FAILED, Check


class HostKind:
    """One kind of such host: ``role``, also the kind of its checks in the registry (one column
    each); ``address_key``, the report's key for where it serves; ``columns``, the table's first
    two headings."""

    def __init__(self, role, address_key, columns):
        self.role, self.address_key, self.columns = role, address_key, columns

    @property
    def registry(self):
        return of_kind(self.role)

    def report(self, name, address, run_checks):
        """``run_checks()``: the host's Checks."""
        try:
            found = run_checks()
        except Exception as exc:  # e.g. unreachable: still a row, with the reason
            found = [Check("host", FAILED, f"not checked: {type(exc).__name__}: {exc}")]
        report = {
            "host": name,
            "role": self.role,
            self.address_key: address,
            "checks": [c.as_json() for c in found],
        }
        report["table"] = dict(zip(self.header(), self.row(report)))
        return report

    def header(self):
        return (*self.columns, *(entry.column for entry in self.registry if entry.column))

    def row(self, report):
        by_name = {c["name"]: c for c in report["checks"]}
        cells = (entry.cell(by_name) for entry in self.registry if entry.column)
        return (report["host"], report[self.address_key], *cells)

    def lines(self, reports, title, width, wide, redact):
        """The hosts' table (``wide``) or one block per host headed ``title(report)``, then what
        is not ok; redacted."""
        if wide:
            lines = layout.table([self.header()] + [self.row(r) for r in reports], redact)
        else:
            lines = []
            for report in reports:
                lines += [*layout.block(title(report), report["checks"], width, redact), ""]
        return lines + layout.problems(reports, width, redact)

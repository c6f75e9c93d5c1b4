"""What our scripts read of Prometheus and its exporters: an HTTP GET, samples of the text
exposition format, /api/v1/targets' health per scrape URL, and the cause of a failure in
Prometheus' journal (its logfmt lines: ``level=error msg="..." err="..."``)."""

import json
import re
import urllib.error
import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# `name value` or `name{labels} value` (a timestamp may follow).
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
NOT_SCRAPED = "not scraped"  # an expected target Prometheus does not list


def get(url, timeout=5.0):
    """(status code, body text) or (None, why not)."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return None, "connection refused"
        return None, str(exc.reason)
    except OSError as exc:  # timeouts, resets
        return None, exc.__class__.__name__


def samples(text, names):
    """{name: value} of the unlabelled samples called ``names`` in an exposition text."""
    found = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) in names and not match.group(2):
            try:
                found[match.group(1)] = float(match.group(3))
            except ValueError:
                continue
    return found


def target_health(api_text, expected):
    """{expected scrape URL: (health, last error)} from /api/v1/targets' JSON: "up", "down",
    "unknown" (not scraped yet) or NOT_SCRAPED; and the URLs Prometheus scrapes that are not
    expected, sorted."""
    active = json.loads(api_text)["data"]["activeTargets"]
    listed = {t["scrapeUrl"]: (t.get("health", "unknown"), t.get("lastError") or "") for t in active}
    health = {url: listed.get(url, (NOT_SCRAPED, "")) for url in expected}
    return health, sorted(set(listed) - set(expected))


def _logfmt(line):
    return dict((key, _unquoted(value)) for key, value in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', line))


def _unquoted(value):
    """A logfmt value: Go's strconv.Quote for quoted ones (JSON reads those)."""
    if not value.startswith('"'):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value.strip('"')


def journal_cause(lines):
    """Why Prometheus (or the node exporter) failed, from its journal: the first error it
    logged since it last loaded its configuration (the most specific: a refused reload ends
    with a general "Error reloading config"), as "msg: err"; None when there is none."""
    lines = list(lines)
    starts = [i for i, line in enumerate(lines) if _logfmt(line).get("msg") == "Loading configuration file"]
    errors = [_logfmt(line) for line in lines[starts[-1] if starts else 0 :]]
    errors = [fields for fields in errors if fields.get("level") in ("error", "fatal")]
    if not errors:
        return None
    first = errors[0]
    msg = first.get("msg") or "error"
    return "%s: %s" % (msg, first["err"]) if first.get("err") else msg

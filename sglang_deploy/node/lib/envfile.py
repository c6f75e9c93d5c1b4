"""Reading an env file the way systemd's EnvironmentFile= does.

Written from systemd's own parser (src/basic/env-file.c, parse_env_file_internal), independently
of the quoting code in plan/render.py, so that a round trip through both proves what the server gets:

- `#` and `;` start a comment only at the start of a line (leading whitespace allowed);
- a quote opens only where a value starts (after `=` and any whitespace); `'...'` keeps
  everything literally, `"..."` unescapes only \\" \\\\ \\` \\$ (any other backslash stays,
  backslash-newline continues the line);
- an unquoted value loses its trailing whitespace; a backslash there escapes the next
  character (backslash-newline continues the line);
- no variable is expanded;
- a line without `=` is skipped; a later assignment of the same name wins.

Standard library only (Python >= 3.9): the controller checks env files with it, and our node
scripts read one variable with `read_value` (the engine's API key, lib/engine_auth.py).
"""

from __future__ import annotations


def parse_env_file(text: str) -> dict:
    """{name: value} of an EnvironmentFile= text, in file order."""
    out, i, n = {}, 0, len(text)
    while i < n:
        if text[i] in " \t\n\r":
            i += 1
            continue
        if text[i] in "#;":
            while i < n and text[i] not in "\n\r":
                i += 1
            continue
        key = ""
        while i < n and text[i] not in "=\n\r":
            key += text[i]
            i += 1
        if i >= n or text[i] != "=":
            continue
        i += 1
        value, state, trail = "", "pre", None
        while i < n:
            c = text[i]
            if state == "dq":
                if c == '"':
                    state = "pre"
                elif c == "\\":
                    i += 1
                    if i >= n:  # a backslash at the very end is dropped
                        break
                    value += text[i] if text[i] in '"\\`$' else "" if text[i] == "\n" else "\\" + text[i]
                else:
                    value += c
            elif state == "sq":
                if c == "'":
                    state = "pre"
                else:
                    value += c
            elif c in "\n\r":
                break
            elif c == "\\":
                i += 1
                if i >= n:
                    break
                value += "" if text[i] in "\n\r" else text[i]
                state, trail = "plain", None
            elif state == "pre" and c in " \t":
                pass
            elif state == "pre" and c in "'\"":
                state = "sq" if c == "'" else "dq"
            else:
                trail = (len(value) if trail is None else trail) if c in " \t" else None
                value += c
                state = "plain"
            i += 1
        out[key.strip()] = value[:trail] if state == "plain" and trail is not None else value
    return out


def read_value(path, name):
    """The value of ``name`` in the env file at ``path`` as systemd gives it to the unit, or None
    when the file does not set it (OSError when the file cannot be read)."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return parse_env_file(f.read()).get(name)

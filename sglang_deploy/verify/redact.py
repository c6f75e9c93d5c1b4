"""Secret values out of everything `make verify` prints or writes, in one place.

A Redactor knows the profiles' secret names (`HF_TOKEN`, and the operator variables they are read
from; for a secret server argument also SGLang's field, `api_key`, as its server_args log line
names it) and the values it was given. ``text()`` replaces each value, also as Python's repr and JSON
escape it, and what is left of it where a shortened repr cut it ("hf_ab..."), and whatever follows a secret's name in `NAME=value`, `'NAME': 'value'` or
`"NAME": "value"` form: a node can hold a value the operator running verify never exported.
``mapping()`` masks an environment (env file, a worker's /proc/<pid>/environ) by name.
"""

from __future__ import annotations

import json
import os
import re

MASK = "***"


class Redactor:
    def __init__(self, names=(), values=()):
        self.names: set[str] = set()
        self.values: set[str] = set()
        self._pattern = None
        self.add(names, values)

    @classmethod
    def for_profile(cls, profile, operator_env=None) -> Redactor:
        """A profile's secret names, and their values where the operator's environment has them."""
        redactor = cls()
        redactor.add_profile(profile, operator_env)
        return redactor

    def add_profile(self, profile, operator_env=None):
        operator_env = os.environ if operator_env is None else operator_env
        names = {name for name in profile.secrets}
        names |= {secret.from_env for secret in profile.secrets.values()}
        names |= {arg.replace("-", "_") for arg in profile.secret_server_args}
        self.add(names, [operator_env.get(secret.from_env) for secret in profile.secrets.values()])

    def add(self, names=(), values=()):
        self.names |= {name for name in names if name}
        for value in values:
            if value:
                # As printed: plain, in a Python repr (str or bytes), in JSON.
                self.values |= {value, repr(value)[1:-1], json.dumps(value)[1:-1]}
        names = "|".join(re.escape(name) for name in sorted(self.names, key=len, reverse=True))
        self._pattern = names and re.compile(
            # NAME=value up to a separator, as in an env file, environ or shell line (also
            # right after an escape such as the "\\n" of a bytes repr: no word boundary); or a
            # quoted dict key followed by its quoted value (repr or JSON).
            rf"({names})(=)(?:\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|[^\s'\",\\\x00]+)"
            rf"|(['\"])({names})\3(\s*:\s*)(?:'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|b'(?:[^'\\\n]|\\.)*')"
        )

    def text(self, text):
        if not text:
            return text
        for value in sorted(self.values, key=len, reverse=True):
            text = text.replace(value, MASK)
        if "..." in text:
            text = self._truncated(text)
        if self._pattern:
            text = self._pattern.sub(_masked, text)
        return text

    def _truncated(self, text):
        """A value cut by a shortened repr (pytest's saferepr keeps both ends around "...")
        leaves a prefix just before the "..." or a suffix just after it."""
        for value in sorted(self.values, key=len, reverse=True):
            for k in range(len(value) - 1, 0, -1):
                text = text.replace(value[:k] + "...", MASK + "...")
                text = text.replace("..." + value[-k:], "..." + MASK)
        return text

    def mapping(self, env: dict) -> dict:
        """``env`` with every secret's value replaced by the mask (and values found in others)."""
        return {name: MASK if name in self.names else self.text(value) for name, value in env.items()}


def _masked(match):
    if match.group(1):
        return f"{match.group(1)}={MASK}"
    quote = match.group(3)
    return f"{quote}{match.group(4)}{quote}{match.group(5)}{quote}{MASK}{quote}"

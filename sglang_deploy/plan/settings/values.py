"""The kinds of value settings take (ports, seconds, node counts, pins, words) and the base
of every group of settings."""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from sglang_deploy.rollout.sizes import count_or_percent

Port = Annotated[int, Field(ge=1, le=65535)]
Seconds = Annotated[float, Field(gt=0)]


def _words(value: Any) -> Any:
    # `--data router_extra_args="--retry-max-retries 3"` arrives as one string.
    return shlex.split(value) if isinstance(value, str) else value


# A number of nodes: a count, or a percentage of the run's serving nodes ("25%").
NodeCount = Annotated[int | str, BeforeValidator(count_or_percent, json_schema_input_type=int | str)]
NodeCountOrOff = Annotated[
    int | str, BeforeValidator(lambda v: count_or_percent(v, minimum=0), json_schema_input_type=int | str)
]


def _apt_pin(value: Any) -> Any:
    if not isinstance(value, str) or not APT_PIN.fullmatch(value):
        raise ValueError(f"a Debian package pinned as name=version, got {value!r}")
    return value


# A Debian package name (Debian Policy 5.6.1) and version (5.6.12), as apt-get install takes them.
APT_PIN = re.compile(r"[a-z0-9][a-z0-9+.-]+=[0-9][A-Za-z0-9.+~:-]*")

AptPin = Annotated[str, AfterValidator(_apt_pin)]
Words = Annotated[list[str], BeforeValidator(_words, json_schema_input_type=str | list[str])]


class Group(BaseModel):
    """A group of settings (a section of docs/settings.md; host data itself is flat)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

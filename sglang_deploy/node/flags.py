"""Flag names in the server's argv, checked exactly against the engine's own option strings.

argparse (SGLang's parser too) accepts any unambiguous prefix of a long option:
`--speculative-num-step 2` runs as `--speculative-num-steps 2`. A profile names flags as the
engine defines them, so a prefix, like a misspelling, is refused here with a suggestion.

    <venv>/bin/python flags.py     # the installed engine's option strings, one a line

The option strings come from the same call on SGLang and on any build of it:
`ServerArgs.add_cli_args(parser)` on a fresh parser, as `prepare_server_args` does. Standard
library only: preflight runs this on the node, and the controller's lint imports it.
"""

import argparse
import difflib
import sys

ENGINE = "sglang"
HEADER = """\
# Option strings of {engine} {version}'s server parser (ServerArgs.add_cli_args), one a line.
# Generated from the installed engine by `make engine-options`; the profile lint checks flag
# names exactly against this list, and a unit test keeps it equal to the real parser's.
"""


def installed_options():
    """The sorted option strings of the engine importable by this interpreter."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return sorted({name for action in parser._actions for name in action.option_strings})


def options_text(version, options):
    """The committed option list's text for `version`."""
    return HEADER.format(engine=ENGINE, version=version) + "".join(o + "\n" for o in options)


def parse_options_text(text):
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def argv_flags(argv):
    """The option names argv uses (`--name` or the name of `--name=value`), in order."""
    flags = []
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("--"):
            flags.append(arg.split("=", 1)[0])
    return flags


def flag_problem(flag, options, engine="the engine"):
    """Why `flag` is not one of `options` (of `engine`), with a suggestion; None when it is."""
    if flag in options:
        return None
    longer = sorted(o for o in options if o.startswith(flag) and o.startswith("--"))
    if len(longer) == 1:
        return (
            "%s is not a flag of %s (argparse would take it as an abbreviation of %s): "
            "did you mean %s?" % (flag, engine, longer[0], longer[0])
        )
    if longer:
        return "%s is not a flag of %s (argparse would find it ambiguous: %s): did you mean %s?" % (
            flag,
            engine,
            ", ".join(longer),
            " or ".join(longer),
        )
    close = difflib.get_close_matches(flag, sorted(options), n=1, cutoff=0.8)
    hint = ": did you mean %s?" % close[0] if close else ""
    return "%s is not a flag of %s%s" % (flag, engine, hint)


def argv_problems(argv, options, engine="the engine"):
    """[(flag, why)] for each flag in argv that is not exactly one of `options`."""
    options = frozenset(options)
    found = []
    for flag in argv_flags(argv):
        problem = flag_problem(flag, options, engine)
        if problem and (flag, problem) not in found:
            found.append((flag, problem))
    return found


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    from importlib import metadata

    sys.stdout.write(options_text(metadata.version(ENGINE), installed_options()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

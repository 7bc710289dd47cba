"""The command line's front door: the ``modula-sweep``, ``modula-coord-check`` and ``modula-prepare-data``
entry points. Each runs its Hydra application on the command line as ``command_line.py`` rewrites and checks it
(powers of two, flags first, one-line usage errors), and answers ``--help`` before torch loads."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any

from .command_line import USAGE_STATUS, UsageError, ValueRejected, check_argv, flags_first, rewrite_powers
from .config import CONFIG_DIR
from .optim.mode_settings import rewrite_old_spellings
from .plumbing import environment


def run(prog: str, hydra_main: Callable[[], Any], config_name: str = "config") -> None:
    """Run a ``@hydra.main`` function on ``sys.argv`` (flags first, powers and old spellings rewritten), usage
    errors as ``prog: …``."""
    def say(line: str) -> None:
        print(f"{prog}: {line}", file=sys.stderr)

    sys.argv[1:] = rewrite_old_spellings(rewrite_powers(flags_first(sys.argv[1:])), say)
    try:
        if os.environ.get(environment.HYDRA_FULL_ERROR) != "1":  # else Hydra's own errors, with their stack traces
            check_argv(sys.argv[1:], config_name)
        hydra_main()
    except UsageError as error:
        print(f"{prog}: {error.message}", file=sys.stderr)
        raise SystemExit(USAGE_STATUS) from None
    except ValueRejected as error:
        print(f"{prog}: {error.message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        # Nothing is open or written yet, and tearing down an interpreter that imported torch takes longer than
        # the check itself (0.6 s of 2 on a 2-core CPU): leave at once, with the status a bad value has.
        os._exit(1)


HELP_FLAGS = ("--help", "-h", "--hydra-help")


def _main_of(module: str, config_name: str = "config") -> Callable[[], Any]:
    """The program's Hydra application, imported once the options are checked: a mistyped option is answered
    before torch loads. Help is Hydra's own from the same config, without importing the program at all."""
    def main() -> Any:
        if any(flag in HELP_FLAGS for flag in sys.argv[1:]):
            return _help_app(config_name)()
        return import_module(module).main()
    return main


def _help_app(config_name: str) -> Callable[[], Any]:
    """A Hydra application of the program's config that only ever prints help (Hydra never calls the task
    function for ``--help`` or ``--hydra-help``)."""
    import hydra

    from .config.resolvers import register_config

    register_config()

    @hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=config_name)
    def help_only(cfg: Any) -> None:
        raise AssertionError("only --help and --hydra-help reach this application")

    return help_only


def sweep() -> None:
    """``modula-sweep``: one training run, or a sweep (``sweep=<preset>`` or ``-m``)."""
    run("modula-sweep", _main_of("modula_cli.train"))


def prepare_data() -> None:
    """``modula-prepare-data``: a dataset downloaded and prepared ahead of time."""
    from .data.prepare import main

    main(sys.argv[1:], CONFIG_DIR)


def coord_check() -> None:
    """``modula-coord-check``: the coordinate check."""
    run("modula-coord-check", _main_of("modula_cli.coord.check", "coord_check"), config_name="coord_check")

"""The command line's front door: the ``modula-sweep`` and ``modula-coord-check`` entry points.

Both run the Hydra applications (``modula_cli.train.main``, ``modula_cli.coord.check.main``) with two changes to
how Hydra treats the command line:

- Powers written ``B^E`` (B a number, E an integer) in an override's value are rewritten to floats before
  Hydra parses them: ``optim.lr=2^-6,2^-5`` is ``optim.lr=0.015625,0.03125``, the way the README writes LR
  grids, and run folders read exactly as if the floats had been typed. Quoted text is left alone.
- A command line Hydra rejects gets one line (two for a parse error) naming the problem and the likely fix,
  in place of Hydra's advice, config search path or lexer dump:

      modula-sweep: unknown key train.stepz; did you mean train.steps?
      modula-sweep: data=shakespear is not an option; did you mean data=shakespeare? (options: ...)
      modula-sweep: cannot parse the argument k=a#b: unexpected character '#'

  These usage errors exit with status 2 and leave no run folder behind. Every option of a config group is
  checked before Hydra starts, sweeps (``data=a,b``) and the optional ``experiment`` group included (Hydra
  itself silently ignores a mistyped optional option). Any other error is reported by Hydra as before;
  with HYDRA_FULL_ERROR=1 Hydra's errors are not translated at all (its full stack trace instead).

How: Hydra 1.3 reports the errors of each step of ``hydra.main`` through
``hydra._internal.utils.run_and_report``, and applies ``key=value`` overrides in
``ConfigLoaderImpl._apply_overrides_to_config`` (also called by the sweep's grid validation, which collects
ordinary exceptions per job). For the duration of the call both are wrapped (``_translated_errors``): the
wrappers raise ``UsageError``, a SystemExit, so that no ``except Exception`` on the way reformats or
collects it. These are private Hydra functions; pyproject.toml pins hydra-core below 1.4.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from .config import CONFIG_DIR
from .plumbing.suggest import unknown_key

USAGE_STATUS = 2  # a rejected command line, as argparse exits
POWER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\^([+-]?\d+)(?![\w.])")
QUOTED = re.compile(r"""('[^']*'|"[^"]*")""")
LEXER_ERROR = "LexerNoViableAltException: "
SWEEP_WITHOUT_MULTIRUN = re.compile(r"(?:Ambiguous value for argument|Sweep parameters) '(.*)'")  # Hydra's words
MAX_LISTED = 160  # characters of options listed in a message; longer lists are left to --help


class UsageError(SystemExit):
    """A rejected command line. A SystemExit, so that it passes Hydra's and the grid validation's
    ``except Exception`` unchanged; ``run`` prints it as one ``prog: message`` line."""

    def __init__(self, message: str) -> None:
        super().__init__(USAGE_STATUS)
        self.message = message


# --- powers of two ----------------------------------------------------------------------------------------

def _power(match: re.Match[str]) -> str:
    try:
        if match[1].isdigit() and int(match[2]) >= 0:  # arch.width=2^7 is the integer 128, as if typed
            return str(int(match[1]) ** int(match[2]))
        return repr(float(match[1]) ** int(match[2]))
    except (OverflowError, ZeroDivisionError):
        return match[0]  # left for Hydra's parser to reject, with our parse message


def rewrite_powers(argv: Sequence[str]) -> list[str]:
    """Each override's ``B^E`` (outside quotes) as a Python float: ``optim.lr=[2^-3,2^-2]`` ->
    ``optim.lr=[0.125,0.25]``. Flags and their values are left as they are."""
    rewritten = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and not arg.startswith("-"):
            # odd pieces of the split are quoted text
            pieces = QUOTED.split(value)
            value = "".join(p if i % 2 else POWER.sub(_power, p) for i, p in enumerate(pieces))
            arg = f"{key}={value}"
        rewritten.append(arg)
    return rewritten


# --- config groups ----------------------------------------------------------------------------------------

def is_hidden(option: str) -> bool:
    """Options named ``_…`` (``experiment/paper/_paper_train``) are parts of others, not offered."""
    return any(part.startswith("_") for part in option.split("/"))


def group_options(config_dirs: Sequence[Path]) -> dict[str, list[str]]:
    """Every config group of the application (a folder of the config dirs, Hydra's own ``hydra/`` aside)
    and all its options, hidden ones included: ``{"experiment": ["gpu/gpt_width", ...], ...}``."""
    options: dict[str, set[str]] = {}
    for root in config_dirs:
        for path in root.glob("*/**/*.yaml"):
            group = path.relative_to(root).parts[0]
            if group != "hydra":
                options.setdefault(group, set()).add(path.relative_to(root / group).with_suffix("").as_posix())
    return {group: sorted(names) for group, names in options.items()}


def not_an_option(group: str, value: str, options: Sequence[str]) -> str:
    offered = [o for o in options if not is_hidden(o)]
    guess = difflib.get_close_matches(value, offered, n=1)
    hint = f"; did you mean {group}={guess[0]}?" if guess else ""
    listing = ", ".join(offered)
    listing = f"options: {listing}" if len(listing) <= MAX_LISTED else f"{len(offered)} options: see --help"
    return f"{group}={value} is not an option{hint} ({listing})"


def _choices(override: str) -> tuple[str, list[str]] | None:
    """``data=a,b`` -> ("data", ["a", "b"]); None for anything but a plain choice or list of choices."""
    key, eq, value = override.lstrip("+").partition("=")
    if not eq or any(c in value for c in "()[]{}$'\"\\"):  # sweep functions, interpolations, quoting
        return None
    return key, [v.strip() for v in value.split(",")]


def check_choices(overrides: Sequence[str], config_dirs: Sequence[Path]) -> None:
    """Raise a UsageError for the first ``group=option`` whose option has no config file."""
    groups = group_options(config_dirs)
    for override in overrides:
        parsed = _choices(override)
        if parsed is None or parsed[0] not in groups:
            continue
        group, values = parsed
        for value in values:
            if value not in groups[group] and value != "null":
                raise UsageError(not_an_option(group, value, groups[group]))


# --- Hydra's errors as one line ---------------------------------------------------------------------------

def parse_error(error: OverrideParseException) -> str:
    """Which argument Hydra could not parse, why (its first line, no lexer dump) and how to quote it."""
    lines = [line for line in error.message.splitlines() if not line.startswith("See https://")]
    reason = lines[1] if lines[0].startswith("Error parsing override") and len(lines) > 1 else lines[0]
    if reason.startswith(LEXER_ERROR) and len(lines) > 1:
        # the caret under the echoed argument marks the character the lexer stopped at
        at = lines[1].index("^") - len(LEXER_ERROR) if "^" in lines[1] else -1
        reason = f"unexpected character {error.override[at]!r}" if 0 <= at < len(error.override) else "bad syntax"
    key, eq, value = error.override.partition("=")
    example = f"'{key}=\"{value}\"'" if eq and '"' not in value else "'key=\"a b\"'"
    return (f"cannot parse the argument {error.override}: {reason}\n"
            f"  write key=value; to pass a value with such characters as text, quote it: {example}")


def _missing_option(error: MissingConfigException, overrides: Sequence[str]) -> str | None:
    """The override naming the missing config file, as a not-an-option line; None if no override did."""
    for override in overrides:
        key, eq, value = override.lstrip("+").partition("=")
        if eq and error.options is not None and error.missing_cfg_file == f"{key}/{value}":
            return not_an_option(key, value, error.options)
    return None


def _reporting(run_and_report: Callable[[Callable[[], Any]], Any], overrides: Sequence[str]) -> Callable:
    """Hydra's run_and_report, raising a UsageError for the errors we can say in a line."""

    def translated(func: Callable[[], Any]) -> Any:
        try:
            return func()
        except OverrideParseException as error:
            raise UsageError(parse_error(error)) from error
        except MissingConfigException as error:
            message = _missing_option(error, overrides)
            if message is None:
                raise
            raise UsageError(message) from error
        except ConfigCompositionException as error:
            sweep = SWEEP_WITHOUT_MULTIRUN.match(str(error))
            if sweep is None:
                raise
            key, _, values = sweep[1].partition("=")
            as_list = "" if "(" in values else f", or write a list as {key}=[{values}]"  # not range(…), glob(…)
            raise UsageError(f"{sweep[1]} gives several values: add -m to sweep over them{as_list}") from error

    return lambda func: run_and_report(lambda: translated(func))


def _applying(apply: Callable[[list, DictConfig], None]) -> staticmethod:
    """ConfigLoaderImpl._apply_overrides_to_config, one override at a time (as it does), so that the
    override setting a key the config lacks is known, and named with its likely meaning."""

    def apply_each(overrides: list, cfg: DictConfig) -> None:
        for override in overrides:
            try:
                apply([override], cfg)
            except ConfigCompositionException as error:
                if not isinstance(error.__cause__, (ConfigAttributeError, ConfigKeyError)):
                    raise
                raise UsageError(unknown_key(override.key_or_group, cfg)) from error

    return staticmethod(apply_each)


@contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    saved = vars(owner)[name]  # the raw attribute: a staticmethod stays one when put back
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


@contextmanager
def _translated_errors(overrides: Sequence[str]) -> Iterator[None]:
    import hydra._internal.utils as hydra_utils
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    with ExitStack() as stack:
        stack.enter_context(_replaced(hydra_utils, "run_and_report",
                                      _reporting(hydra_utils.run_and_report, overrides)))
        stack.enter_context(_replaced(ConfigLoaderImpl, "_apply_overrides_to_config",
                                      _applying(ConfigLoaderImpl._apply_overrides_to_config)))
        yield


# --- entry points -----------------------------------------------------------------------------------------

def search_path_dir(entry: str) -> Path | None:
    """The folder a Hydra search-path entry names: ``file://DIR`` (relative to the working folder) or
    ``pkg://package.sub`` (the package's folder); None for other kinds (``structured://``)."""
    if entry.startswith("file://"):
        return Path(entry[len("file://"):]).expanduser().resolve()
    if entry.startswith("pkg://"):
        try:
            spec = find_spec(entry[len("pkg://"):].strip("/").replace("/", "."))
        except (ImportError, ValueError):
            return None
        locations = list(spec.submodule_search_locations or []) if spec else []
        return Path(locations[0]) if locations else None
    return None


def search_path(overrides: Sequence[str], config_dirs: Sequence[Path], config_name: str) -> list[Path]:
    """The folders Hydra's search path adds: ``hydra.searchpath=[...]`` on the command line, else in the primary
    config file (the first ``<config_name>.yaml`` of ``config_dirs``), as Hydra reads it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    entries: list[str] = []
    for override in overrides:
        if override.lstrip("+").partition("=")[0] == "hydra.searchpath":
            try:
                value = OverridesParser.create().parse_override(override).value()
            except OverrideParseException:
                continue  # Hydra says what is wrong with it
            entries = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    if not entries:
        primary = next((d / f"{config_name}.yaml" for d in config_dirs if (d / f"{config_name}.yaml").is_file()), None)
        try:
            found = OmegaConf.select(OmegaConf.load(primary), "hydra.searchpath") if primary else None
        except Exception:  # noqa: BLE001 - an unreadable primary config: Hydra reports it
            found = None
        entries = [str(v) for v in found] if found else []
    return [folder for folder in map(search_path_dir, entries) if folder is not None and folder.is_dir()]


def _command_line(argv: Sequence[str]) -> tuple[list[str], list[Path] | None]:
    """The overrides and the config dirs to check them against (None: a --config-path we do not follow):
    ``--config-dir``, the package's configs and every folder of Hydra's search path."""
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_args(argv)  # Hydra's own parser: exits on what Hydra would exit on
    if args.config_path is not None:
        return list(args.overrides), None
    dirs = [*([Path(args.config_dir).resolve()] if args.config_dir else []), CONFIG_DIR]
    return list(args.overrides), [*dirs, *search_path(args.overrides, dirs, args.config_name or "config")]


def run(prog: str, hydra_main: Callable[[], Any]) -> None:
    """Run a ``@hydra.main`` function on ``sys.argv`` (powers rewritten), usage errors as ``prog: …``."""
    sys.argv[1:] = rewrite_powers(sys.argv[1:])
    full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        overrides, config_dirs = _command_line(sys.argv[1:])
        if config_dirs is not None:
            check_choices(overrides, config_dirs)
        with ExitStack() as stack:
            if not full_error:
                stack.enter_context(_translated_errors(overrides))
            hydra_main()
    except UsageError as error:
        print(f"{prog}: {error.message}", file=sys.stderr)
        raise SystemExit(USAGE_STATUS) from None


def _main_of(module: str) -> Callable[[], Any]:
    # imported once the options are checked: a mistyped option is answered before torch loads
    return lambda: import_module(module).main()


def sweep() -> None:
    """``modula-sweep``: one training run, or a sweep (``sweep=<preset>`` or ``-m``)."""
    run("modula-sweep", _main_of("modula_cli.train"))


def coord_check() -> None:
    """``modula-coord-check``: the coordinate check."""
    run("modula-coord-check", _main_of("modula_cli.coord.check"))

"""The command line before Hydra reads it: what Hydra 1.3 cannot do itself, and why each piece stays.

The entry points (``cli.py``) run the Hydra applications (``modula_cli.train.main``,
``modula_cli.coord.check.main``) with four changes to how Hydra treats the command line (each checked against
Hydra 1.3.8, which does none of them):

- Hydra's flags come first wherever they were typed (``flags_first``): its parser reads no flag after an
  override, so ``a=1 -m b=2,3`` would end in "unrecognized arguments".
- Powers written ``B^E`` (B a number, E an integer) in an override's value are rewritten to floats before
  Hydra parses them: ``optim.lr=2^-6,2^-5`` is ``optim.lr=0.015625,0.03125``, the way the README writes LR
  grids, and run folders read exactly as if the floats had been typed. Quoted text is left alone.
- A mode's setting in its spelling from before the settings blocks (``optim.mup_base_width=64``) is rewritten
  to its block's (``optim.mup.base_width=64``) with one line saying so (``rewrite_old_spellings``, in
  ``optim/mode_settings.py`` beside the spellings): Hydra has no aliases for a key, and a user's scripts must
  not break for a release.
- A command line Hydra rejects gets one line (two for a parse error) naming the problem and the likely fix,
  in place of Hydra's advice, config search path or lexer dump:

      modula-sweep: unknown key train.stepz; did you mean train.steps?
      modula-sweep: data=shakespear is not an option; did you mean data=shakespeare? (options: ...)
      modula-sweep: cannot parse the argument k=a#b: unexpected character '#'

  These usage errors exit with status 2 and leave no run folder behind. Every option of a config group is
  checked before Hydra starts, sweeps (``data=a,b``) and the optional ``experiment`` group included (Hydra
  itself silently ignores a mistyped optional option). Any other error is reported by Hydra as before;
  with HYDRA_FULL_ERROR=1 nothing is checked ahead (Hydra's own errors, with their stack traces).

How: before Hydra starts, the command line is parsed and composed the way ``@hydra.main`` will
(``check_command_line``; Hydra's loader through ``config/hydra_internals.py``), and its value overrides are
applied with ``config/overrides.py``, which the sweep's grid validation uses too. Nothing of Hydra's is
replaced at run time; what is not caught here Hydra reports itself.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException
from omegaconf import OmegaConf, open_dict

from .config import CONFIG_DIR
from .plumbing.atomic import folder_problem

USAGE_STATUS = 2  # a rejected command line, as argparse exits
POWER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\^([+-]?\d+)(?![\w.])")
QUOTED = re.compile(r"""('[^']*'|"[^"]*")""")
LEXER_ERROR = "LexerNoViableAltException: "
MAX_LISTED = 160  # characters of options listed in a message; longer lists are left to --help


class ValueRejected(SystemExit):
    """A single run's bad value, found before Hydra starts it; ``run`` prints it as one line and exits 1."""

    def __init__(self, message: str) -> None:
        super().__init__(1)
        self.message = message


class UsageError(SystemExit):
    """A rejected command line, found before Hydra starts; ``run`` prints it as one ``prog: message`` line."""

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


def _first_value(override: Override) -> str | None:
    """The override with a sweep's first value (``a=1,2`` -> ``a=1``); None when it has none to take (a glob
    of options, an interval for an optimising sweeper)."""
    if not override.is_sweep_override():
        return override.input_line
    try:
        return f"{override.get_key_element()}={next(iter(override.sweep_string_iterator()))}"
    except Exception:  # noqa: BLE001 - left for Hydra and the sweeper
        return None


def check_command_line(overrides: Sequence[str], config_dirs: Sequence[Path], extra_dir: Path | None,
                       config_name: str, multirun: bool, check_values: bool = True) -> None:
    """Raise a UsageError for what Hydra would reject, in one line, before Hydra starts: an override that does
    not parse, a config-group option without a file, a key the config lacks (a sweep's keys with its first
    value), several values without ``-m``. Anything else is left to Hydra to report."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from .config.hydra_internals import composer
    from .config.overrides import OverrideError, apply_overrides

    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(list(overrides))
    except OverrideParseException as error:
        raise UsageError(parse_error(error)) from error
    check_choices(overrides, config_dirs)
    from .config.schema import register_schemas, searches  # the defaults of the fixed groups (imports torch)

    register_schemas()
    try:
        compose, is_group = composer(CONFIG_DIR, extra_dir)
        lines = [(override, _first_value(override)) for override in parsed]
        chosen = [line for o, line in lines
                  if line and (is_group(o.key_or_group) or o.key_or_group == "hydra.searchpath")]
        cfg = compose(config_name, chosen)
    except Exception:  # noqa: BLE001 - a config Hydra cannot compose: its own error says why
        return
    values = parser.parse_overrides([line for _, line in lines if line and line not in chosen])
    try:
        apply_overrides(values, cfg)
    except OverrideError as error:
        raise UsageError(str(error)) from error
    sweeps = [o for o in parsed if o.is_sweep_override()]
    sweeping = multirun or str(OmegaConf.select(cfg, "hydra.mode")).rpartition(".")[2] == "MULTIRUN"
    if sweeps and not sweeping:
        key, _, values_text = sweeps[0].input_line.partition("=")
        as_list = "" if "(" in values_text else f", or write a list as {key}=[{values_text}]"  # not range(…), glob(…)
        raise UsageError(f"{sweeps[0].input_line} gives several values: add -m to sweep over them{as_list}")
    if searches(cfg) and not sweeping:
        raise UsageError("sweep.search=true searches the LRs of a sweep: add -m and an LR axis "
                         "(e.g. -m optim.lr=0.125,0.25,0.5,1), or a preset such as sweep=width")
    key = "hydra.sweep.dir" if sweeping else "hydra.run.dir"
    where = OmegaConf.to_container(cfg.hydra.sweep if sweeping else cfg.hydra.run, resolve=False).get("dir")
    if where and (problem := folder_problem(str(where))):
        raise UsageError(f"cannot write the output folder {where} ({key}): {problem}; choose another with "
                         f"{key}=FOLDER")
    if check_values and not sweeping and config_name == "config":  # a sweep's grid: by the sweep, point by point
        _check_values(cfg, [o for o in overrides if not o.lstrip("+~").startswith("hydra.")])


def _check_values(cfg: Any, overrides: list[str]) -> None:
    """A single run's values, checked before Hydra starts it (as the run checks them again): a bad value is
    one line, with no run folder made and without Hydra's start-up. A config this cannot read is left to the
    run."""
    from .config.resolvers import register_config
    from .config.validate import ConfigError, check_config

    register_config()
    with open_dict(cfg):
        del cfg["hydra"]  # what the run sees: the job's config
    try:
        check_config(cfg, overrides)
    except ConfigError as error:
        raise ValueRejected(str(error)) from None
    except Exception:  # noqa: BLE001 - e.g. an interpolation only Hydra's run resolves
        return


# --- the search path and the whole check -----------------------------------------------------------------

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


# Flags after which Hydra composes nothing we could check (help, completion) or reads configs we do not follow.
UNCHECKED_FLAGS = ("help", "hydra_help", "shell_completion", "config_path")


def check_argv(argv: Sequence[str], config_name: str) -> None:
    """The command line as ``@hydra.main`` will read it, checked: raises UsageError or ValueRejected."""
    from .config.hydra_internals import args_parser

    args = args_parser().parse_args(argv)  # Hydra's own parser: exits on what Hydra would exit on
    if args.cfg == "hydra" and args.resolve and not args.package:  # Hydra resolves its node cut off from the
        # config that its run and sweep folders refer to
        raise UsageError("--cfg hydra --resolve cannot resolve the hydra settings that name the run "
                         "(${sweep.name}, ${arch.name}); use --cfg all --resolve, or one value: "
                         "--cfg all -p hydra.sweep.dir --resolve")
    if any(getattr(args, flag, None) for flag in UNCHECKED_FLAGS):
        return
    _no_spaced_equals(list(args.overrides))
    extra = Path(args.config_dir).resolve() if args.config_dir else None
    dirs = [*([extra] if extra else []), CONFIG_DIR]
    name = args.config_name or config_name
    dirs += search_path(args.overrides, dirs, name)
    check_command_line(list(args.overrides), dirs, extra if extra and extra.is_dir() else None, name,
                       bool(args.multirun), check_values=not (args.cfg or args.info))  # --cfg job: only a look


SPACED_EQUALS = re.compile(r"([^\s=]+)(?:\s+=\s*|=\s+)([^\s=]+)")


def _no_spaced_equals(overrides: list[str]) -> None:
    """``optim.lr = 0.1`` reaches us as three words: say how to write it, not Hydra's "missing EQUAL"."""
    if found := SPACED_EQUALS.search(" ".join(overrides)):
        raise UsageError(f"an override is one word without spaces around '=': write {found[1]}={found[2]}")


def flags_first(argv: Sequence[str]) -> list[str]:
    """Hydra's flags (with their values) before the overrides, wherever they were typed: Hydra's parser reads no
    flag after an override, so ``a=1 -m b=2,3`` would end in "unrecognized arguments"."""
    from .config.hydra_internals import flag_actions

    actions = flag_actions()
    flags, overrides, rest = [], [], list(argv)
    while rest:
        token = rest.pop(0)
        action = actions.get(token)
        if action is None:
            (flags if token.startswith("-") else overrides).append(token)
            continue
        flags.append(token)
        takes_value = action.nargs is None or (action.nargs == "?" and rest and action.choices is not None
                                               and rest[0] in action.choices)
        if takes_value and rest:
            flags.append(rest.pop(0))
    return flags + overrides

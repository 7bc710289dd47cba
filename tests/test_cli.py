"""The command line's front door (modula_cli/cli.py): powers of two in overrides, one-line usage errors
instead of Hydra's, and the --help text of both programs."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from hydra.errors import OverrideParseException

from modula_cli.command_line import UsageError, check_choices, flags_first, parse_error, rewrite_powers
from modula_cli.plumbing.suggest import unknown_key
from modula_cli.config import CONFIG_DIR
from helpers import compose_config, tiny_gpt
import prewarmed

PROGRAMS = {"modula-sweep": "sweep", "modula-coord-check": "coord_check"}


def cli(tmp_path: Path, *args: str, program: str = "modula-sweep", **env: str) -> tuple[int, str]:
    """Run a program as its entry point does, in an empty folder; its exit status and all it printed."""
    code = f"import sys; sys.argv[0] = {program!r}; from modula_cli.cli import {PROGRAMS[program]} as m; m()"
    result = prewarmed.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "HYDRA_FULL_ERROR": "0", **env})
    return result.returncode, result.stdout + result.stderr


def test_entry_points_are_the_front_door():
    scripts = tomllib.loads((CONFIG_DIR.parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["modula-sweep"] == "modula_cli.cli:sweep"
    assert scripts["modula-coord-check"] == "modula_cli.cli:coord_check"


# --- powers of two ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("arg", "expected"), [
    ("optim.lr=2^-3", "optim.lr=0.125"),
    ("optim.lr=2^-6,2^-5,2^-4", "optim.lr=0.015625,0.03125,0.0625"),
    ("optim.lr=[2^-3,2^-2]", "optim.lr=[0.125,0.25]"),
    ("+optim.eps=10^-8", "+optim.eps=1e-08"),
    ("arch.width=2^5", "arch.width=32"),
    ("optim.lr=0.5^2", "optim.lr=0.25"),
    ("optim.lr=range(2^-3,2^0)", "optim.lr=range(0.125,1)"),
    ("logger.name='run 2^-3'", "logger.name='run 2^-3'"),  # quoted text stays text
    ("logger.name=a2^3", "logger.name=a2^3"),  # not a number
    ("optim.lr=2^0.5", "optim.lr=2^0.5"),  # not an integer exponent: left to Hydra's parser
    ("--config-dir=a2^3", "--config-dir=a2^3"),
    ("sweep=quick", "sweep=quick"),
])
def test_powers_are_rewritten_to_floats(arg, expected):
    assert rewrite_powers(["-m", arg, "configs/2^3"]) == ["-m", expected, "configs/2^3"]


def test_powers_reach_the_config_as_floats(tmp_path):
    status, out = cli(tmp_path, "--cfg", "job", "-p", "optim", "optim.lr=2^-3", "optim.eps=10^-8")
    assert status == 0, out
    optim = yaml.safe_load(out)
    assert optim["lr"] == 0.125 and optim["eps"] == 1e-8
    assert not (tmp_path / "outputs").exists()


# --- usage errors in one line -----------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["train.stepz=5"], "modula-sweep: unknown key train.stepz; did you mean train.steps?"),
    (["sweep=quick", "arch.widht=32,64"], "modula-sweep: unknown key arch.widht; did you mean arch.width?"),
    (["-m", "arch.widht=32,64"], "modula-sweep: unknown key arch.widht; did you mean arch.width?"),
    (["data=shakespear"], "modula-sweep: data=shakespear is not an option; did you mean data=shakespeare? "
                          "(options: cifar10, hf_dataset, image_folder, openwebtext, shakespeare, text_files, "
                          "tinystories, tokens)"),
    (["experiment=paper/fig1_widht"], "modula-sweep: experiment=paper/fig1_widht is not an option; did you "
                                      "mean experiment=paper/fig1_width?"),
    (["optim.lr=2^-6,2^-5"], "modula-sweep: optim.lr=0.015625,0.03125 gives several values: add -m"),
])
def test_a_bad_command_line_gets_one_line_and_no_run_folder(tmp_path, args, message):
    status, out = cli(tmp_path, *args)
    assert status == 2, out
    assert out.strip() == message or (out.startswith(message) and len(out.strip().splitlines()) == 1), out
    assert "Traceback" not in out and "Hydra" not in out
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(("argv", "expected"), [
    (["--config-dir", "configs", "arch=x", "-m", "arch.width=32,128"],
     ["--config-dir", "configs", "-m", "arch=x", "arch.width=32,128"]),
    (["a=1", "--cfg", "job", "-p", "train", "b=2"], ["--cfg", "job", "-p", "train", "a=1", "b=2"]),
    (["a=1", "--info", "b=2"], ["--info", "a=1", "b=2"]),  # an optional value only when it is one of its choices
    (["a=1", "--info", "config"], ["--info", "config", "a=1"]),
    (["a=1", "--config-dir=x", "b=2", "--multirun"], ["--config-dir=x", "--multirun", "a=1", "b=2"]),
])
def test_flags_go_before_the_overrides_wherever_they_were_typed(argv, expected):
    assert flags_first(argv) == expected


def test_m_in_the_middle_of_the_command_sweeps(tmp_path, tiny_text_root):
    status, out = cli(tmp_path, *tiny_gpt(tiny_text_root, "train.steps=2"), "-m", "optim.lr=0.1,0.2",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert status == 0 and "unrecognized arguments" not in out, out
    assert "sweep finished: 2 completed" in out, out[-2000:]
    assert len(list((tmp_path / "sweep").rglob("summary.json"))) == 2
    # the launching process's own lines (the first says where the sweep goes) in the jobs' format
    logged = [line for line in out.splitlines() if line.startswith("[")]
    assert logged[0].endswith(f"sweep of 2 runs into {tmp_path / 'sweep'}"), logged
    assert all(re.match(r"\[\d\d:\d\d:\d\d\]\[(INFO|WARNING)\] ", line) for line in logged), logged


@pytest.mark.parametrize(("arg", "hint"), [
    ("train.steps=1e3", "train.steps=1000.0; must be an integer >= 1 (write train.steps=1000)"),
    ("optim.lr=2**-3", "optim.lr=2**-3; every learning rate must be a number > 0 (write powers as 2^-3)"),
])
def test_a_bad_value_says_how_to_write_it_and_leaves_no_folder(tmp_path, arg, hint):
    (tmp_path / "outputs" / "runs" / "earlier").mkdir(parents=True)
    status, out = cli(tmp_path, arg)
    assert status == 1 and out.strip() == f"modula-sweep: invalid configuration: {hint}", out
    assert [p.name for p in (tmp_path / "outputs" / "runs").iterdir()] == ["earlier"]  # ours gone, theirs kept
    shutil.rmtree(tmp_path / "outputs")
    assert cli(tmp_path, arg)[0] == 1 and not (tmp_path / "outputs").exists()  # no empty parents either


def test_an_unparsable_argument_says_how_to_quote_it(tmp_path):
    status, out = cli(tmp_path, "optim.lr=a#b")
    assert status == 2
    assert out.splitlines() == [
        "modula-sweep: cannot parse the argument optim.lr=a#b: unexpected character '#'",
        "  write key=value; to pass a value with such characters as text, quote it: 'optim.lr=\"a#b\"'"]
    assert not (tmp_path / "outputs").exists()


def test_hydra_full_error_shows_hydras_own_report(tmp_path):
    status, out = cli(tmp_path, "train.stepz=5", HYDRA_FULL_ERROR="1")
    assert status == 1 and "Traceback" in out and "Could not override 'train.stepz'" in out


def test_the_coordinate_check_reports_under_its_own_name(tmp_path):
    status, out = cli(tmp_path, "coord.axiss=depth", program="modula-coord-check")
    assert status == 2
    assert out.strip() == "modula-coord-check: unknown key coord.axiss; did you mean coord.axis?"
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("optim=adamm", "optim=adamm is not an option; did you mean optim=adam? (options: adam, adamw_wsd_clip, sgd)"),
    ("sweep=quik", "sweep=quik is not an option; did you mean sweep=quick?"),
    ("+experiment=paper/_paper_trian", "is not an option (27 options: see --help)"),  # hidden: not offered
    ("arch=gpt,resmlpp", "arch=resmlpp is not an option; did you mean arch=resmlp?"),
    ("data=shakespeare,cifar100", "data=cifar100 is not an option; did you mean data=cifar10?"),
    ("variant=nonsense", "variant=nonsense is not an option (options: modular, paper)"),
    ("variant=papr", "variant=papr is not an option; did you mean variant=paper?"),
])
def test_group_options_are_checked_before_hydra(override, message):
    with pytest.raises(UsageError) as caught:
        check_choices(["optim.lr=0.1", override], [CONFIG_DIR])
    assert message in caught.value.message and "_paper_train" not in caught.value.message


def test_a_preset_reaches_the_sweepers_grid_through_the_command_line(tmp_path):
    """`sweep=width`, as the program composes it: the paper's widths 32 … 1024 (docs/design.md) and the LR grid of
    the chosen optimiser × mode (resolved when the jobs are made)."""
    status, out = cli(tmp_path, "sweep=width", "--cfg", "hydra", "-p", "hydra.sweeper.params")
    assert status == 0, out
    params = yaml.safe_load(out)
    assert params == {"arch.width": ",".join(str(2**e) for e in range(5, 11)),
                      "optim.lr": "${lr_grid:${optim.name},${optim.mode}}"}
    assert not (tmp_path / "outputs").exists()


def test_resolving_the_hydra_node_alone_is_one_line_that_says_what_works(tmp_path):
    status, out = cli(tmp_path, "sweep=width", "--cfg", "hydra", "--resolve")
    assert status == 2 and "Traceback" not in out
    assert "modula-sweep: --cfg hydra --resolve cannot resolve" in out and "--cfg all --resolve" in out
    status, out = cli(tmp_path, "sweep=width", "--cfg", "all", "-p", "hydra.sweep.dir", "--resolve")
    assert status == 0 and out.strip() == "outputs/sweeps/width/gpt_shakespeare_paper", out


@pytest.mark.parametrize("args", [["--help"], ["train.stepz=3"], ["data=shakespear"], ["-m", "optim.lr=1", "x=1"]])
def test_help_and_command_line_mistakes_are_answered_before_torch_loads(tmp_path, args):
    """README's promise that --help and a mistyped option answer at once: neither imports torch or pandas."""
    code = ("import sys; sys.argv = ['modula-sweep', *sys.argv[1:]]\n"
            "from modula_cli.cli import sweep\n"
            "try:\n    sweep()\nexcept SystemExit as end:\n"
            "    print('loaded:', sorted(m for m in ('torch', 'pandas', 'matplotlib') if m in sys.modules), end.code)")
    result = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    last = result.stdout.strip().splitlines()[-1]
    assert last in ("loaded: [] 0", "loaded: [] 2"), result.stdout[-500:] + result.stderr[-500:]


@pytest.mark.parametrize("args", [["optim.lr", "=", "0.1"], ["optim.lr=", "0.1"],
                                  ["train.steps=3", "optim.lr", "=0.1"]])
def test_spaces_around_an_equals_sign_are_one_line_saying_how_to_write_it(tmp_path, args):
    status, out = cli(tmp_path, *args)
    assert (status, out.strip()) == (2, "modula-sweep: an override is one word without spaces around '=': "
                                         "write optim.lr=0.1"), out
    assert not (tmp_path / "outputs").exists()


def test_existing_options_pass():
    check_choices(["arch=gpt,resmlp", "experiment=paper/_paper_train", "experiment=null", "optim.lr=0.1",
                   "data=glob(*)", "~experiment"], [CONFIG_DIR])


def test_unknown_keys_are_matched_among_their_neighbours():
    cfg = compose_config()
    assert unknown_key("tran.steps", cfg) == "unknown key tran.steps; did you mean train.steps?"
    assert unknown_key("stepz", cfg) == "unknown key stepz; did you mean train.steps?"  # the group left out
    assert unknown_key("train.xyz", cfg).startswith("unknown key train.xyz; known in train: steps, batch_size")


def test_parse_errors_name_the_argument():
    error = OverrideParseException("optim.lr=[1,2", "no viable alternative at input '[1,2'\nSee https://hydra.cc")
    assert parse_error(error).splitlines()[0] == \
        "cannot parse the argument optim.lr=[1,2: no viable alternative at input '[1,2'"


# --- --help -----------------------------------------------------------------------------------------------

def listed_groups(help_text: str) -> dict[str, set[str]]:
    """The "Config groups" block of the help: a group's name then its options, continued on indented lines."""
    block = help_text.split("Config groups (group=option):\n")[1].split("\n\n")[0]
    groups: dict[str, set[str]] = {}
    for line in block.splitlines():
        if not line[2].isspace():
            group, _, line = line.strip().partition(" ")
        line = line.split(" (")[0].replace("; yours:", ",")  # a note after the options
        groups.setdefault(group, set()).update(o.strip() for o in line.split(",") if o.strip())
    return groups


def config_files() -> dict[str, set[str]]:
    """What the help should list: every group's config files but `_…` ones, and Hydra's launchers."""
    files = {p.relative_to(CONFIG_DIR) for p in CONFIG_DIR.glob("*/**/*.yaml")}
    groups: dict[str, set[str]] = {}
    for path in files:
        group, option = path.parts[0], path.relative_to(path.parts[0]).with_suffix("").as_posix()
        if path.parts[:2] == ("hydra", "launcher"):
            group, option = "hydra/launcher", path.stem
        elif group == "hydra":
            continue
        if not any(part.startswith("_") for part in option.split("/")):
            groups.setdefault(group, set()).add(option)
    return groups


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_describes_the_program_and_lists_every_option(tmp_path, program):
    status, out = cli(tmp_path, "--help", program=program)
    assert status == 0, out
    assert out.startswith(f"{program}: ") and len(out.splitlines()) <= 45
    assert "powered by Hydra" not in out and "_paper_train" not in out
    assert listed_groups(out) == config_files()
    assert "--cfg job" in out and "README.md" in out and "outputs/" in out
    examples = ["modula-sweep sweep=quick", "modula-coord-check"] if program == "modula-coord-check" else [
        "modula-sweep sweep=quick  ", "modula-sweep sweep=quick train.seed=1,2 sweep.pack=true",
        "modula-sweep optim=sgd", "modula-sweep-report DIR", "-m ", "optim.mode=unnormed | normed (the default) | "
        "dualized | manifold", "--config-dir DIR", "$MODULA_DATA"]
    assert all(example in out for example in examples), out
    assert not (tmp_path / "outputs").exists()
    if program == "modula-sweep":  # where data.root's default is on this machine, not a made-up ./data
        from modula_cli.data.storage import data_root

        assert f"(here {data_root(None)}:" in " ".join(out.split()), out


# --- Hydra's search path ------------------------------------------------------------------------------------

def _user_configs(tmp_path: Path) -> Path:
    folder = tmp_path / "my_configs" / "arch"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text("name: gpt\nwidth: 16\ndepth: 1\nheads: 2\n")
    return folder.parent


@pytest.mark.parametrize("form", ["file://{dir}", "file://my_configs", "pkg://user_configs_pkg"])
def test_options_on_hydras_search_path_are_accepted(tmp_path, form):
    """`hydra.searchpath=[...]` on the command line (Hydra's documented way to add a config folder, the same as
    --config-dir): its options pass the front door, and a typo among them is still named."""
    folder = _user_configs(tmp_path)
    package = tmp_path / "user_configs_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "arch").symlink_to(folder / "arch")
    entry = form.format(dir=folder)
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code, out = cli(tmp_path, f"hydra.searchpath=[{entry}]", "arch=mine", "--cfg", "job", **env)
    assert code == 0 and "width: 16" in out, out
    code, out = cli(tmp_path, f"hydra.searchpath=[{entry}]", "arch=mnie", **env)
    assert code == 2 and "arch=mnie is not an option; did you mean arch=mine?" in out, out


def test_the_search_path_of_the_primary_config_file_counts_too(tmp_path):
    from modula_cli.command_line import search_path

    folder = _user_configs(tmp_path)
    primary = tmp_path / "primary"
    primary.mkdir()
    (primary / "main.yaml").write_text(f"hydra:\n  searchpath:\n    - file://{folder}\n    - structured://x\n")
    assert search_path([], [primary, CONFIG_DIR], "main") == [folder.resolve()]
    assert search_path([f"hydra.searchpath=[file://{primary}]"], [primary], "main") == [primary.resolve()]
    assert search_path([], [CONFIG_DIR], "config") == []


def test_help_names_every_mode_and_hydras_own_launchers(tmp_path):
    from modula_cli.optim.modes import MODES

    coord = cli(tmp_path, "--help", program="modula-coord-check")[1]
    assert all(mode in coord for mode in MODES)
    sweep = cli(tmp_path, "--help")[1]
    assert all(name in sweep for name in ("local_parallel", "slurm", "ray_cluster", "submitit_local", "basic"))


@pytest.mark.parametrize("args", [["hydra.run.dir=taken/run"], ["hydra.run.dir=taken"],
                                  ["-m", "hydra.sweep.dir=taken", "optim.lr=0.1,0.2"],
                                  ["sweep=quick", "hydra.sweep.dir=taken/sweep"]])
def test_an_output_folder_that_cannot_be_made_is_one_line_before_any_run(tmp_path, args):
    (tmp_path / "taken").write_text("a file where the output folder would go")
    status, out = cli(tmp_path, *args)
    key = "hydra.sweep.dir" if "-m" in args or "sweep=quick" in args else "hydra.run.dir"
    assert status == 2 and len(out.strip().splitlines()) == 1, out
    assert out.startswith("modula-sweep: cannot write the output folder ") and f"({key})" in out
    assert f"{tmp_path / 'taken'} is a file, not a folder; choose another with {key}=FOLDER" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.mark.parametrize("args", [["hydra.run.dir=/proc/modula-run"], ["sweep=quick", "hydra.sweep.dir=/proc/x/sweep"]])
def test_a_system_folder_that_takes_no_new_folders_is_one_line(tmp_path, args):
    """/proc's permission bits let root write, but no folder can be made in it: said in one line, before Hydra
    starts, as for any other folder that cannot be written."""
    status, out = cli(tmp_path, *args)
    key = "hydra.sweep.dir" if "sweep=quick" in args else "hydra.run.dir"
    assert status == 2 and len(out.strip().splitlines()) == 1 and "Traceback" not in out, out
    assert f"({key}): no folder can be made in /proc (the system says: " in out
    assert f"choose another with {key}=FOLDER" in out


def test_a_read_only_folder_is_named(tmp_path, monkeypatch):
    from modula_cli.plumbing import atomic

    (tmp_path / "locked").mkdir()
    monkeypatch.setattr(atomic.os, "access", lambda path, mode: Path(path) != tmp_path / "locked")
    assert atomic.folder_problem(tmp_path / "locked" / "sweeps" / "${sweep.name}") == \
        f"{tmp_path / 'locked'} is not writable"
    assert atomic.folder_problem(tmp_path / "free" / "x") is None
    assert atomic.folder_problem(f"{tmp_path}/locked_${{now:%H}}") is None  # the folder made is in tmp_path


@pytest.mark.parametrize(("args", "message"), [
    (["optim.mode=muP"], "invalid configuration: optim.mode='muP'; did you mean mup? allowed: unnormed, normed, "
                         "dualized, manifold, mup"),
    (["optim.mode=dualised"], "optim.mode='dualised'; did you mean dualized?"),
    (["train.steps=abc"], "invalid configuration: train.steps='abc'; must be an integer >= 1 (all 27 grid points)"),
    (["train.seed=0-2"], "train.seed=0-2; must be an integer >= 0; for several seeds: train.seed=0,1,2 (a sweep, -m "
                         "or a preset) or train.seed=[0,1,2] (packed into one run) (all 27 grid points)"),
    (["data.context=100000"], "data.context=100000 exceeds data.max_context=8192"),
    # the report's target, checked before anything trains (not by the report at the sweep's end)
    (["sweep.target=depth:8"], "sweep.target depth=8: this sweep varies width, not depth; name width"),
    (["sweep.target=width:-3"], "sweep.target width=-3: a scale is a positive number"),
    # detach: only a launcher whose jobs outlive the launching process, and never an LR search
    (["sweep.detach=true"], "sweep.detach=true with hydra/launcher=basic: it trains the runs in this process or its "
                            "children, so the launch cannot end before its runs; detach with hydra/launcher=slurm"),
    (["sweep.detach=true", "hydra/launcher=local_parallel"], "sweep.detach=true with hydra/launcher=local_parallel: "
                                                             "it trains the runs in this process or its children"),
    (["sweep.detach=true", "hydra/launcher=ray_cluster"], "sweep.detach=true with hydra/launcher=ray_cluster: Ray "
                                                          "ends a driver's tasks when the driver exits"),
    (["sweep.detach=true", "hydra/launcher=slurm", "sweep.search=true"], "sweep.detach=true with sweep.search=true: "
                                                                         "an LR search chooses each round's LRs"),
])
def test_a_mistake_in_a_sweep_is_said_once_as_for_a_single_run(tmp_path, args, message):
    """A preset's grid is computed from optim.mode (${lr_grid:…}): a mistyped mode gets the single run's line, not
    OmegaConf's interpolation error; a bad value that every grid point shares is said once, with their count."""
    status, out = cli(tmp_path, "sweep=quick", *args)
    lines = out.strip().splitlines()
    assert status == 1 and len(lines) == 1 and lines[0].startswith("modula-sweep: sweep not launched, "), out
    assert message in lines[0] and "Interpolation" not in out and not (tmp_path / "outputs").exists(), out


def test_a_problem_of_some_grid_points_says_how_many_and_one_of_them():
    from modula_cli.sweep.plan import grid_problems

    per_job = [("arch.width=32 optim.lr=0.5", "arch.width=32 is not divisible by arch.heads=3"),
               ("arch.width=32 optim.lr=1.0", "arch.width=32 is not divisible by arch.heads=3"),
               ("arch.width=100 optim.lr=1.0", "train.steps=0; must be an integer >= 1"),
               ("arch.width=100 optim.lr=1.0", "arch.width=100 is not divisible by arch.heads=3")]
    assert grid_problems(per_job, 6) == [
        "arch.width=32 is not divisible by arch.heads=3 (2 of 6 grid points, e.g. [arch.width=32 optim.lr=0.5])",
        "[arch.width=100 optim.lr=1.0] train.steps=0; must be an integer >= 1",
        "[arch.width=100 optim.lr=1.0] arch.width=100 is not divisible by arch.heads=3"]
    assert grid_problems([("a=1", "x"), ("a=2", "x")], 2) == ["x (all 2 grid points)"]
    assert grid_problems([("a=1", "x")], 1) == ["x"]

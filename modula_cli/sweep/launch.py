"""A launch: one multirun, as its launching process holds it from before the first job to the closing line.

``Launch.start`` checks the grid and the launcher's request (nothing is written before both pass), records
the planned runs in the sweep's ``sweep.json`` (with their knobs and, per job, the run folders it trains: so
progress, the closing counts and the report's pending rows all come from the files, whichever launcher ran the
jobs), and takes over SIGTERM / SIGINT. ``Launch.end`` trains the runs that were busy elsewhere, settles runs
whose process was killed, writes the report, and prints the closing lines. The sweep folder is made absolute
before any job starts, so jobs on other machines or in other working directories (Ray workers) write where the
launching process looks; the launch id reaches each job in the task its launcher sends (``job_place.py``).
"""

from __future__ import annotations

import logging
import re
import sys
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, open_dict, read_write
from omegaconf.errors import InterpolationResolutionError

from ..config.hydra_internals import quiet_job_announcements
from ..config.identity import job_label
from ..config.schema import searches
from ..config.validate import ConfigError
from ..plumbing import atomic
from ..plumbing.signals import STOP, StopRequested
from ..results.files import stop_marker
from ..results.manifest import mark_reported, read_launch, record_launch
from ..results.status import BUSY
from ..results.summary import Outcome, mark_abandoned
from .final_report import write_sweep_report
from .host import Host, host_of
from .job import train_job
from .job_place import carry_launch
from .lr_search import SearchError
from .plan import Plan, another_experiment_line, edited_model_note, finished_runs, prepare_data, validate_grid
from .progress import closing, detached_closing, report_progress
from .search_space import SearchSpace, search_space

log = logging.getLogger(__name__)


class LaunchRefused(Exception):
    """The launcher cannot run this sweep where it would send it (a request no node can satisfy, a cluster
    that does not answer): said in one line per problem before anything is written or submitted."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(problems[0] if len(problems) == 1 else "\n  - " + "\n  - ".join(problems))


@dataclass
class DeferredRun:
    """A grid point another process was training when its job came (left for the end of the launch)."""
    cfg: DictConfig
    run_dir: Path
    overrides: list[str]


@dataclass
class Launch:
    """One multirun in its launching process: its id, sweep folder and host, the runs left for its end, and the
    signal handling it installed (closed by ``end``, whatever happens there)."""
    id: str
    sweep_dir: Path
    host: Host
    deferred: list[DeferredRun] = field(default_factory=list)
    opened: ExitStack = field(default_factory=ExitStack)
    detach: bool = False  # sweep.detach=true: it submits and leaves; the report is its followers'

    @classmethod
    def start(cls, config: DictConfig) -> Launch:
        """Check, record and announce the launch; exit with one line per problem when it cannot start."""
        host = host_of(config.hydra.launcher)
        plan, space = _checked(config, host)
        launch_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        carry_launch(config, launch_id)
        launch = cls(launch_id, _pin_sweep_dir(config), host, detach=bool(config.sweep.get("detach")))
        before = [] if space is not None else sorted(finished_runs(config, plan.runs))
        if note := edited_model_note(config, plan.runs):
            log.info("%s", note)
        # a search records its runs batch by batch (search.py)
        runs, jobs = (plan.runs, plan.jobs) if space is None else ({}, [])
        record_launch(launch.sweep_dir, launch_id, runs, before, jobs)
        launch.opened.enter_context(STOP.installed())
        # jobs in other processes or on other machines learn of a stop from a marker in the sweep folder
        launch.opened.enter_context(STOP.telling(launch._write_stop_marker))
        quiet_job_announcements()
        launch._announce(plan, space, before)
        return launch

    def _announce(self, plan: Plan, space: SearchSpace | None, before: list[str]) -> None:
        if space is not None:
            log.info("LR search into %s: %s", self.sweep_dir, space.describe(len(plan.runs)))
            return
        log.info("sweep of %d run%s into %s%s", len(plan.runs), "s" if len(plan.runs) != 1 else "", self.sweep_dir,
                 f": {len(before)} finished before (skipped; sweep.rerun=true retrains), "
                 f"{len(plan.runs) - len(before)} to train" if before else "")
        if line := another_experiment_line(self.sweep_dir, plan.runs):
            log.warning(line)

    def _write_stop_marker(self, signum: int) -> None:
        atomic.write_text(stop_marker(self.sweep_dir, self.id), str(signum))

    def job_ended(self, job_return: JobReturn) -> None:
        """A job that ran in this process found its run busy in another: train it at the end."""
        if job_return.status == JobStatus.COMPLETED and isinstance(job_return.return_value, Outcome) \
                and job_return.return_value.status == BUSY:
            self.deferred.append(DeferredRun(job_return.cfg, Path(job_return.hydra_cfg.hydra.runtime.output_dir),
                                             list(job_return.overrides or [])))

    def end(self, config: DictConfig) -> int:
        """After the last job: the deferred runs (unless stopped), killed runs settled, the report, the closing
        lines. The exit code: 128 + signal after a stop, 1 when some run failed or did not finish, else 0. A
        detached launch only says how to follow its jobs (exit 0): the report comes once they have ended."""
        if self.detach:  # whether or not it had anything to submit
            self.opened.close()
            return detached_closing(self.sweep_dir, read_launch(self.sweep_dir, self.id))
        stopped = None
        try:
            for deferred in self.deferred:
                if STOP.requested:
                    break
                result = train_job(deferred.cfg, deferred.run_dir, deferred.overrides, self.id, wait=True)
                report_progress(self.sweep_dir, self.id, job_label(deferred.overrides), result)
            self._settle_abandoned()
            if write_sweep_report(config, self.sweep_dir):
                mark_reported(self.sweep_dir, self.id)  # modula-sweep-status need not write it again
        finally:
            stopped = STOP.signum
            self.opened.close()
            if stopped is None or self.host.local:  # a cluster's job that starts late after a stop still
                stop_marker(self.sweep_dir, self.id).unlink(missing_ok=True)  # finds the marker, and stops
        record = read_launch(self.sweep_dir, self.id)
        return closing(self.sweep_dir, record, record.summaries(self.sweep_dir), stopped)

    def _settle_abandoned(self) -> None:
        """A job process killed mid-run (SIGKILL, out of memory) left its run "running": interrupted."""
        for name in read_launch(self.sweep_dir, self.id).runs:
            try:
                mark_abandoned(self.sweep_dir / name)
            except OSError as error:  # one unreadable folder must not cost the report and the closing lines
                log.warning("%s: could not settle its state: %s", name, error)


def _checked(config: DictConfig, host: Host) -> tuple[Plan, SearchSpace | None]:
    """The plan (and the search's space), or exit with the problems in one line each: Hydra turns a callback's
    exceptions into warnings, so a refused launch exits here."""
    try:
        space = search_space(config) if searches(config) else None
        plan = validate_grid(config, devices_here=host.local)
        _check_target(config, plan)
        _check_detach(config, space is not None)
        _check_sweeper(config.hydra.sweeper)
        _preflight(config.hydra.launcher)
        if host.local:  # last: the user's mistakes come first, and a download only once the launch can start
            prepare_data(config, plan)
        return plan, space
    except (ConfigError, LaunchRefused, SearchError) as error:
        raise SystemExit(f"modula-sweep: sweep not launched, {error}") from None
    except InterpolationResolutionError as error:  # a value the grid is computed from (a preset's ${lr_grid:…})
        cause = re.sub(r"^\w+ raised while resolving interpolation: ", "", str(error).splitlines()[0])
        raise SystemExit(f"modula-sweep: sweep not launched, {ConfigError([cause])}") from None
    except StopRequested as stop:  # while preparing the data: nothing launched, nothing trained
        print(f"modula-sweep: sweep not launched, {stop} while preparing the data; nothing was trained",
              file=sys.stderr)
        raise SystemExit(stop.exit_code) from None
    except Exception as error:  # noqa: BLE001 - the launcher's check broke: never launch without it
        raise SystemExit(f"modula-sweep: sweep not launched, the launcher's check failed: "
                         f"{type(error).__name__}: {error}") from None


def _check_target(config: DictConfig, plan: Plan) -> None:
    """``sweep.target`` names axes this sweep varies, with positive values: said before anything trains, not by
    the report at its end. A target the command line gave is refused; one a preset gave (``sweep=quick``'s
    width 1024) that this sweep does not vary, e.g. ``sweep=quick arch.width=64``, is left out, said once."""
    from ..analysis.targets import TargetError, checked_target, parse_target
    from ..results.knobs import swept_axes

    target = config.sweep.get("target")
    if not target:
        return
    try:
        checked_target(parse_target(str(target), "sweep.target"), swept_axes(plan.runs), name="sweep.target")
    except TargetError as error:
        typed = any(o.lstrip("+~").partition("=")[0] == "sweep.target" for o in config.hydra.overrides.task)
        if typed:
            raise ConfigError([str(error)]) from None
        log.info("%s: the preset's target is left out, the report predicts no LR (sweep.target=null says so "
                 "quietly)", error)


def _check_sweeper(sweeper: DictConfig) -> None:
    """A sweeper whose jobs take their place from the launch (its id, folder, data root, threads): ours, which
    says so on its class (``PLACES_JOBS``), or a subclass of it. Another's jobs would train unplaced."""
    from hydra.utils import get_class

    target = str(sweeper.get("_target_") or "")
    if not getattr(get_class(target), "PLACES_JOBS", False) if target else True:
        raise ConfigError([f"hydra/sweeper: {target or 'none'} does not give its jobs their place in the launch; "
                           f"allowed: packing (modula-sweep's own, the default) or a subclass of it"])


def _check_detach(config: DictConfig, searching: bool) -> None:
    """``sweep.detach=true`` needs a launcher whose jobs outlive the launching process, and a plan known in
    full at the start."""
    if not config.sweep.get("detach"):
        return
    host = host_of(config.hydra.launcher)
    name = config.hydra.runtime.choices.get("hydra/launcher", config.hydra.launcher.get("_target_"))
    if not host.detaches:
        raise ConfigError([f"sweep.detach=true with hydra/launcher={name}: {host.why_attached}, so the launch cannot "
                           f"end before its runs; detach with hydra/launcher=slurm, or keep the launch running under "
                           f"nohup, tmux or screen"])
    if searching:
        raise ConfigError(["sweep.detach=true with sweep.search=true: an LR search chooses each round's LRs from "
                           "the last round, in the launching process; keep it running under nohup, tmux or screen"])


def _preflight(launcher: DictConfig) -> None:
    """A launcher that sends jobs to a cluster checks its request against what the cluster offers (its
    ``preflight``, which raises LaunchRefused and logs what it resolved)."""
    from hydra.utils import get_class

    target = launcher.get("_target_")
    check = getattr(get_class(target), "preflight", None) if target else None
    if check is not None:
        check(launcher)


def _hydra_quoted(text: str) -> str:
    """``text`` as one quoted Hydra override value."""
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _pin_sweep_dir(config: DictConfig) -> Path:
    """The sweep folder, absolute, for this process and every job (whatever its working directory or the
    values it overrides): each job's config is composed again from ``hydra.overrides.hydra``."""
    sweep_dir = Path(config.hydra.sweep.dir).absolute()
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.sweep.dir = str(sweep_dir)
        config.hydra.overrides.hydra.append(f"hydra.sweep.dir={_hydra_quoted(str(sweep_dir))}")
    return sweep_dir


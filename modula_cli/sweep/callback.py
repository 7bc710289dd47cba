"""Hydra's callback of every launch (``hydra.callbacks`` in configs/config.yaml). Hydra makes it before any run,
single runs too, so it imports the sweep machinery (``launch.Launch``) only when a multirun starts: a single
run's config check answers before training's libraries load. It holds the multirun's ``Launch`` from its start
to its end; jobs that run in this process report back through ``on_job_end``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

if TYPE_CHECKING:
    from .launch import Launch


class SweepCallback(Callback):
    def __init__(self) -> None:
        self.launch: Launch | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from .launch import Launch

        self.launch = Launch.start(config)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if self.launch is not None:  # a job in this process (Hydra's basic launcher)
            self.launch.job_ended(job_return)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        launch, self.launch = self.launch, None
        if launch is not None:
            code = launch.end(config)
            if code:
                raise SystemExit(code)

    def __getstate__(self) -> dict[str, Any]:
        # launchers pickle their callbacks into each job: the launch stays with the launching process
        return {**self.__dict__, "launch": None}

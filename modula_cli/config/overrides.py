"""``key=value`` overrides applied to a composed config with OmegaConf's public API, as Hydra applies them
(``+key`` adds, ``++key`` adds or sets, ``~key`` deletes), but raising ``UnknownKey`` for a key the config
lacks. The command line's check and the sweep's grid validation both use it, so a mistyped key fails the
same way everywhere; tests/test_hydra_internals.py checks it against Hydra's own application."""

from __future__ import annotations

from collections.abc import Iterable

from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from ..plumbing.suggest import unknown_key


class OverrideError(ValueError):
    """An override that cannot be applied; the message is one line naming it."""


class UnknownKey(OverrideError):
    def __init__(self, key: str, cfg: DictConfig):
        self.key = key
        super().__init__(unknown_key(key, cfg))


def apply_overrides(overrides: Iterable[Override], cfg: DictConfig) -> None:
    """Apply value overrides (not config-group choices) to ``cfg`` in place, in order."""
    for override in overrides:
        key, value = override.key_or_group, override.value()
        try:
            if override.is_delete():
                if OmegaConf.select(cfg, key, throw_on_missing=False) is None:
                    raise UnknownKey(key, cfg)
                parent, _, leaf = key.rpartition(".")
                with open_dict(cfg):
                    del (OmegaConf.select(cfg, parent) if parent else cfg)[leaf]
            elif override.is_add():
                if OmegaConf.select(cfg, key, throw_on_missing=False) is not None and \
                        not isinstance(value, (dict, list)):
                    raise OverrideError(f"cannot add {override.input_line}: {key} is already set; drop the + to "
                                        f"change it, or write ++{override.input_line.lstrip('+')}")
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            elif override.is_force_add():
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            else:
                try:
                    OmegaConf.update(cfg, key, value, merge=True)
                except (ConfigAttributeError, ConfigKeyError) as error:
                    raise UnknownKey(key, cfg) from error
        except OmegaConfBaseException as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise OverrideError(f"cannot set {override.input_line}: {reason}") from error

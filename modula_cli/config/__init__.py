"""Configuration: where the YAML files live, their typed schema, the checks run before launch, and what
identifies a run. Only the locations load here: the command line's front door imports this before torch."""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
CONFIG_DIR = PACKAGE_DIR.parent / "configs"

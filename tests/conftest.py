import os
import re
from pathlib import Path

# The caller's shell must not change a test's outcome. Switches that the code under test or its libraries read
# from the environment are cleared for the whole suite and every process it starts, before any library reads
# them (the Hugging Face libraries read theirs once, at import): as on a clean machine. SLURM's job variables go
# too (a suite run inside `srun` or `salloc`); SLURM_CONF, which says where the cluster is, stays. Kept on
# purpose: MODULA_DATA (where README puts the real data), MODULA_CLUSTER_TESTS and MODULA_DATA_TESTS (CI's word
# that the engines are up and the real data is there) and CUDA_VISIBLE_DEVICES (which GPU the GPU checks use; no
# other test reads it).
CALLER_SWITCHES = re.compile(
    r"^(HF_DATASETS_OFFLINE|HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE|HF_ENDPOINT|WANDB_.*|RAY_ADDRESS|RAY_NAMESPACE"
    r"|(SLURM|SBATCH|SALLOC|SRUN)_(?!CONF$).*|OMP_NUM_THREADS|MKL_NUM_THREADS|HYDRA_FULL_ERROR)$")
for _name in [name for name in os.environ if CALLER_SWITCHES.match(name)]:
    del os.environ[_name]

import pytest  # noqa: E402 - after the environment is cleared
import torch  # noqa: E402

# The shared plain helpers live in helpers.py. write_cifar_batches stays importable from here too:
# scripts/bench_data.py --generated-cifar imports it from conftest.
from helpers import require_shakespeare, write_cifar_batches  # noqa: E402

# Under pytest-xdist each worker is one of the machine's processes: torch's default of one thread per core
# in every worker oversubscribes the cores (measured on 2 cores: a 0.4 s test took 13 s beside another).
# Subprocesses (the sweeps the tests launch) choose their own threads, as a user's runs do.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture
def real_shakespeare() -> Path:
    """The real text (a one-line skip without it, a failure where CI requires it)."""
    return require_shakespeare()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads the real text is marked ``real_text`` by its fixture, so that CI's pass with the text
    (``-m real_text``) runs exactly the tests that the pass without it skipped. The end-to-end tests (``slow``) go
    first: the test workers share them out from the start, and the suite does not end on one of them alone."""
    for item in items:
        if "real_shakespeare" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_text)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _fixed_global_seed():
    """Every test starts from the same global RNG state, so a result never depends on which tests ran
    before it (or on -k selecting it alone)."""
    torch.manual_seed(0)


@pytest.fixture
def cifar_root(tmp_path):
    write_cifar_batches(tmp_path)
    return tmp_path


@pytest.fixture
def tiny_text_root(tmp_path):
    """A small character corpus laid out like Shakespeare's input.txt."""
    root = tmp_path / "data"
    (root / "shakespeare").mkdir(parents=True)
    text = "".join(f"To be, or not to be: line {i}.\n" for i in range(400))
    (root / "shakespeare" / "input.txt").write_text(text)
    return root

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import dspy
import pytest

from vista_dspy.data.location import data_dir
from vista_dspy.lm.offline import offline_litellm

offline_litellm()  # no test fetches litellm's price table, whichever test imports litellm first

# The benchmark data, found from the checkout ($VISTA_DATA_DIR, ../shared/data, data/); never copied into it.
SHARED_DATA = data_dir(Path(__file__).resolve().parents[1])
DEV_FILE = SHARED_DATA / "vista_human_eval" / "dev.json"


@pytest.fixture(autouse=True)
def _no_lm_cache(tmp_path, monkeypatch):
    """No test reads or writes the user's LM cache, nor the user's programs folder."""
    monkeypatch.setenv("VISTA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VISTA_PROGRAMS", str(tmp_path / "programs"))
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    yield


@pytest.fixture
def dev_file():
    if not DEV_FILE.exists():
        pytest.skip(f"benchmark data not found at {DEV_FILE}")
    return DEV_FILE

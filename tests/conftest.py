import os
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import dspy
import pytest


def _shared_data() -> Path:
    """The workplace's benchmark data: $VISTA_DATA_DIR, else ../shared/data beside the checkout, else the
    workplace's fixed location (a CI clone may live elsewhere). Never copied into the repository."""
    candidates = [os.environ.get("VISTA_DATA_DIR"), Path(__file__).resolve().parents[2] / "shared" / "data",
                  "/work/shared/data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


SHARED_DATA = _shared_data()
DEV_FILE = SHARED_DATA / "vista_human_eval" / "dev.json"


@pytest.fixture(autouse=True)
def _no_lm_cache(tmp_path, monkeypatch):
    """No test reads or writes the user's LM cache."""
    monkeypatch.setenv("VISTA_CACHE_DIR", str(tmp_path / "cache"))
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    yield


@pytest.fixture
def dev_file():
    if not DEV_FILE.exists():
        pytest.skip(f"benchmark data not found at {DEV_FILE}")
    return DEV_FILE

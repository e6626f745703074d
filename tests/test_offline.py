"""Importing the package changes no environment variable, and litellm, whenever it is imported after
``offline_litellm()``, reads the price table it ships instead of fetching one, and leaves the environment as it was."""

import os
import subprocess
import sys
import textwrap

from vista_dspy.lm.offline import VARIABLE, local_cost_map


def run_python(script: str) -> str:
    env = {name: value for name, value in os.environ.items() if name != VARIABLE}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env,
                          check=True)
    return done.stdout.strip()


def test_importing_the_package_and_the_program_changes_no_environment_variable():
    assert run_python("""
        import os
        before = dict(os.environ)
        import vista_dspy, vista_dspy.program, vista_dspy.cli
        print(dict(os.environ) == before)
    """) == "True"


def test_litellm_imported_after_offline_litellm_asks_no_host_and_leaves_the_environment_as_it_was():
    # DSPy imports litellm on an LM's first call through it, in whatever thread: here in a thread, after the fact
    assert run_python("""
        import os, socket, threading
        asked = []
        resolve = socket.getaddrinfo
        socket.getaddrinfo = lambda host, *a, **k: asked.append(host) or resolve(host, *a, **k)
        from vista_dspy.lm.offline import offline_litellm
        before = dict(os.environ)
        offline_litellm()
        thread = threading.Thread(target=lambda: __import__("litellm"))
        thread.start()
        thread.join()
        import litellm
        from litellm.litellm_core_utils.get_model_cost_map import _cost_map_source_info as source
        print(asked, source.source, source.is_env_forced, len(litellm.model_cost) > 1000, dict(os.environ) == before)
    """) == "[] local True True True"


def test_a_value_the_user_set_is_left_alone(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    with local_cost_map():
        assert os.environ[VARIABLE] == "True"
    assert VARIABLE not in os.environ
    monkeypatch.setenv(VARIABLE, "False")
    with local_cost_map():
        assert os.environ[VARIABLE] == "False"
    assert os.environ[VARIABLE] == "False"

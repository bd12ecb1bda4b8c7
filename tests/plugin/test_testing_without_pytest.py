"""`llmsim.testing` imports without pytest (a plain `pip install .` has none): the bench
scripts that start servers through it (bench/drift.py, bench/serving_model.py) run there. Each
check is a Python process of its own in which importing pytest fails; it starts no server."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

NO_PYTEST = "import sys\nsys.modules['pytest'] = sys.modules['_pytest'] = None\n"


def run(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (read from stdin) where `import pytest` raises ImportError."""
    return subprocess.run([sys.executable, "-"], input=NO_PYTEST + code, capture_output=True,
                          text=True, cwd=REPO, timeout=120)


def test_pytest_is_blocked_in_the_child():
    result = run("import pytest\n")
    assert result.returncode != 0 and "ModuleNotFoundError: import of pytest halted" in result.stderr


def test_llmsim_testing_imports_and_offers_its_helpers():
    result = run("import llmsim.testing as t\n"
                 "print(callable(t.start), callable(t.free_port), t.Server.__name__)\n"
                 "print('pytest' in sys.modules and sys.modules['pytest'] is not None)\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "Server", "False"]


@pytest.mark.parametrize("script", ["bench/drift.py", "bench/serving_model.py"])
def test_bench_scripts_using_it_start(script):
    result = run(f"import runpy\nsys.argv = [{script!r}, '--help']\n"
                 f"runpy.run_path({script!r}, run_name='__main__')\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage:")

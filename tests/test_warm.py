"""runner.warm: a forkserver's preload leaves no lazy work for the children it forks."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import runner.serve.prefork  # what serve's and kanban dispatch's forkserver import
from pydantic import BaseModel
from runner.lazyre import LazyPattern
from runner.warm import _patterns, _subclasses, PACKAGES

lazy = [p for name, m in list(sys.modules.items()) if m and name.split('.')[0] in PACKAGES
        for p in _patterns(vars(m).values(), 3)]
pending = [p.pattern for p in lazy if '_compiled' not in p.__dict__]
deferred = [m.__qualname__ for m in _subclasses(BaseModel)
            if m.__module__.split('.')[0] in PACKAGES and not m.__pydantic_complete__]
print(len(lazy), len(pending), deferred)
"""


def test_prefork_compiles_patterns_and_builds_models() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split(" ", 2)
    found, pending, deferred = int(out[0]), int(out[1]), out[2].strip()
    assert found > 50  # the classifier's, the injection scan's, the redaction's ...
    assert pending == 0
    assert deferred == "[]"


def test_ready_loaded_leaves_unimported_modules_alone() -> None:
    probe = "import sys, runner.warm; runner.warm.ready_loaded(); print('runner.safety.shell.classify' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"

"""runner loads no pydantic plugin (runner/__init__.py): a plugin would see every value validated,
config.yaml's literal keys included, and looking for one costs a scan of every installed package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SPY = '''
import os


class Spy:
    def new_schema_validator(self, schema, schema_type, path, kind, config, settings):
        with open(os.environ["SPY_FILE"], "a") as fh:
            fh.write(path.name + "\\n")
        return None, None, None


plugin = Spy()
'''

MODEL = "import pydantic\nclass Probe(pydantic.BaseModel):\n    x: int\nProbe(x=1)\n"
CONFIG = (
    "import sys\nfrom pathlib import Path\nimport runner.config.machine as m\n"
    "m.load_config(Path(sys.argv[1]), {})\n"
    "print('importlib.metadata' in sys.modules)\n"
)


@pytest.fixture
def installed_plugin(tmp_path: Path) -> dict[str, str]:
    """A pydantic plugin installed where Python finds it (a dist-info with a ``pydantic`` entry point)."""
    site = tmp_path / "site"
    dist = site / "spy_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: spy-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pydantic]\nspy = spy_plugin:plugin\n")
    (site / "spy_plugin.py").write_text(SPY)
    return {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": f"{site}{os.pathsep}{REPO}",
        "SPY_FILE": str(tmp_path / "spy.log"),
    }


def _python(code: str, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_plugin_is_found_without_runner(installed_plugin: dict[str, str]) -> None:
    _python(MODEL, installed_plugin)  # the control: pydantic alone loads it
    assert Path(installed_plugin["SPY_FILE"]).read_text() == "Probe\n"


def test_runner_validates_config_yaml_without_it(installed_plugin: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  default:\n    api_keys: ['sk-literal-key-0123456789']\n")
    config.chmod(0o600)
    assert _python(CONFIG, installed_plugin, str(config)) == "False\n"  # and no metadata scan
    assert not Path(installed_plugin["SPY_FILE"]).exists()

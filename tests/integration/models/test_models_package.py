"""`swarmrl.models` resolves its names on first use, so reading a run config does not load torch."""

import subprocess
import sys

import swarmrl.models as models


def test_every_exported_name_resolves():
    assert sorted(models.__all__) == sorted(models._EXPORTS)
    for name in models.__all__:
        assert getattr(models, name) is not None


def test_reading_a_config_does_not_import_torch():
    code = (
        "import sys; from swarmrl.configs import load_config; load_config(None, ['model.tiny.num_layers=2']); "
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"

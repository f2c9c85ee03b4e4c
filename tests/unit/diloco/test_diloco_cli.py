import typer
from typer.testing import CliRunner

from swarmrl.diloco.cli import diloco, diloco_replica

app = typer.Typer()
app.command("diloco")(diloco)
app.command("diloco-replica")(diloco_replica)


def test_missing_config_fails_with_a_named_error(tmp_path):
    result = CliRunner().invoke(app, ["diloco", f"@{tmp_path / 'absent.toml'}"])
    assert result.exit_code == 2
    assert "cannot read config" in result.output


def test_inconsistent_overrides_are_refused_before_any_process_starts(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[diloco]\nworkers = 2\ninner_steps = 4\n")
    result = CliRunner().invoke(app, ["diloco", str(path), "--fragments", "9"])
    assert result.exit_code == 2
    assert "fragments" in result.output


def test_elastic_replica_refuses_lossy_codecs(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[diloco]\ncodec = "int8"\n')
    result = CliRunner().invoke(
        app, ["diloco-replica", f"@{path}", "--replica-rank", "0", "--lighthouse", "http://127.0.0.1:1"]
    )
    assert result.exit_code == 2
    assert "fp32" in result.output

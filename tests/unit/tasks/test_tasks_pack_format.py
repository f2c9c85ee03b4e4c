"""The task pack format read statically (no sandbox): every malformed or hostile input is one PackError naming
the file, the place and the problem; well-formed packs load the same from a directory and from an archive."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from task_pack_kit import TEST_KEY, manifest_text, resign, write_pack

from swarmrl.configs.task_packs import PackLimitsConfig
from swarmrl.configs.tasks import TasksConfig
from swarmrl.identity import Identity
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.packs.files import read_pack_files, write_archive
from swarmrl.tasks.packs.pack import load_pack
from swarmrl.tasks.packs.signing import pack_digest, signed_message

LIMITS = PackLimitsConfig()
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "task-packs"


def refused(path: Path, limits: PackLimitsConfig = LIMITS) -> str:
    with pytest.raises(PackError) as caught:
        load_pack(path, limits)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_pack_loads_its_rows_columns_and_references(tmp_path):
    pack = load_pack(write_pack(tmp_path / "p"), LIMITS)
    assert [row.row_id for row in pack.rows] == ["r0", "r1", "r2"]
    assert pack.rows[0].task.verification_info == {"answer": "42"}  # the id stays with the pack
    assert pack.rows[2].task.messages == ({"role": "user", "content": "What is 9 + 9?"},)
    assert pack.references == {"r0": ("42",), "r1": ("123",), "r2": ("18",)}
    assert pack.manifest.author == TEST_KEY.node_id and len(pack.digest) == 64


def test_the_examples_are_what_their_script_writes(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_examples(tmp_path)
    for folder in module.EXAMPLES:
        written = {path.name: path.read_bytes() for path in (tmp_path / folder).iterdir()}
        committed = {path.name: path.read_bytes() for path in (EXAMPLES / folder).iterdir()}
        assert written == committed, folder


def test_an_archive_loads_the_same_pack_and_is_reproducible(tmp_path):
    files = read_pack_files(write_pack(tmp_path / "p"), LIMITS)
    write_archive(files, "test-pack-0.1.0", tmp_path / "a.tar.gz")
    write_archive(files, "test-pack-0.1.0", tmp_path / "b.tar.gz")
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    assert load_pack(tmp_path / "a.tar.gz", LIMITS).digest == load_pack(tmp_path / "p", LIMITS).digest


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda m: m.replace('name = "test-pack"', 'name = "Test Pack"'),
            "name: String should match pattern",
        ),
        (lambda m: m.replace('version = "0.1.0"', 'version = "v1"'), "version: String should match pattern"),
        (lambda m: m.replace('license = "MIT"', 'license = "MIT; rm -rf"'), "not an SPDX license expression"),
        (lambda m: m.replace('task_type = "math"', 'task_type = "poetry"'), "task_type: Input should be"),
        (lambda m: m.replace("format = 1", "format = 2"), "format: Input should be 1"),
        (lambda m: m.replace("format = 1\n", ""), "format is missing"),
        (lambda m: m + "homepage = 'x'\n", "homepage is not a manifest field"),
        (
            lambda m: m.replace('answer_columns = ["answer"]', 'answer_columns = ["gold"]'),
            "answer column 'gold'",
        ),
        (
            lambda m: m.replace('columns = ["answer"]', 'columns = ["completions"]'),
            "column 'completions' is reserved",
        ),
        (
            lambda m: m.replace('kind = "reward_function"', 'kind = "code_tests"'),
            "code_tests.function is not a manifest",
        ),
        (
            lambda m: code_manifest().replace('task_type = "code"', 'task_type = "math"'),
            "code_tests verifier needs",
        ),
        (lambda m: m.replace("[verifier]", "[verifier"), "not valid TOML"),
        (
            lambda m: m.replace('function = "reward"', 'function = "os.system"'),
            "function: String should match",
        ),
    ],
)
def test_a_malformed_manifest_is_refused_by_field(tmp_path, change, expected):
    folder = write_pack(tmp_path / "p", manifest=change(manifest_text()))
    assert expected in refused(folder)


def test_the_signature_covers_every_file_and_names_its_key(tmp_path):
    folder = write_pack(tmp_path / "p")
    (folder / "verifier.py").write_text((folder / "verifier.py").read_text() + "\n# changed\n")
    assert "changed since they were signed" in refused(folder)
    other = Identity.from_seed(b"\x07" * 32)
    write_pack(folder, key=other, manifest=manifest_text(TEST_KEY.node_id))
    assert "but the manifest's author is" in refused(folder)
    (folder / "signature.json").unlink()
    assert "has no signature.json" in refused(folder)


def test_a_signature_made_for_something_else_does_not_verify(tmp_path):
    folder = write_pack(tmp_path / "p")
    digest = pack_digest(read_pack_files(folder, LIMITS))
    raw = TEST_KEY.sign_hex(bytes.fromhex(digest))  # the bare digest, without the pack domain tag
    document = {"author": TEST_KEY.node_id, "digest": digest, "signature": raw}
    (folder / "signature.json").write_text(json.dumps(document))
    assert "the signature is not the author's" in refused(folder)
    assert signed_message(digest).startswith(b"swarmrl-task-pack/1 ")
    (folder / "signature.json").write_text('{"author": 1}')
    assert "exactly author, digest, signature" in refused(folder)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([{"id": "a", "prompt": "q"}], "column 'answer' is missing"),
        (
            [{"id": "a", "prompt": "q", "answer": "1", "hint": "x"}],
            "column 'hint' is not among the verifier's",
        ),
        (
            [{"id": "a", "prompt": "q", "answer": "1"}, {"id": "a", "prompt": "r", "answer": "2"}],
            "'a' appears twice",
        ),
        ([{"id": "", "prompt": "q", "answer": "1"}], "'id' must be a printable string"),
        ([{"id": "a\nb", "prompt": "q", "answer": "1"}], "'id' must be a printable string"),
        ([{"id": "a", "prompt": "", "answer": "1"}], "column 'prompt' must be a non-empty string"),
        (
            [{"id": "a", "prompt": [{"role": "assistant", "content": "x"}], "answer": "1"}],
            "must end on a user turn",
        ),
        ([["not", "an", "object"]], "a row must be a JSON object"),
        ([], "the pack has no rows"),
    ],
)
def test_a_malformed_row_is_refused_by_line_and_column(tmp_path, rows, expected):
    message = refused(write_pack(tmp_path / "p", rows=rows, references=[]))
    assert expected in message and "prompts.jsonl" in message


def test_rows_that_are_not_json_or_not_text_are_refused(tmp_path):
    folder = write_pack(tmp_path / "p", references=[])
    (folder / "prompts.jsonl").write_bytes(b'{"id": "a", "prompt": "q", "answer": "1"}\n{"id": \n')
    resign(folder)
    assert "prompts.jsonl line 2: not valid JSON" in refused(folder)
    (folder / "prompts.jsonl").write_bytes(b'{"id": "a", "prompt": "\xff", "answer": "1"}\n')
    resign(folder)
    assert "line 1: not UTF-8 text" in refused(folder)
    (folder / "prompts.jsonl").write_bytes(b"[" * 100_000 + b"\n")
    resign(folder)
    assert "line 1: not valid JSON" in refused(folder)


def test_size_caps_are_the_operators(tmp_path):
    folder = write_pack(tmp_path / "p")
    assert "more than 2 rows" in refused(folder, PackLimitsConfig(max_rows=2))
    assert "over the cap of 256" in refused(folder, PackLimitsConfig(max_verifier_bytes=256))
    long_rows = [{"id": "a", "prompt": "x" * 40, "answer": "1"}]
    assert "a prompt of 40 characters, over 16" in refused(
        write_pack(tmp_path / "q", rows=long_rows, references=[]), PackLimitsConfig(max_prompt_chars=16)
    )
    assert "bytes, over the cap of 256" in refused(
        write_pack(tmp_path / "r", rows=[{"id": "a", "prompt": "x" * 300, "answer": "1"}], references=[]),
        PackLimitsConfig(max_row_bytes=256),
    )
    assert "over 1024 bytes together" in refused(folder, PackLimitsConfig(max_unpacked_bytes=1024))


@pytest.mark.parametrize(
    ("references", "expected"),
    [
        ([{"id": "zz", "completion": "1"}], "id 'zz' is not a row of the pack"),
        ([{"id": "r0", "completion": "1", "score": 1}], "exactly id and completion"),
        ([{"id": "r0", "completion": 5}], "completion must be a string"),
        ([{"id": "r0", "completion": "1"}] * 5, "more than 4 references for row 'r0'"),
    ],
)
def test_a_malformed_reference_is_refused(tmp_path, references, expected):
    assert expected in refused(write_pack(tmp_path / "p", references=references))


@pytest.mark.parametrize(
    ("verifier", "expected"),
    [
        (None, "the pack has no verifier.py"),
        ("def reward(:\n", "verifier.py line 1: invalid python"),
        ("def score(prompts, completions, **kw):\n    return []\n", "defines no function 'reward'"),
        ("x = " + "(" * 500 + ")" * 500 + "\n", "verifier.py"),
    ],
)
def test_a_verifier_that_cannot_be_loaded_is_refused_without_running_it(tmp_path, verifier, expected):
    assert expected in refused(write_pack(tmp_path / "p", verifier=verifier))


def code_manifest() -> str:
    text = manifest_text().replace('task_type = "math"', 'task_type = "code"')
    return text[: text.index("[verifier]")] + '[verifier]\nkind = "code_tests"\n'


def test_code_tests_are_data_only(tmp_path):
    row = {
        "id": "a",
        "prompt": "Print 1.",
        "verification_info": {"test_cases": [{"input": "", "output": "1"}]},
    }
    pack = load_pack(
        write_pack(tmp_path / "p", verifier=None, rows=[row], references=[], manifest=code_manifest()), LIMITS
    )
    assert pack.rows[0].tests.total == 1 and pack.verifier_source is None
    for key in ("test", "test_list", "test_setup_code", "test_imports"):
        hostile = {**row, "verification_info": {"test_cases": [], key: "import os; os.system('x')"}}
        folder = write_pack(
            tmp_path / key, verifier=None, rows=[hostile], references=[], manifest=code_manifest()
        )
        assert f"verification_info key {key!r} is refused" in refused(folder)
    folder = write_pack(tmp_path / "v", rows=[row], references=[], manifest=code_manifest())
    assert "a code_tests pack has no verifier of its own" in refused(folder)


def test_a_directory_holds_pack_files_only(tmp_path):
    folder = write_pack(tmp_path / "p")
    (folder / "notes.txt").write_text("x")
    assert "notes.txt: not a pack file" in refused(folder)
    (folder / "notes.txt").unlink()
    os.symlink("/etc/passwd", folder / "LICENSE")
    assert "LICENSE: a link" in refused(folder)
    (folder / "LICENSE").unlink()
    (folder / "README.md").mkdir()
    assert "README.md: a folder" in refused(folder)
    assert "no such pack" in refused(tmp_path / "missing")
    (tmp_path / "pack.zip").write_bytes(b"PK")
    assert "a .tar.gz / .tgz archive" in refused(tmp_path / "pack.zip")


def archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb") as compressed,
        tarfile.open(fileobj=compressed, mode="w") as tar,
    ):
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    path.write_bytes(buffer.getvalue())
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        ([(member("../manifest.toml"), b"x")], "a path outside the pack"),
        ([(member("/etc/manifest.toml"), b"x")], "a path outside the pack"),
        ([(member("p/../../manifest.toml"), b"x")], "a path outside the pack"),
        ([(member("manifest.toml", tarfile.SYMTYPE, "/etc/passwd"), b"")], "not a regular file"),
        ([(member("manifest.toml", tarfile.LNKTYPE, "prompts.jsonl"), b"")], "not a regular file"),
        ([(member("manifest.toml", tarfile.CHRTYPE), b"")], "not a regular file"),
        ([(member("p/q/manifest.toml"), b"x")], "a nested folder"),
        ([(member("a/manifest.toml"), b"x"), (member("b/prompts.jsonl"), b"x")], "a second top-level folder"),
        ([(member("evil.so"), b"x")], "not a pack file"),
        ([(member("manifest.toml"), b"x"), (member("./manifest.toml"), b"y")], "manifest.toml appears twice"),
        ([(member(f"README.md{i}"), b"") for i in range(1)], "not a pack file"),
    ],
)
def test_a_hostile_archive_is_refused_by_member(tmp_path, members, expected):
    assert expected in refused(archive(tmp_path / "x.tar.gz", members))


def test_decompression_bombs_and_oversized_archives_stop_at_the_caps(tmp_path):
    small = PackLimitsConfig(max_unpacked_bytes=1 << 20)
    bomb = tmp_path / "bomb.tar.gz"
    with gzip.open(bomb, "wb") as compressed:
        info = tarfile.TarInfo("prompts.jsonl")
        info.size = 16 << 20
        compressed.write(info.tobuf(format=tarfile.USTAR_FORMAT) + bytes(16 << 20))
    assert bomb.stat().st_size < 64 << 10
    assert "over 1048576 bytes together" in refused(bomb, small)
    endless = tmp_path / "endless.tar.gz"
    with gzip.open(endless, "wb") as compressed:
        for name in ("manifest.toml", "prompts.jsonl", "verifier.py", "LICENSE"):
            info = tarfile.TarInfo(name)
            info.size = 400 << 10
            compressed.write(info.tobuf(format=tarfile.USTAR_FORMAT) + bytes(400 << 10))
    assert "bytes together" in refused(endless, small)
    pax = io.BytesIO()  # a pax header tarfile reads whole before any member: the inflated stream stops it
    with gzip.GzipFile(fileobj=pax, mode="wb") as compressed:
        with tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo("manifest.toml")
            info.pax_headers, info.size = {"comment": "x" * (3 << 20)}, 1
            tar.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "pax.tar.gz").write_bytes(pax.getvalue())
    assert "inflates past the cap" in refused(tmp_path / "pax.tar.gz", small)
    big = tmp_path / "big.tar.gz"
    big.write_bytes(os.urandom(2048))
    assert "over the cap of 1024 for a pack archive" in refused(big, PackLimitsConfig(max_archive_bytes=1024))
    assert "not a readable .tar.gz archive" in refused(big)


def test_the_default_caps_are_in_the_run_config_and_documented():
    from swarmrl.configs import task_packs

    for model in (
        task_packs.CommunityTasksConfig,
        task_packs.AdmissionConfig,
        task_packs.PackLimitsConfig,
        task_packs.VerifierBudgetConfig,
        task_packs.AdmissionThresholdsConfig,
    ):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
    admission = TasksConfig().community.admission
    assert admission.limits.max_rows == 1000 and admission.verifier.memory_mb == 1024
    with pytest.raises(ValueError):
        TasksConfig.model_validate({"community": {"admission": {"limits": {"max_rowz": 5}}}})


def test_the_docs_manifest_and_rows_parse():
    import re

    from swarmrl.tasks.packs.manifest import parse_manifest
    from swarmrl.tasks.packs.rows import parse_rows

    page = (Path(__file__).resolve().parents[3] / "docs" / "task-packs.md").read_text()
    manifest_block, code_block = re.findall(r"```toml\n(.*?)```", page, flags=re.S)[:2]
    text_row, code_row = re.findall(r"```json\n(.*?)```", page, flags=re.S)[0].encode().splitlines()
    manifest = parse_manifest(manifest_block, "docs")
    assert (manifest.label, manifest.verifier.columns) == ("sort-letters@1.0.0", ["answer"])
    (row,) = parse_rows(text_row, manifest, LIMITS, "docs")
    assert row.task.verification_info == {"answer": "aelpp"}
    code = parse_manifest(code_manifest(), "code")
    assert 'kind = "code_tests"' in code_block
    (row,) = parse_rows(code_row, code, LIMITS, "docs")
    assert row.tests.stdio[0].output == "3\n"

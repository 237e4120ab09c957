"""A model folder carries the user's own tools its card names (their modules and option files),
so that a folder moved or copied elsewhere, without the originals, still rebuilds them for chat
and eval; a card written before folders carried them still reads."""

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest

from rstar2.agent.card import CARD_FILE, new_card, read_card, write_card
from rstar2.agent.card_files import ToolFiles, ToolFilesWarning
from rstar2.agent.prompt import PromptConfig
from rstar2.agent.tools import ToolContext, ToolSpec, open_tools
from rstar2.cli.chat import chat_rollout_config
from rstar2.cli.options import trained_card
from rstar2.eval.launch import rollout_config
from rstar2.eval.runner import EvalSettings

LOOKUP_SOURCE = '''
import json
from pathlib import Path

from rstar2.agent.tools import checked_arguments, function_schema


class Lookup:
    def __init__(self, path, name="lookup"):
        self.table = json.loads(Path(path).read_text())
        self.name = name
        self.schema = function_schema(name, "Look up a constant.", {"key": {"type": "string"}})

    async def call(self, arguments):
        return str(self.table[checked_arguments(self.schema, arguments)["key"]])
'''


@pytest.fixture
def forget_modules():
    """Drop modules a test imported from sys.modules, before a read that stands for a fresh
    process and after the test, so no other test sees them."""
    names: set[str] = set()

    def forget(*modules: str) -> None:
        names.update(modules)
        for loaded in [name for name in sys.modules if name.split(".")[0] in names]:
            del sys.modules[loaded]

    yield forget
    forget()


def card_with(*tools: ToolSpec):
    return new_card(PromptConfig(variant="short"), 24, 2, "test", tools=(ToolSpec(use="python"), *tools))


def lookup_answer(specs, key: str) -> str:
    """What the built tool named 'constants' answers for ``key``."""
    tools = open_tools([spec for spec in specs if spec.use != "python"], ToolContext())
    result = asyncio.run(tools.run("constants", {"key": key}))
    assert result.status == "ok", result.text
    return result.text


def test_a_moved_model_folder_rebuilds_its_tool_from_the_copies_it_carries(tmp_path, monkeypatch,
                                                                            forget_modules):
    source, data, away = tmp_path / "src", tmp_path / "work", tmp_path / "away"
    for folder in (source, data / "data", away):
        folder.mkdir(parents=True)
    (source / "carried_lookup.py").write_text(LOOKUP_SOURCE)
    (data / "data" / "constants.json").write_text(json.dumps({"c": 299792458}))
    (data / "constants").write_text("a file named like the tool, which is no path option")
    monkeypatch.syspath_prepend(str(source))
    monkeypatch.chdir(data)  # the option is relative to where the run trained
    forget_modules("carried_lookup")

    tool = ToolSpec(use="carried_lookup:Lookup", options={"path": "data/constants.json", "name": "constants"})
    write_card(tmp_path / "run" / "final", card_with(tool))
    written = (tmp_path / "run" / "final" / CARD_FILE).read_text()
    assert str(tmp_path) not in written  # nothing names the machine it was trained on
    stored = json.loads(written)
    assert stored["tools"][1] == {"use": "carried_lookup:Lookup",
                                  "options": {"path": "tools/files/constants.json", "name": "constants"}}
    assert stored["tool_files"] == {"modules": {"carried_lookup": "tools/carried_lookup.py"},
                                    "files": ["tools/files/constants.json"]}

    moved = Path(shutil.move(tmp_path / "run" / "final", away / "final"))
    shutil.rmtree(source)
    shutil.rmtree(data / "data")
    monkeypatch.chdir(away)
    card = trained_card(str(moved))  # as chat and eval read it
    assert card.tools[1].options["path"] == str(moved / "tools" / "files" / "constants.json")
    assert Path(sys.modules["carried_lookup"].__file__).parent == moved / "tools"
    assert lookup_answer(chat_rollout_config(card, True, None, None, None, 0.0).tools, "c") == "299792458"
    assert lookup_answer(rollout_config(EvalSettings(benchmarks=["gsm8k"], tool_specs=card.tools)).tools,
                         "c") == "299792458"


def test_a_tool_from_a_package_carries_the_package(tmp_path, monkeypatch, forget_modules):
    package = tmp_path / "src" / "carried_pkg"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("ANSWER = 42\n")
    (package / "data" / "table.json").write_text(json.dumps({"answer": 42}))
    (package / "tools.py").write_text(
        LOOKUP_SOURCE + "\nfrom .helpers import ANSWER\n\n\n"
        "def lookup(name):\n    return Lookup(Path(__file__).parent / 'data' / 'table.json', name)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    forget_modules("carried_pkg")

    tool = ToolSpec(use="carried_pkg.tools:lookup", options={"name": "constants"})
    write_card(tmp_path / "final", card_with(tool))
    assert read_card(str(tmp_path / "final")).tool_files.modules == {
        "carried_pkg": str(tmp_path / "final" / "tools" / "carried_pkg")}

    moved = Path(shutil.move(tmp_path / "final", tmp_path / "elsewhere"))
    shutil.rmtree(tmp_path / "src")
    forget_modules("carried_pkg")  # a new process: the package was imported to find the module
    card = trained_card(str(moved))
    assert lookup_answer(card.tools, "answer") == "42"
    assert Path(sys.modules["carried_pkg.helpers"].__file__) == moved / "tools" / "carried_pkg" / "helpers.py"


def test_a_card_written_before_folders_carried_tools_still_reads(tmp_path):
    write_card(tmp_path, card_with())
    older = json.loads((tmp_path / CARD_FILE).read_text())
    del older["tool_files"]
    older["tools"] = [{"use": "tests.agent.example_tools:Lookup", "options": {"path": "/srv/constants.json"}}]
    (tmp_path / CARD_FILE).write_text(json.dumps(older))
    card = read_card(str(tmp_path))
    assert card.tools == (ToolSpec(use="tests.agent.example_tools:Lookup",
                                   options={"path": "/srv/constants.json"}),)
    assert card.tool_files == ToolFiles()


def test_a_module_the_folder_cannot_carry_is_named_in_a_warning(tmp_path):
    (tmp_path / "absent").mkdir()
    (tmp_path / "installed").mkdir()
    absent = ToolSpec(use="nowhere_to_be_found.tools:Tool", options={"path": "data/none.json"})
    with pytest.warns(ToolFilesWarning, match="nowhere_to_be_found.tools cannot be found here, .* must be "
                                              "installed wherever the model is used"):
        write_card(tmp_path / "absent", card_with(absent))
    assert read_card(str(tmp_path / "absent")).tools[1] == absent  # the card names it as before
    assert not (tmp_path / "absent" / "tools").exists()

    installed = ToolSpec(use="pydantic.main:BaseModel")
    with pytest.warns(ToolFilesWarning, match="pydantic is an installed package"):
        write_card(tmp_path / "installed", card_with(installed))
    assert read_card(str(tmp_path / "installed")).tool_files == ToolFiles()


def test_a_missing_copy_is_said_and_the_module_imported_as_installed(tmp_path, monkeypatch, forget_modules):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "carried_echo.py").write_text(LOOKUP_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    forget_modules("carried_echo")
    write_card(tmp_path / "final", card_with(ToolSpec(use="carried_echo:Lookup")))
    shutil.rmtree(tmp_path / "final" / "tools")
    with pytest.warns(ToolFilesWarning, match="copy .* is missing; importing carried_echo as installed"):
        trained_card(str(tmp_path / "final"))
    assert "carried_echo" not in sys.modules  # left to the import that builds the tool

"""`--help` prints what the help strings say: Typer renders them as Rich markup, where a bracketed word such as
"[draft]" is a style tag and vanishes unless escaped ("\\[draft]")."""

import re

import pytest
import typer.main
import typer.rich_utils
from rich.text import Text
from typer.testing import CliRunner

from vista_dspy.cli import app

WIDTH = 2000  # wide enough that no help text wraps inside its table cell


def commands(command, path=()):
    """Every command and subcommand of a Click/Typer command tree, with the argv that reaches it."""
    yield list(path), command
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        yield from commands(sub, (*path, name))


def normalised(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def meant(help_text: str) -> str:
    """What an author means a help string to print: the text with Rich's escapes undone, nothing else taken out."""
    return normalised(re.sub(r"\\(\[)", r"\1", help_text))


def helps(command) -> list[tuple[str, str]]:
    """(what, text) for the command's docstring paragraphs and every parameter's help."""
    found = [(f"docstring paragraph {i}", p) for i, p in enumerate((command.help or "").split("\n\n")) if p.strip()]
    found += [(f"--{param.name}", param.help) for param in command.params if getattr(param, "help", None)]
    return found


COMMANDS = list(commands(typer.main.get_command(app)))


def test_the_tree_is_walked():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"", "evaluate", "compile", "benchmark", "pairs", "serve", "models"} <= names


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) or "vista" for p, _ in COMMANDS])
def test_help_prints_every_help_text_as_written(path, command, monkeypatch):
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", WIDTH)
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)})
    assert result.exit_code == 0, result.output
    shown = normalised(result.output)
    missing = [f"{what}: {meant(text)!r}" for what, text in helps(command) if meant(text) not in shown]
    assert not missing, "--help does not print:\n" + "\n".join(missing)


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) or "vista" for p, _ in COMMANDS])
def test_no_help_text_holds_unescaped_markup(path, command):
    """Independent of rendering: Rich would swallow a bracketed word that is not escaped."""
    swallowed = [what for what, text in helps(command) if normalised(Text.from_markup(text).plain) != meant(text)]
    assert not swallowed, f"escape '[' as '\\[' in the help of: {swallowed}"


def test_the_checks_see_a_swallowed_word():
    assert meant("the \\[draft] extra") == "the [draft] extra"
    assert normalised(Text.from_markup("the [draft] extra").plain) != meant("the [draft] extra")
    assert normalised(Text.from_markup("the \\[draft] extra").plain) == meant("the \\[draft] extra")


def test_vista_version_prints_the_installed_package_s_version():
    from importlib import metadata

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"vista-dspy {metadata.version('vista-dspy')}\n"

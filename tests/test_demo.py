"""`python -m memlane demo`: a real pydantic-ai agent conversation on memlane, offline."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from memlane.__main__ import main
from memlane.demo import DEMO_BUDGET, DEMO_SUMMARY_TOKENS, run_demo


def _demo(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["demo", *argv])
    return code, capsys.readouterr().out


def _run_module(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memlane", "demo", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(autouse=True)
def _no_provider_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


class TestOfflineDemo:
    """Without a model the demo runs a scripted conversation and shows memory at work."""

    def test_a_conversation_with_tools_trimming_summary_and_facts(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        code, out = _demo(capsys, "--db", str(tmp_path / "m.sqlite3"), "--turns", "8")
        assert code == 0
        assert "offline scripted model (FunctionModel)" in out
        assert "tool:  get_weather(city='Lisbon') -> 'sunny, 22°C, light Atlantic breeze'" in out
        assert "tool:  remember(key='name', value='Ada')" in out
        history = [int(t) for t in re.findall(rf"(\d+)/{DEMO_BUDGET} tokens", out)]
        assert len(history) == 8
        assert max(history) <= DEMO_BUDGET
        assert "folded into the summary" in out
        assert "summary rolled" in out
        summaries = [int(t) for t in re.findall(r"summary rolled \((\d+) tokens\)", out)]
        assert summaries
        assert max(summaries) <= DEMO_SUMMARY_TOKENS
        assert "facts: name=Ada; trip=Lisbon, a week in May; diet=vegetarian" in out
        # The recall turn is answered from what the model was sent: facts and summary.
        assert "agent: From my notes: name: Ada;" in out
        assert "Earlier we covered: Hi! I'm Ada" in out
        assert "identical to the one in memory" in out

    def test_the_default_database(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        code, out = _demo(capsys, "--turns", "1")
        assert code == 0
        assert "SQLite .memlane/memory.sqlite3" in out
        assert (tmp_path / ".memlane" / "memory.sqlite3").is_file()

    @pytest.mark.parametrize("model", ["openai:gpt-4o-mini", "nope:nothing"])
    def test_an_explicit_model_that_cannot_be_used_is_an_error(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path, model: str
    ) -> None:
        code = main(["demo", "--db", str(tmp_path / "m.sqlite3"), "--model", model])
        out, err = capsys.readouterr()
        assert code == 1
        assert out == ""
        assert f"the model {model!r} cannot be used here" in err
        assert "memlane[llm]" in err
        assert not (tmp_path / "m.sqlite3").exists()

    def test_a_model_string_that_resolves_is_used(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        code, out = _demo(
            capsys, "--db", str(tmp_path / "m.sqlite3"), "--model", "test", "--turns", "2"
        )
        assert code == 0
        assert "model:   test (summaries by the same model)" in out
        assert "offline scripted" not in out
        assert "[turn  2]" in out

    def test_bad_arguments(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        with pytest.raises(SystemExit) as usage:
            main(["demo", "--turns", "0"])
        assert usage.value.code == 2
        assert "must be positive" in capsys.readouterr().err
        assert run_demo(db=str(tmp_path / "m.sqlite3"), turns=0) == 2
        assert main(["demo", "--db", str(tmp_path / "m.sqlite3"), "--resume", "nope"]) == 1
        assert "no conversation 'nope'" in capsys.readouterr().err

    def test_a_directory_as_the_database_is_an_error(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        assert main(["demo", "--db", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("memlane: error: --db ")
        assert "is a directory" in err


class TestResumeAfterARestart:
    """--resume continues a conversation in a new process with the identical history."""

    def test_resume(self, tmp_path: Path) -> None:
        first = _run_module(tmp_path, "--turns", "6")
        assert first.returncode == 0, first.stderr
        [cid] = re.findall(r"--resume ([0-9a-f]+)", first.stdout)
        second = _run_module(tmp_path, "--resume", cid, "--turns", "3")
        assert second.returncode == 0, second.stderr
        assert f"resumed: conversation {cid} after 6 turns" in second.stdout
        assert "identical to the end of the last session" in second.stdout
        assert "[turn  7] you:   How do I get from the airport to the city?" in second.stdout
        assert "[turn  9]" in second.stdout
        assert "[turn 10]" not in second.stdout
        # Facts saved in the first process reach the model in the second.
        assert (
            "agent: From my notes: name: Ada; trip: Lisbon, a week in May; diet: vegetarian"
            in second.stdout
        )


class TestEntryPoints:
    """The console script and `python -m memlane` reach the same command; the demo is callable."""

    def test_the_console_script_is_main(self) -> None:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        target = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["scripts"]
        module, _, name = target["memlane"].partition(":")
        assert getattr(importlib.import_module(module), name) is main

    def test_run_demo_without_the_command_line(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        assert run_demo(db=str(tmp_path / "m.sqlite3"), turns=1) == 0
        assert "[turn  1] you:   Hi! I'm Ada" in capsys.readouterr().out

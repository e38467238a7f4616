"""Every ```python block of README.md runs, as written, offline, and runs again after itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, int, str]]:
    """(section heading, line number, code) of every python block."""
    text = README.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start()) + 2
        headings = re.findall(r"^## (.+)$", text[: match.start()], re.MULTILINE)
        found.append((headings[-1] if headings else "top", line, match.group(1)))
    return found


BLOCKS = _blocks()


@pytest.mark.parametrize(
    "code", [b[2] for b in BLOCKS], ids=[f"{b[0]}:line{b[1]}".replace(" ", "-") for b in BLOCKS]
)
def test_block_runs_twice(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A README example runs, then runs again in the same directory: readers rerun examples.

    Each run gets a fresh namespace; the working directory starts empty and keeps whatever
    the first run left, so an example that writes to a fixed path fails the second time.
    """
    monkeypatch.chdir(tmp_path)
    compiled = compile(code, str(README), "exec")
    for _ in range(2):
        # exec is the point: the README's own text is the code under test.
        exec(compiled, {"__name__": "__readme__"})  # noqa: S102


def test_the_agent_examples_are_all_there() -> None:
    """The agent section shows the agent, history capability, summaries, delegation, store."""
    agents = "\n".join(code for section, _, code in BLOCKS if section == "Agents with memory")
    for name in (
        "MemoryAgent(",
        "memory_history(",
        "LLMSummarizer.from_config(",
        "DelegationRouter(",
        "MemlaneConversationStore(",
    ):
        assert name in agents


def test_the_quick_start_runs_the_demo() -> None:
    """The quick start's first command installs memlane and runs the agent demo."""
    text = README.read_text(encoding="utf-8")
    quick_start = text.split("## Quick start", 1)[1]
    first_command = re.search(r"```bash\n(.*?)\n", quick_start)
    assert first_command is not None
    assert first_command.group(1) == "pip install . && python -m memlane demo"

"""Shell completion: `cnbrain completion bash|zsh` prints a script the shell accepts, and the
bash one completes commands, actions, options and their choices, and file names where a
command takes a file."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BASH_COMPLETE = r"""
source "$1"
line="$2"
read -ra COMP_WORDS <<< "$line"
[[ "$line" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="$line"
COMP_POINT=${#line}
COMPREPLY=()
function=$(complete -p cnbrain | sed -E 's/.*-F ([^ ]+).*/\1/')
"$function" cnbrain "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""
"""Completes the line `$2` as bash would at its end, with the script `$1`; prints the
candidates, one a line."""


def _script(shell: str, path: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "cnbrain.cli.main", "completion", shell],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stderr == ""
    path.write_text(done.stdout)
    return path


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _script("bash", tmp_path_factory.mktemp("completion") / "cnbrain.bash")


def _complete(script: Path, line: str, cwd: Path | None = None) -> list[str]:
    done = subprocess.run(
        ["bash", "-c", BASH_COMPLETE, "complete", str(script), line],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=cwd,
    )
    return [word for word in done.stdout.splitlines() if word]


def test_the_bash_script_is_valid_bash(bash_script: Path) -> None:
    checked = subprocess.run(["bash", "-n", str(bash_script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("cnbrain req", ["requests"]),
        ("cnbrain requests ", ["list", "show", "cancel", "events", "why"]),
        ("cnbrain tenants ", ["list", "create", "fair-share"]),
        ("cnbrain keys ", ["create", "list", "revoke"]),
        ("cnbrain si", ["simulate", "sites"]),
        ("cnbrain requests list -o ", ["json", "wide"]),
        ("cnbrain links --layer ", ["access", "province", "backbone"]),
        ("cnbrain completion ", ["bash", "zsh", "tcsh", "fish"]),
    ],
)
def test_bash_completes_commands_actions_and_choices(
    bash_script: Path, line: str, offered: list[str]
) -> None:
    assert sorted(_complete(bash_script, line)) == sorted(offered)


def test_bash_completes_options_and_file_names(bash_script: Path, tmp_path: Path) -> None:
    options = _complete(bash_script, "cnbrain events req-1 --")
    assert {"--follow", "--interval", "--output", "--url", "--token"} <= set(options)
    (tmp_path / "job.json").write_text("{}")
    assert _complete(bash_script, "cnbrain quote jo", cwd=tmp_path) == ["job.json"]


def test_the_zsh_script_is_valid_zsh(tmp_path: Path) -> None:
    zsh = shutil.which("zsh")
    assert zsh is not None, "zsh is missing: scripts/tools.sh installs it"
    script = _script("zsh", tmp_path / "_cnbrain")
    checked = subprocess.run([zsh, "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    text = script.read_text()
    assert text.startswith("#compdef cnbrain")
    for word in ("requests", "sites", "links", "quote", "usage", "events", "--follow"):
        assert word in text

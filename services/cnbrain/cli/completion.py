"""`cnbrain completion SHELL`: the shell completion script of the whole command tree,
generated from the argparse parser itself (shtab), so it always matches the commands: every
command, action and option, and the choices of those that have some. The script completes
without running Python at each Tab.

    source <(cnbrain completion bash)                 # bash, in ~/.bashrc
    cnbrain completion zsh > "${fpath[1]}/_cnbrain"   # zsh, then compinit
"""

import argparse
import functools
from typing import Final

import shtab

SHELLS: Final = ("bash", "zsh", "tcsh", "fish")


def add_completion_command(
    sub: "argparse._SubParsersAction[argparse.ArgumentParser]", root: argparse.ArgumentParser
) -> None:
    """Register `completion` under `sub`; its script completes `root` (the whole tree)."""
    completion = sub.add_parser(
        "completion",
        help="print the shell completion script (bash: source <(cnbrain completion bash))",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    completion.add_argument("shell", choices=SHELLS)
    completion.set_defaults(run=functools.partial(print_script, root))


def completes_files(action: argparse.Action) -> argparse.Action:
    """`action`, its value completed as a file name by the completion script."""
    action.complete = shtab.FILE  # type: ignore[attr-defined]
    return action


def script(root: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of `root` for `shell`."""
    return shtab.complete(root, shell=shell)


def print_script(root: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    print(script(root, args.shell), end="")
    return 0

"""`alchemist completion bash|zsh|fish`: print the script that makes the shell complete
`alchemist` commands, flags, run ids, stack names and job spec files.

The script is argcomplete's: on TAB the shell runs `alchemist` with `_ARGCOMPLETE` set, and
`cli.main` answers from the parser (the completers of RUN and --stack read names only).
"""

from __future__ import annotations

import argparse

from alchemist_jobs.commands import command

SHELLS = ("bash", "zsh", "fish")
PROG = "alchemist"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "completion",
        "print the shell completion script to source at shell start",
        [
            "alchemist completion bash > ~/.local/share/bash-completion/completions/alchemist",
            'eval "$(alchemist completion bash)"    # in ~/.bashrc',
            'eval "$(alchemist completion zsh)"     # in ~/.zshrc, after compinit',
            "alchemist completion fish > ~/.config/fish/completions/alchemist.fish",
        ],
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "shell", metavar="SHELL", choices=SHELLS, help=f"the shell to complete in: {', '.join(SHELLS)}"
    )
    p.set_defaults(func=cmd_completion)


def cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete

    print(argcomplete.shellcode([PROG], shell=args.shell), end="")
    return 0

#!/usr/bin/env python3
"""docs/cli.md's synopsis cannot drift from the CLI: every subcommand and
every option that `tensorhub ... --help` lists is in the synopsis, under its
subcommand, and the synopsis names nothing the CLI does not take.

Usage: test_cli_reference.py PATH/TO/tensorhub PATH/TO/docs/cli.md
"""
import re
import subprocess
import sys

OPTION = re.compile(r"--[a-z0-9][a-z0-9-]*")


def help_text(binary, *words):
    out = subprocess.run([binary, *words, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, (words, out.stderr)
    return out.stdout


def section(text, title):
    """The lines of a --help section ("Options:", "Subcommands:")."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.strip() == title:
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break
        if inside and line.strip():
            lines.append(line)
    return lines


def cli_commands(binary):
    """{"peer": {"--listen", ...}, "manifest create": {...}, ...} from --help."""
    commands = {}

    def walk(words):
        text = help_text(binary, *words)
        subcommands = [line.split()[0] for line in section(text, "Subcommands:")]
        if subcommands:
            for sub in subcommands:
                walk(words + [sub])
            return
        options = set()
        for line in section(text, "Options:"):
            names = line.split()[0]  # "-h,--help" or "--model"
            options.update(n for n in OPTION.findall(names) if n != "--help")
        commands[" ".join(words)] = options

    for sub in [line.split()[0] for line in section(help_text(binary), "Subcommands:")]:
        walk([sub])
    return commands


def documented_commands(docs):
    """The synopsis block (the first ``` block): a line "tensorhub WORDS ..."
    starts a command, lines indented under it continue it. A command may be
    written several times (two forms of fetch): their options add up."""
    with open(docs) as f:
        text = f.read()
    block = text.split("```", 2)[1]
    commands, current = {}, None
    for line in block.splitlines():
        if line.startswith("tensorhub "):
            words = []
            for word in line.split()[1:]:
                if not re.fullmatch(r"[a-z][a-z0-9-]*", word):
                    break
                words.append(word)
            current = " ".join(words)
            commands.setdefault(current, set())
        elif current is None or not line.startswith(" "):
            continue
        commands[current].update(OPTION.findall(line.split("  ")[0] if not line.startswith(" ") else line))
    return commands


def main():
    binary, docs = sys.argv[1], sys.argv[2]
    cli = cli_commands(binary)
    documented = documented_commands(docs)
    problems = []
    for command, options in sorted(cli.items()):
        if command not in documented:
            problems.append(f"`tensorhub {command}` is not in the synopsis of {docs}")
            continue
        for option in sorted(options - documented[command]):
            problems.append(f"`tensorhub {command}` takes {option}, which the synopsis does not name")
        for option in sorted(documented[command] - options):
            problems.append(f"the synopsis gives `tensorhub {command}` {option}, which it does not take")
    for command in sorted(set(documented) - set(cli)):
        problems.append(f"the synopsis names `tensorhub {command}`, which the CLI does not have")
    for p in problems:
        print(p)
    assert not problems, f"{len(problems)} difference(s) between the CLI and {docs}"
    print(f"{len(cli)} commands and {sum(len(o) for o in cli.values())} options: the synopsis matches the CLI")


if __name__ == "__main__":
    main()

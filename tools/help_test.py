#!/usr/bin/python3
"""Every binary's --help and --version (issue 19).

For each binary given: `--help` exits 0 and shows grouped flags with their
defaults; every flag that `--helpfull` attributes to one of moeserve's own
source folders is listed by `--help` (so a new flag cannot be left out);
`--version` exits 0 and names the version and the git revision.
Usage: help_test.py BINARY...
"""
import re
import subprocess
import sys

OUR_FOLDERS = ("server/", "tools/", "engine/", "kernels/", "metrics/",
               "policies/", "base/")


def run(args):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


def our_flags(helpfull):
    """Flag names under "Flags from <our file>:" headings of --helpfull."""
    flags, ours = set(), False
    for line in helpfull.splitlines():
        heading = re.match(r"\s*Flags from (\S+):$", line)
        if heading:
            ours = heading.group(1).lstrip("./").startswith(OUR_FOLDERS)
            continue
        flag = re.match(r"\s{4}--([a-z0-9_]+) ", line)
        if ours and flag:
            flags.add(flag.group(1))
    return flags


def check(binary):
    name = binary.rsplit("/", 1)[-1]
    rc, text = run([binary, "--help"])
    assert rc == 0, f"{name} --help exited {rc}:\n{text}"
    assert "No flags matched" not in text, text
    groups = re.findall(r"^([A-Z][^\n]*):$", text, re.M)
    assert len(groups) >= 2, f"{name} --help has no flag groups:\n{text}"
    listed = set(re.findall(r"^  --([a-z0-9_]+) \(default: ", text, re.M))
    assert "(not in this build)" not in text, f"{name}: stale group entry:\n{text}"
    rc, helpfull = run([binary, "--helpfull"])
    ours = our_flags(helpfull)
    assert ours, f"{name} --helpfull shows none of our flags:\n{helpfull}"
    missing = sorted(ours - listed)
    assert not missing, f"{name} --help does not list {missing}"
    rc, version = run([binary, "--version"])
    assert rc == 0, f"{name} --version exited {rc}"
    first = version.splitlines()[0]
    assert re.match(rf"{name} \d+\.\d+\.\d+ \(git ([0-9a-f]{{7,}}(-dirty)?|unknown), ",
                    first), first
    print(f"{name}: {len(listed)} flags in {len(groups)} groups; {first}")


def main():
    for binary in sys.argv[1:]:
        check(binary)
    print("help: OK")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes every ```cpp block of the given Markdown files as a C++ translation unit.

usage: extract_snippets.py OUT_DIR LIST_FILE FILE.md...

A block is a whole program unless the line before its fence (blank lines aside) is a marker:
  <!-- snippet: fragment -->      statements: compiled inside a function after
                                  snippet_context.h (cohort, libtorch and the reader's names:
                                  model, group, loader, ...); its #include lines go on top
  <!-- snippet: declarations -->  declarations of cohort's API: compiled inside namespace cohort
  <!-- snippet: skip REASON -->   not compiled (say why)
A marker may add `needs=mpi` or `needs=nccl`: compiled only in a build with that backend.
#line directives point compiler errors at the Markdown file and line.
The fragments of one page (with the same `needs`) share one translation unit, each in a function
of its own: a unit costs about 10 s before its first line (loading the precompiled libtorch), so
one per block made the snippets a quarter of the build's CPU time. Programs and declarations
keep a unit each (their names would clash).
LIST_FILE gets one line per translation unit: "<path>|<needs>".
"""
import os
import re
import sys

MARKER = re.compile(r"^<!--\s*snippet:\s*(\w+)(.*?)-->\s*$")
KINDS = ("program", "fragment", "declarations", "skip")


def blocks(path):
    """Yields (first line number of the code, lines, kind, needs) for each ```cpp block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    last_text = ""  # the last non-blank line outside code blocks
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("```"):
            fence_is_cpp = line.strip() == "```cpp"
            if line.strip() in ("```c++", "```cc", "```cxx", "```C++"):
                sys.exit(f"{path}:{i + 1}: write C++ blocks as ```cpp so that they are compiled")
            start = i + 1
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                i += 1
            if fence_is_cpp:
                kind, needs = "program", ""
                m = MARKER.match(last_text.strip())
                if m:
                    kind = m.group(1)
                    if kind not in KINDS:
                        sys.exit(f"{path}:{start - 1}: unknown snippet kind '{kind}' "
                                 f"(use one of {', '.join(KINDS)})")
                    n = re.search(r"needs=(\w+)", m.group(2))
                    needs = n.group(1) if n else ""
                    if kind == "skip" and not m.group(2).strip():
                        sys.exit(f"{path}:{start - 1}: a skipped snippet must say why")
                yield start + 1, lines[start:i], kind, needs
            last_text = ""
        elif line.strip():
            last_text = line
        i += 1


DEFINES = {"mpi": "#define COHORT_SNIPPET_MPI 1\n", "nccl": "#define COHORT_SNIPPET_NCCL 1\n"}


def split_includes(md, first_line, code):
    """The block's #include lines (with #line directives) and its other lines."""
    includes, body = "", []
    for offset, line in enumerate(code):
        if line.lstrip().startswith("#include"):
            includes += f'#line {first_line + offset} "{md}"\n{line}\n'
            body.append("")
        else:
            body.append(line)
    return includes, body


def program_unit(md, first_line, code):
    return f'#line {first_line} "{md}"\n' + "\n".join(code) + "\n"


def declarations_unit(md, first_line, code, needs):
    includes, body = split_includes(md, first_line, code)
    return (DEFINES.get(needs, "") + '#include "snippet_context.h"\n' + includes +
            f'namespace cohort {{\n#line {first_line} "{md}"\n' + "\n".join(body) + "\n}\n")


def fragments_unit(md, fragments, needs):
    """One unit for the fragments [(number, first line, code)] of one page."""
    includes, functions = "", ""
    for number, first_line, code in fragments:
        block_includes, body = split_includes(md, first_line, code)
        includes += block_includes
        functions += (f"[[maybe_unused]] static void snippet_{number}() {{\n"
                      f'#line {first_line} "{md}"\n' + "\n".join(body) + "\n}\n")
    return DEFINES.get(needs, "") + '#include "snippet_context.h"\n' + includes + functions


def write_if_changed(path, text):
    """Rewrites only on change, so that the build recompiles only what changed."""
    if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main():
    out_dir, list_file, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    units = {}  # path -> (text, needs)
    for md in sources:
        stem = os.path.splitext(os.path.basename(md))[0]
        md_path = os.path.abspath(md)
        fragments = {}  # needs -> [(number, first line, code)]
        for number, (first_line, code, kind, needs) in enumerate(blocks(md), start=1):
            path = os.path.join(out_dir, f"{stem}_{number}.cc")
            if kind == "program":
                units[path] = (program_unit(md_path, first_line, code), needs)
            elif kind == "declarations":
                units[path] = (declarations_unit(md_path, first_line, code, needs), needs)
            elif kind == "fragment":
                fragments.setdefault(needs, []).append((number, first_line, code))
        for needs, blocks_of_page in fragments.items():
            name = f"{stem}_fragments{'_' + needs if needs else ''}.cc"
            units[os.path.join(out_dir, name)] = (fragments_unit(md_path, blocks_of_page, needs),
                                                  needs)
    if not units:
        sys.exit("no ```cpp blocks found: wrong files?")
    for path, (text, _) in units.items():
        write_if_changed(path, text)
    for name in os.listdir(out_dir):  # units of blocks that are gone or regrouped
        path = os.path.join(out_dir, name)
        if name.endswith(".cc") and path not in units:
            os.remove(path)
    with open(list_file, "w", encoding="utf-8") as f:
        f.write("".join(f"{path}|{needs}\n" for path, (_, needs) in units.items()))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tests/docs/check_snippets.py — every code snippet of README.md and docs/*.md, compiled or run, so
that none can drift from the code it shows.

  check_snippets.py SOURCE_DIR --cc CC --lib LIB.so [--lib LIB.so ...] [--include DIR ...] [--work DIR]

C (```c blocks), each compiled with -std=c11 -Wall -Wextra -Werror and linked with the --lib libraries:
  - a snippet with `int main(` is a whole program, compiled as written (its own includes) and run (exit 0);
  - a snippet that defines functions at file scope is a translation unit, compiled as written and
    linked with an empty main (every function it calls must exist in the libraries);
  - anything else is a fragment: the body of a function, after <dmm/dmm.h> (and dmm_ort.h), stdint.h,
    stdio.h and the declarations that the comment `<!-- snippet: DECLARATIONS -->` on the line before
    the block gives (the names the fragment uses but does not declare; invisible where the markdown is
    rendered), linked like a translation unit; the unused-variable warnings are off (a fragment shows
    calls, not whole programs).
Python (```python blocks): compiled (compile(), as the interpreter would), and every `dmm.MODULE.NAME`
  and `from dmm.MODULE import NAME` must be defined at the top level of python/dmm/MODULE.py (or be a
  submodule), so a renamed call fails here.
Blocks of the languages in NOT_CHECKED are commands or data for a reader, not checked; a block of any
other language (```C, ```py, a typo), a fence indented or spelt with tildes, and an unclosed fence fail,
so that no snippet is skipped by accident.

Exit 0 when all pass, 1 with one line per failing snippet (file, line, what the compiler said).
"""
import argparse
import ast
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^\s*(```|~~~)\s*([^\s`]*)(.*)$")
CHECKED = ("c", "python")
NOT_CHECKED = ("sh", "bash", "console", "text", "cmake", "json", "toml", "ini", "")
CONTEXT = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")


def snippets(path, rel, problems):
    """(language, first line number, text, context declarations) of each fenced block; what is wrong
    with a fence goes to `problems`."""
    out, lang, start, body, context, last_comment = [], None, 0, [], "", ""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line)
            if lang is None:
                if m:
                    tag = m.group(2)
                    if m.group(1) != "```" or line[0].isspace() or m.group(3).strip():
                        problems.append(f"{rel}:{n}: a fence this checker does not read (write ```{tag} at the "
                                        f"start of the line, with nothing after the language)")
                    elif tag not in CHECKED and tag not in NOT_CHECKED:
                        problems.append(f"{rel}:{n}: a block in '{tag}', which is neither checked "
                                        f"({', '.join(CHECKED)}) nor known to need no check")
                    lang, start, body, context = tag, n + 1, [], last_comment
                c = CONTEXT.match(line)
                last_comment = c.group(1) if c else ""
            elif m and not m.group(2) and not m.group(3).strip():
                out.append((lang, start, "".join(body), context))
                lang = None
            else:
                body.append(line)
    if lang is not None:
        problems.append(f"{rel}:{start - 1}: a fence that is never closed")
    return out


def defines_functions(text):
    return re.search(r"^[A-Za-z_][\w \*]*\b\w+\s*\([^;]*\)\s*\{", text, re.M) is not None


def check_c(args, where, text, context, work, idx):
    src = os.path.join(work, f"snippet{idx}.c")
    flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE"]
    line = '#line %d "%s"\n' % (where[1], where[0])
    whole = "int main(" in text
    if whole:
        code = line + text
    elif defines_functions(text):
        code = line + text + "\nint main(void);\nint main(void) { return 0; }\n"
    else:
        head = "#include <dmm/dmm.h>\n#include <stdint.h>\n#include <stdio.h>\n"
        for d in args.include:
            if os.path.exists(os.path.join(d, "dmm_ort.h")):
                head += "#include <dmm_ort.h>\ntypedef struct OrtApi OrtApi;\n"
        flags += ["-Wno-unused-variable", "-Wno-unused-but-set-variable", "-Wno-unused-parameter"]
        code = (head + "void snippet(void);\nvoid snippet(void) {\n" + context + "\n" + line + text + "}\n"
                "int main(void);\nint main(void) { return 0; }\n")
    with open(src, "w", encoding="utf-8") as f:
        f.write(code)
    inc = [f"-I{d}" for d in args.include]
    exe = os.path.join(work, f"snippet{idx}")
    libs = [os.path.abspath(lib) for lib in args.lib]
    rpath = [f"-Wl,-rpath,{os.path.dirname(lib)}" for lib in libs]
    cmd = [args.cc, *flags, *inc, src, "-o", exe, *libs, *rpath]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return "does not compile:\n" + (r.stderr.strip() or r.stdout.strip())
    if whole:
        r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return f"ran and exited {r.returncode}:\n{r.stdout}{r.stderr}"
    return None


def module_names(pkg, module):
    """The top-level names of python/dmm/MODULE.py (and its submodules), or None if there is none."""
    path = os.path.join(pkg, module + ".py")
    if not os.path.exists(path):
        path = os.path.join(pkg, module, "__init__.py")
    if not os.path.exists(path):
        return None
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def check_python(args, where, text):
    try:
        compile(text, f"{where[0]}:{where[1]}", "exec")
        tree = ast.parse(text)
    except SyntaxError as e:
        return f"is not valid Python: {e}"
    pkg = os.path.join(args.source, "python", "dmm")
    for node in ast.walk(tree):
        # dmm.MODULE.NAME
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "dmm"):
            module, name = node.value.attr, node.attr
            names = module_names(pkg, module)
            if names is None:
                return f"uses dmm.{module}, which python/dmm does not have"
            if name not in names and not os.path.exists(os.path.join(pkg, module, name + ".py")):
                return f"uses dmm.{module}.{name}, which python/dmm/{module} does not define"
        # from dmm.MODULE import NAME
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dmm."):
            module = node.module.split(".", 1)[1]
            names = module_names(pkg, module.replace(".", "/"))
            if names is None:
                return f"imports {node.module}, which python/dmm does not have"
            for a in node.names:
                if a.name not in names:
                    return f"imports {a.name} from {node.module}, which does not define it"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("--cc", required=True)
    ap.add_argument("--lib", action="append", required=True)
    ap.add_argument("--include", action="append", default=[])
    ap.add_argument("--work")
    args = ap.parse_args()
    pages = [os.path.join(args.source, "README.md")]
    docs = os.path.join(args.source, "docs")
    pages += sorted(os.path.join(docs, p) for p in os.listdir(docs) if p.endswith(".md"))
    work = args.work or tempfile.mkdtemp(prefix="dmm-snippets-")
    os.makedirs(work, exist_ok=True)
    failed, counts, idx = [], {"c": 0, "python": 0}, 0
    for page in pages:
        rel = os.path.relpath(page, args.source)
        for lang, line, text, context in snippets(page, rel, failed):
            idx += 1
            if lang == "c":
                why = check_c(args, (rel, line), text, context, work, idx)
            elif lang == "python":
                why = check_python(args, (rel, line), text)
            else:
                continue
            counts[lang] += 1
            if why:
                failed.append(f"{rel}:{line}: the {lang} snippet {why}")
    for f in failed:
        print(f)
    print(f"snippets: {counts['c']} C, {counts['python']} Python checked; {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

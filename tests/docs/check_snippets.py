#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tests/docs/check_snippets.py — every code snippet of README.md and docs/*.md, compiled or run, so
that none can drift from the code it shows.

  check_snippets.py SOURCE_DIR --cc CC --lib LIBDMM.so [--include DIR ...] [--work DIR]

C (```c blocks):
  - a snippet with `int main(` is a whole program: compiled, linked with LIBDMM.so and run (exit 0);
  - a snippet that defines functions at file scope is a translation unit: compiled;
  - anything else is a fragment: compiled as the body of a function, after the declarations that the
    comment `<!-- snippet: DECLARATIONS -->` on the line before the block gives (the names the
    fragment uses but does not declare; invisible where the markdown is rendered). The fragment may
    refer to names an earlier fragment of the same page declared only through that comment.
  Every snippet gets <dmm/dmm.h> and the flags -std=c11 -Wall -Wextra -Werror (fragments: minus the
  unused-variable warnings, since a fragment shows calls, not whole programs).
Python (```python blocks): byte-compiled, and every `dmm.MODULE.NAME` they use must be defined at the
  top level of python/dmm/MODULE.py (or be a submodule), so a renamed call fails here.
Shell blocks are commands for a reader's terminal, not checked here.

Exit 0 when all pass, 1 with one line per failing snippet (file, line, what the compiler said).
"""
import argparse
import ast
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\w*)\s*$")
CONTEXT = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")


def snippets(path):
    """(language, first line number, text, context declarations) of each fenced block."""
    out, lang, start, body, context, last_comment = [], None, 0, [], "", ""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line)
            if lang is None:
                if m and m.group(1):
                    lang, start, body, context = m.group(1), n + 1, [], last_comment
                c = CONTEXT.match(line)
                last_comment = c.group(1) if c else ""
            elif m and not m.group(1):
                out.append((lang, start, "".join(body), context))
                lang = None
            else:
                body.append(line)
    return out


def defines_functions(text):
    return re.search(r"^[A-Za-z_][\w \*]*\b\w+\s*\([^;]*\)\s*\{", text, re.M) is not None


def check_c(args, where, text, context, work, idx):
    src = os.path.join(work, f"snippet{idx}.c")
    flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE"]
    head = "#include <dmm/dmm.h>\n#include <stdint.h>\n#include <stdio.h>\n"
    for d in args.include:
        if os.path.exists(os.path.join(d, "dmm_ort.h")):
            head += "#include <dmm_ort.h>\n"
    head += "typedef struct OrtApi OrtApi;\n"
    whole = "int main(" in text
    if whole or defines_functions(text):
        code = head + context + "\n" + text
    else:
        flags += ["-Wno-unused-variable", "-Wno-unused-but-set-variable", "-Wno-unused-parameter"]
        code = head + "void snippet(void);\nvoid snippet(void) {\n" + context + "\n#line %d \"%s\"\n" % (where[1], where[0]) + text + "}\n"
    with open(src, "w", encoding="utf-8") as f:
        f.write(code)
    inc = [f"-I{d}" for d in args.include]
    if whole:
        exe = os.path.join(work, f"snippet{idx}")
        libdir = os.path.dirname(os.path.abspath(args.lib))
        cmd = [args.cc, *flags, *inc, src, "-o", exe, args.lib, f"-Wl,-rpath,{libdir}"]
    else:
        cmd = [args.cc, *flags, *inc, "-c", src, "-o", os.path.join(work, f"snippet{idx}.o")]
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
        tree = ast.parse(text, f"{where[0]}:{where[1]}")
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
    ap.add_argument("--lib", required=True)
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
        for lang, line, text, context in snippets(page):
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

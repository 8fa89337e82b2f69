#!/usr/bin/env python3
"""check_docs_arch: docs/ARCHITECTURE.md names only what the code has, as test_docs_ops
keeps docs/PROTOCOL.md's op list and check_docs_keys the config keys the docs name.

For every code span of docs/ARCHITECTURE.md:
  - a path (`router/forward.c`, `common/conn.h`, `tools/cli/`) exists in the tree;
  - a bare file name (`forward.c`, `rproc.h`) is a file of one of the product folders;
  - a C name (`rl_forward_check`, `session_frame`, `rl_upstream_send()`, `rl_envoy_shared_*`)
    is a word of some source file (a `*` stands for any tail);
  - a name written next to its file, as "`NAME` (`dir/file.c`", "`dir/file.c` `NAME`" or in
    a parenthesis naming one file, "(`dir/file.c`, `NAME`)", is a word of that file or of
    its header; a name in a bullet that opens with its files ("- **conf** (`conf.c`, ...)",
    "- `front.c` (`front.h`): ...") is a word of those files, or of the file its prefix
    names (`rl_forward_fail`: forward.c);
  - every router/*.c is in one row of the router's layer table, every common/*.c in the
    files of one module of the common/ layers.
And the size rules the page states: no product .c file over RL_FILE_MAX lines but the
exceptions the page names, no tool's main.c over RL_TOOL_MAIN_MAX.

Not for what the code does (the suites), nor for the other docs' config keys
(check_docs_keys) or ops (check_wire's test_docs_ops). Run: check_docs_arch.py SOURCE_DIR.
"""
import os
import re
import sys

RL_FILE_MAX = 1100       # "no product .c file is much over 1,000 lines"
RL_TOOL_MAIN_MAX = 400   # "no tool's main.c over 400"
# The files the page names as the exceptions to RL_FILE_MAX: each is one data structure.
# None now: the key table, the last one, was split (keytab.c, keytab_resize.c, keytab_sweep.c).
RL_FILE_EXCEPTIONS = set()

# The product's folders (what ships), whose .c files the size rule covers.
PRODUCT = ["common", "node", "router", "lib", "include", "tools", "harness", "proto"]
# Where a name may be defined or used.
SOURCES = PRODUCT + ["tests", "bench", "clients", "scripts", "examples", "deploy"]

# Code spans that look like C names but are not the code's: placeholders of the page's
# recipes. A new one fails the test until it is a name of the code or listed here.
NOT_NAMES = {
    "rl_wire_put_foo", "rl_wire_put_foo_reply", "rl_forward_foo", "rl_fanout_foo",
    "session_foo", "server_foo", "wire_req_<shape>", "wire_reply_<shape>",
    "wire_put_req_<shape>",
}
# Other projects' files the page compares with, and ZooKeeper's paths (znodes).
NOT_FILES = {"net.c", "hiredis.c"}
ZNODES = ("nodes/", "routers/")
# Names a file's bullet names on purpose though they are not that file's (a metric, a config
# key, another file's field): the bullet rule below passes them.
NOT_IN_BULLET = {"rl_router_decisions_total", "max_connections", "free_loop"}

SPAN = re.compile(r"`([^`\n]+)`")
PATHLIKE = re.compile(r"^[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.*+-]+)*/?$")
FILENAME = re.compile(r"^[A-Za-z0-9_+-]+\.(c|h|py|sh|md|txt|lua|proto|json)$")
CNAME = re.compile(r"^([a-z][a-z0-9]*_[a-z0-9_]*\*?)(\(\))?$")


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def tree_files(root, folders):
    out = {}
    for top in folders:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "node_modules"]
            for name in filenames:
                full = os.path.join(dirpath, name)
                out[os.path.relpath(full, root)] = full
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    doc_path = os.path.join(root, "docs", "ARCHITECTURE.md")
    doc = read(doc_path)
    files = tree_files(root, SOURCES)
    # The sources, this test left out (its lists would find themselves).
    sources = {rel: read(full) for rel, full in files.items()
               if rel.endswith((".c", ".h", ".py", ".sh", ".lua", ".txt", ".in")) and
               rel != os.path.join("tests", "docs", "check_docs_arch.py")}
    sources["CMakeLists.txt"] = read(os.path.join(root, "CMakeLists.txt"))
    words = set()
    for text in sources.values():
        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    basenames = {os.path.basename(rel) for rel in files} | set(os.listdir(root))
    dirs = {os.path.dirname(rel) for rel in files}
    misses = []
    pairs = []

    def line_of(pos):
        return doc.count("\n", 0, pos) + 1

    def file_has(path, name):
        """name is a word of path or of its header / source twin."""
        stem, ext = os.path.splitext(path)
        for p in (path, stem + ".h", stem + ".c"):
            text = sources.get(p)
            if text is not None and re.search(r"\b" + re.escape(name) + r"\b", text):
                return True
        return False

    spans = [(m.start(), m.end(), m.group(1).strip()) for m in SPAN.finditer(doc)]
    for i, (start, end, span) in enumerate(spans):
        where = "docs/ARCHITECTURE.md:%d: `%s`" % (line_of(start), span)
        if span in NOT_NAMES or span.endswith("()") and span[:-2] in NOT_NAMES:
            continue
        if span in NOT_FILES or span.startswith(ZNODES):
            continue
        if "/" in span and PATHLIKE.match(span) and not span.startswith(("-", "/")):
            path = span.rstrip("/")
            if "*" in path:
                pat = re.compile("^" + re.escape(path).replace(r"\*", "[^/]*") + "$")
                ok = any(pat.match(rel) for rel in files)
            else:
                ok = (path in files or path in dirs or path + ".c" in files or
                      os.path.exists(os.path.join(root, path)))
            if not ok:
                misses.append(where + ": no such file or folder")
            continue
        if FILENAME.match(span):
            if span not in basenames:
                misses.append(where + ": no file of that name in the tree")
            continue
        m = CNAME.match(span)
        if not m:
            continue
        name = m.group(1)
        if name.endswith("*"):
            prefix = name[:-1]
            if not any(w.startswith(prefix) for w in words):
                misses.append(where + ": no name of the code begins so")
            continue
        if name not in words:
            misses.append(where + ": no such name in the sources")
            continue
        # The name next to its file: "`NAME` (`PATH`", "`PATH` `NAME`", or NAME inside a
        # parenthesis that names one file: "(`PATH`, `NAME`)", "(`NAME`, `PATH`)".
        path = None
        if i + 1 < len(spans):
            nstart, _, nspan = spans[i + 1]
            if re.fullmatch(r"\s+\(", doc[end:nstart]):
                path = nspan
        if path is None and i > 0:
            _, pend, pspan = spans[i - 1]
            if re.fullmatch(r"\s+", doc[pend:start]):
                path = pspan
        if path is None:
            depth, lo = 0, None
            for k in range(start - 1, max(0, start - 600), -1):
                if doc[k] == ")":
                    depth += 1
                elif doc[k] == "(":
                    if depth == 0:
                        lo = k
                        break
                    depth -= 1
            hi = doc.find(")", end)
            if lo is not None and hi != -1 and hi - lo < 600 and "(" not in doc[end:hi]:
                inner = [s for (a, b, s) in spans if lo < a and b < hi and "/" in s and
                         s.endswith((".c", ".h"))]
                if len(inner) == 1:
                    path = inner[0]
        if path is not None and "/" in path and path.endswith((".c", ".h")) and path in files:
            pairs.append((name, path))
            if not file_has(path, name):
                misses.append(where + ": not in %s" % path)

    # A bullet of a folder's section that opens with its files ("- **conf** (`conf.c`, ...)",
    # "- `front.c` (`front.h`): ...") names only what those files have, or what a file its
    # prefix names has (`rl_forward_fail`: forward.c).
    section, bullets, cur = None, [], None
    for ln, line in enumerate(doc.split("\n"), 1):
        if line.startswith("## "):
            section, cur = line[3:].split(":")[0].strip().rstrip("/"), None
        elif line.startswith("- "):
            cur = [ln, section, line]
            bullets.append(cur)
        elif cur is not None and line.startswith("  ") and line.strip():
            cur[2] += " " + line.strip()
        else:
            cur = None
    for ln, section, text in bullets:
        if section not in ("common", "node", "router"):
            continue
        if not re.match(r"- (\*\*\w+\*\* \(`|`)", text):
            continue
        head = text.split(":")[0]
        own = [section + "/" + f for f in re.findall(r"`([\w.]+\.[ch])`", head)]
        if not own:
            continue
        for m in re.finditer(r"`([a-z][a-z0-9]*_[a-z0-9_]*)(\(\))?`", text):
            name = m.group(1)
            if name in NOT_NAMES or name in NOT_IN_BULLET or name.endswith("_"):
                continue
            pairs.append((name, own[0]))
            if any(file_has(f, name) for f in own):
                continue
            parts = name.split("_")
            by_prefix = ["%s/%s.c" % (d, parts[1]) for d in ("common", "node", "router")
                         ] if name.startswith("rl_") and len(parts) > 2 else []
            if any(p in sources and file_has(p, name) for p in by_prefix):
                continue
            misses.append("docs/ARCHITECTURE.md:%d: `%s`: not in %s, its bullet's files" %
                          (ln, name, ", ".join(own)))

    # Every router/*.c in exactly one row of the router's layer table, every common/*.c in
    # the files of one module of the common/ layers.
    router = doc[doc.index("\n## router/"):]
    router = router[:router.index("\n## ", 1)]
    rows = [ln for ln in router.split("\n") if re.match(r"\| \d+ ", ln)]
    placed = {}
    for row in rows:
        for f in re.findall(r"`([\w.]+\.c)`", row.split("|")[2]):
            placed.setdefault(f, []).append(row.split("|")[1].strip())
    for rel in sorted(files):
        if rel.startswith("router/") and rel.endswith(".c") and rel.count("/") == 1:
            f = rel[len("router/"):]
            if len(placed.get(f, [])) != 1:
                misses.append("%s: in %d rows of the router's layer table (docs/ARCHITECTURE.md, "
                              "\"router/\"), not 1" % (rel, len(placed.get(f, []))))
    for f in placed:
        if "router/" + f not in files:
            misses.append("router/%s: in the router's layer table, not in the tree" % f)
    common = doc[doc.index("\n## common/"):]
    common = common[:common.index("\n## ", 1)]
    modules = set()
    for m in re.finditer(r"^- \*\*\w+\*\* \(([^)]*)\)", common, re.M):
        modules.update(re.findall(r"`([\w.]+\.[ch])`", m.group(1)))
    for rel in sorted(files):
        if rel.startswith("common/") and rel.endswith(".c") and rel.count("/") == 1:
            if rel[len("common/"):] not in modules:
                misses.append("%s: in no module of docs/ARCHITECTURE.md's common/ layers" % rel)

    # The size rules the page states.
    for rel in sorted(files):
        if not rel.endswith(".c") or rel.split("/")[0] not in PRODUCT:
            continue
        n = sources[rel].count("\n")
        if rel.startswith("tools/") and os.path.basename(rel) == "main.c" and n > RL_TOOL_MAIN_MAX:
            misses.append("%s: %d lines, over the %d of a tool's main.c" % (rel, n, RL_TOOL_MAIN_MAX))
        if n > RL_FILE_MAX and rel not in RL_FILE_EXCEPTIONS:
            misses.append("%s: %d lines, over %d (split it at a seam, or make it an exception "
                          "named in docs/ARCHITECTURE.md and here)" % (rel, n, RL_FILE_MAX))
    for rel in sorted(RL_FILE_EXCEPTIONS):
        if "`%s`" % rel not in doc:
            misses.append("%s: an exception to the size rule the page does not name" % rel)

    for miss in misses:
        print(miss)
    print("check_docs_arch: %d code spans read, %d names checked in their file, %d misses" %
          (len(spans), len(pairs), len(misses)))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())

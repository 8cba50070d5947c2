#!/usr/bin/env python3
"""Checks docs/api/openapi.yaml against the routes `kvgov serve` registers.

Usage: openapi_coverage.py SOURCE_DIR [--spec FILE] [--server-dir DIR]

Reads every `http.Get/Post/Put/Patch/Delete/Options(PATH, ...)` in
src/server/*.cc and src/gateway/*.cc (tests and benchmarks excepted), PATH
a string or raw-string literal, and turns each regex group into a `{name}` path parameter (names in
PARAM_NAMES below). Then reads the spec's `paths:` with a small line-based
reader for the subset of YAML the spec is written in (see the comment at its
top), and fails, listing each problem, when:

  - a registered (method, path) has no operation in the spec;
  - the spec has an operation the server does not register;
  - a templated path does not declare exactly its parameters `in: path`, or
    a parameter's `pattern` is not the server's regex group, anchored;
  - an operation's `x-kvgov-role` differs from the `Role::kX` its
    registration guards it with, an authenticated operation has no
    `x-kvgov-role`, one marked `security: []` is guarded, or one the server
    registers without a guard is not marked `security: []`;
  - a registration's path is not a literal, or has a group this script
    cannot name;
  - a `$ref` names a component the spec does not define.

Python 3 standard library only.
"""

import argparse
import os
import re
import sys

HTTP_METHODS = ("get", "post", "put", "patch", "delete", "options", "head")

# The name of a path parameter, by the static segment before its regex group:
# /v1/route/([0-9a-f]{32})/done -> /v1/route/{decision_id}/done. A new kind
# of templated route needs a line here (the check fails until it has one).
PARAM_NAMES = {
    "route": "decision_id",
    "workers": "worker",
    "invalidations": "id",
    "certificates": "id",
    "quarantines": "id",
    "ui": "file",
}

REGISTRATION = re.compile(r"\bhttp(?:\.|->)(Get|Post|Put|Patch|Delete|Options)\s*\(")
LITERAL = re.compile(r'\s*(?:R"\((?P<raw>.*?)\)"|"(?P<plain>(?:[^"\\]|\\.)*)")', re.S)
GROUP = re.compile(r"\(((?:[^()\\]|\\.)*)\)")
REGEX_META = re.compile(r"[\\^$.|?*+()\[\]{}]")


class Failure(Exception):
    pass


def strip_comments(text):
    """Blanks // and /* */ comments outside string literals, keeping offsets
    (so line numbers stay right)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith('R"(', i):
            end = text.find(')"', i + 3)
            i = n if end < 0 else end + 2
        elif text[i] == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif text[i] == "'":
            i += 1
            while i < n and text[i] != "'":
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            for j in range(i, end):
                out[j] = " "
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            for j in range(i, end):
                if out[j] != "\n":
                    out[j] = " "
            i = end
        else:
            i += 1
    return "".join(out)


def template_of(path, where):
    """('/v1/route/{decision_id}/done', {'decision_id': '[0-9a-f]{32}'})."""
    params = {}
    pieces = []
    last = 0
    for group in GROUP.finditer(path):
        before = path[last:group.start()]
        segment = before.rstrip("/").rsplit("/", 1)[-1] if before.endswith("/") else None
        if segment is None or not (group.end() == len(path) or path[group.end()] == "/"):
            raise Failure(f"{where}: the group in '{path}' is not a whole path segment")
        name = PARAM_NAMES.get(segment)
        if name is None:
            raise Failure(f"{where}: no parameter name for the group after '/{segment}/' in "
                          f"'{path}'; add '{segment}' to PARAM_NAMES in {__file__}")
        if name in params:
            raise Failure(f"{where}: parameter '{name}' appears twice in '{path}'")
        params[name] = group.group(1)
        pieces.append(before)
        pieces.append("{" + name + "}")
        last = group.end()
    pieces.append(path[last:])
    template = "".join(pieces)
    if REGEX_META.search(template.replace("{", "").replace("}", "")):
        raise Failure(f"{where}: '{path}' has regex syntax outside a group")
    return template, params


def statement_end(text, start):
    """The offset just past the `)` that closes the call whose `(` is at
    start - 1, skipping string and raw-string literals."""
    depth, i, n = 1, start, len(text)
    while i < n and depth:
        if text.startswith('R"(', i):
            end = text.find(')"', i + 3)
            i = n if end < 0 else end + 2
            continue
        if text[i] in "\"'":
            quote, i = text[i], i + 1
            while i < n and text[i] != quote:
                i += 2 if text[i] == "\\" else 1
        elif text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
        i += 1
    return i


def server_routes(server_dirs):
    """{(method, template): (params, where)} registered in each of server_dirs/*.cc."""
    routes = {}
    problems = []
    paths = sorted(os.path.join(server_dir, f) for server_dir in server_dirs
                   for f in os.listdir(server_dir)
                   if f.endswith(".cc") and not f.endswith(("_test.cc", "_bench.cc")))
    for path in paths:
        name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            text = strip_comments(f.read())
        for call in REGISTRATION.finditer(text):
            line = text.count("\n", 0, call.start()) + 1
            where = f"{os.path.relpath(path)}:{line}"
            literal = LITERAL.match(text, call.end())
            if literal is None:
                problems.append(f"{where}: http.{call.group(1)} with a path that is not a "
                                "string literal; this check cannot read it")
                continue
            raw = literal.group("raw")
            route_path = raw if raw is not None else bytes(
                literal.group("plain"), "utf-8").decode("unicode_escape")
            try:
                template, params = template_of(route_path, where)
            except Failure as error:
                problems.append(str(error))
                continue
            key = (call.group(1).lower(), template)
            if key in routes:
                problems.append(f"{where}: {key[0].upper()} {template} is registered twice "
                                f"(also at {routes[key][1]})")
            statement = text[call.end():statement_end(text, call.end())]
            roles = set(re.findall(r"\bRole::k([A-Za-z]+)", statement))
            # Certainly open: the handler is a lambda or a function named
            # alone, and nothing in the registration authenticates. (A
            # guard built elsewhere, as set_drain(true), is neither.)
            handler = text[literal.end():statement_end(text, call.end()) - 1]
            bare = re.match(r"\s*,\s*(\[|[A-Za-z_][A-Za-z0-9_:]*\s*$)", handler) is not None
            guard = {"role": roles.pop().lower() if len(roles) == 1 else None,
                     "guarded": "Guard" in statement or bool(roles),
                     "open": bare and re.search(r"Guard|Role::|Admit|Authoriz",
                                                statement) is None}
            routes[key] = (params, where, guard)
    if not routes and not problems:
        problems.append(f"no http.Get/Post/... registrations found under {', '.join(server_dirs)}")
    return routes, problems


def unquote(value):
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return inner.replace("''", "'") if value[0] == "'" else inner.replace('\\"', '"')
    return value


def spec_paths(spec_file):
    """{template: {'ops': {method: line}, 'params': {name: {'in':..., 'pattern':...}},
    'line': n}} from the spec's top-level `paths:` mapping."""
    with open(spec_file, encoding="utf-8") as f:
        lines = f.read().split("\n")
    paths = {}
    in_paths = False
    current = None  # the path item being read
    param = None    # the path-level parameter being read
    in_params = False
    operation = None  # the operation being read: its x-kvgov-role and security
    for number, raw in enumerate(lines, 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise Failure(f"{spec_file}:{number}: tab in indentation")
        indent = len(raw) - len(raw.lstrip(" "))
        text = raw.strip()
        if indent == 0:
            in_paths = text == "paths:"
            current = None
            continue
        if not in_paths:
            continue
        if indent == 2:
            key = text[:-1] if text.endswith(":") else None
            if key is None:
                raise Failure(f"{spec_file}:{number}: want '/path:' under paths:, got '{text}'")
            key = unquote(key)
            if not key.startswith("/"):
                raise Failure(f"{spec_file}:{number}: path '{key}' does not start with '/'")
            if key in paths:
                raise Failure(f"{spec_file}:{number}: path '{key}' given twice")
            current = paths[key] = {"ops": {}, "op_info": {}, "params": {}, "line": number}
            param, in_params, operation = None, False, None
            continue
        if current is None:
            raise Failure(f"{spec_file}:{number}: content under paths: before any path")
        if indent == 4:
            key = text.split(":", 1)[0]
            in_params = key == "parameters"
            param = None
            if key in HTTP_METHODS:
                if key in current["ops"]:
                    raise Failure(f"{spec_file}:{number}: {key} given twice for this path")
                current["ops"][key] = number
                current["op_info"][key] = {"role": None, "public": False}
                operation = current["op_info"][key]
            else:
                operation = None
            continue
        if indent == 6 and operation is not None:
            key, _, value = text.partition(":")
            if key == "x-kvgov-role":
                operation["role"] = unquote(value)
            elif key == "security" and value.strip() == "[]":
                operation["public"] = True
        if not in_params:
            continue
        # Path-level parameters: "- name: X" at indent 6, keys below it.
        if indent == 6 and text.startswith("- "):
            item = text[2:]
            param = {"in": None, "pattern": None, "line": number}
            if item.startswith("name:"):
                name = unquote(item[len("name:"):])
                current["params"][name] = param
            else:
                raise Failure(f"{spec_file}:{number}: start each path parameter with "
                              "'- name: ...'")
            continue
        if param is not None and ":" in text:
            key, value = text.split(":", 1)
            if key == "in" and indent == 8:
                param["in"] = unquote(value)
            elif key == "pattern":
                param["pattern"] = unquote(value)
    return paths


REF = re.compile(r"""\$ref:\s*["']?#/components/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)""")


def unresolved_refs(spec_file):
    """Every `$ref: "#/components/SECTION/NAME"` whose target the spec's
    top-level `components:` does not define (NAME at indent 4 under SECTION
    at indent 2): a definition indented into the wrong block still parses,
    but nothing finds it."""
    defined, section, in_components = set(), None, False
    with open(spec_file, encoding="utf-8") as spec:
        lines = spec.read().splitlines()
    for text in lines:
        if text and not text.startswith(" ") and not text.startswith("#"):
            in_components = text.rstrip() == "components:"
            section = None
        elif in_components and re.match(r"^  [A-Za-z]", text):
            section = text.strip().rstrip(":")
        elif in_components and section and re.match(r"^    [A-Za-z0-9_.-]+:", text):
            defined.add((section, text.strip().split(":")[0]))
    problems = []
    for number, text in enumerate(lines, 1):
        for match in REF.finditer(text):
            if (match.group(1), match.group(2)) not in defined:
                problems.append(f"{spec_file}:{number}: $ref to #/components/{match.group(1)}/"
                                f"{match.group(2)}, which components: does not define")
    return problems


def check(source_dir, spec_file, server_dirs):
    routes, problems = server_routes(server_dirs)
    paths = spec_paths(spec_file)
    spec_ops = {(method, template) for template, item in paths.items() for method in item["ops"]}

    for (method, template), (params, where, guard) in sorted(routes.items()):
        if (method, template) not in spec_ops:
            problems.append(f"missing from the spec: {method.upper()} {template} "
                            f"(registered at {where})")
            continue
        item = paths[template]
        info = item["op_info"][method]
        line = item["ops"][method]
        if guard["role"] is not None and info["role"] != guard["role"]:
            problems.append(f"{spec_file}:{line}: {method.upper()} {template}: x-kvgov-role "
                            f"{info['role']!r}, but the server requires role "
                            f"'{guard['role']}' ({where})")
        if info["public"] and guard["guarded"]:
            problems.append(f"{spec_file}:{line}: {method.upper()} {template} says security: [] "
                            f"but the server guards it ({where})")
        if not info["public"] and guard["open"]:
            problems.append(f"{spec_file}:{line}: {method.upper()} {template} needs a token in "
                            f"the spec, but the server answers it without one ({where}): say "
                            "security: []")
        if not info["public"] and info["role"] is None:
            problems.append(f"{spec_file}:{line}: {method.upper()} {template} needs a token: "
                            "give its x-kvgov-role")
        declared = {n: p for n, p in item["params"].items() if p["in"] == "path"}
        for name, group in params.items():
            if name not in declared:
                problems.append(f"{spec_file}:{item['line']}: {template} does not declare "
                                f"path parameter '{name}'")
            elif declared[name]["pattern"] != "^" + group + "$":
                problems.append(f"{spec_file}:{declared[name]['line']}: parameter '{name}' of "
                                f"{template}: pattern {declared[name]['pattern']!r}, but the "
                                f"server matches '^{group}$' ({where})")
        for name in declared:
            if name not in params:
                problems.append(f"{spec_file}:{item['line']}: {template} declares path "
                                f"parameter '{name}' the server does not have")

    registered_templates = {template for _, template in routes}
    for template, item in sorted(paths.items()):
        for method, line in sorted(item["ops"].items()):
            if (method, template) not in routes:
                hint = (" (the path is registered for other methods)"
                        if template in registered_templates else "")
                problems.append(f"{spec_file}:{line}: {method.upper()} {template} is in the spec "
                                f"but not registered by the server{hint}")
        if not item["ops"]:
            problems.append(f"{spec_file}:{item['line']}: {template} has no operations")
    problems.extend(unresolved_refs(spec_file))
    return routes, spec_ops, problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source_dir")
    parser.add_argument("--spec", help="default: SOURCE_DIR/docs/api/openapi.yaml")
    parser.add_argument("--server-dir", action="append",
                        help="may be repeated; default: SOURCE_DIR/src/server and "
                             "SOURCE_DIR/src/gateway (the front door's routes)")
    args = parser.parse_args()
    spec = args.spec or os.path.join(args.source_dir, "docs", "api", "openapi.yaml")
    server_dirs = args.server_dir or [os.path.join(args.source_dir, "src", "server"),
                                      os.path.join(args.source_dir, "src", "gateway")]
    try:
        routes, spec_ops, problems = check(args.source_dir, spec, server_dirs)
    except (Failure, OSError) as error:
        print(f"openapi_coverage: {error}", file=sys.stderr)
        return 1
    if problems:
        print(f"openapi_coverage: {len(problems)} problem(s) between "
              f"{', '.join(server_dirs)} and {spec}:",
              file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"openapi_coverage: all {len(routes)} registered routes are in {spec}, "
          f"and it has no others")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Counts the members of every class and struct in one C++ namespace, from clang's AST.

Reads what `clang++ -fsyntax-only -Xclang -ast-dump=json -Xclang -ast-dump-filter=tessera::api`
prints for a translation unit (JSON objects one after another: the namespace's blocks), from each
file named (one translation unit each) or standard input, and prints one line per class or struct
defined in them:

    METHODS FIELDS QUALIFIED-NAME FILE

METHODS counts the member functions its definition declares (constructors, destructors,
operators, static ones and member templates included; implicit and `= delete`d ones not);
FIELDS its non-static data members. A nested class is a line of its own and does not count
towards the class around it (one defined outside it, `class Engine::Port {...}`, is named in
it); an anonymous namespace or class is named `(anonymous)`. A class seen in several translation
units is printed once. Used by tools/checks/sizes.sh.
"""
import json
import sys

METHOD_KINDS = {
    "CXXMethodDecl",
    "CXXConstructorDecl",
    "CXXDestructorDecl",
    "CXXConversionDecl",
    "FunctionTemplateDecl",
}


def objects(text):
    """The JSON objects of `text`, one after another."""
    decoder = json.JSONDecoder()
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return
        obj, i = decoder.raw_decode(text, i)
        yield obj


class Walker:
    """Walks the dump in the order clang printed it, keeping the last file named: clang leaves a
    location's file out when it is the one printed before."""

    def __init__(self):
        self.file = "?"
        self.records = {}  # qualified name -> (methods, fields, file)
        self.names = {}  # a record's id in the dump -> its qualified name

    def note_file(self, loc):
        if not isinstance(loc, dict):
            return
        for key in ("spellingLoc", "expansionLoc"):
            self.note_file(loc.get(key))
        if "file" in loc:
            self.file = loc["file"]

    def walk(self, node, scope):
        self.note_file(node.get("loc"))
        rng = node.get("range", {})
        self.note_file(rng.get("begin"))
        self.note_file(rng.get("end"))
        kind = node.get("kind")
        name = node.get("name", "")
        inner = node.get("inner", [])
        if kind == "NamespaceDecl":
            scope = scope + "::" + (name or "(anonymous)")
        elif kind == "CXXRecordDecl" and node.get("completeDefinition"):
            if node.get("isImplicit"):  # the class's own name injected into it
                return
            # A nested class defined outside its class (`class Engine::Port {...}`) names it.
            outer = self.names.get(node.get("parentDeclContextId"))
            qualified = (outer or scope) + "::" + (name or "(anonymous)")
            self.names[node.get("id")] = qualified
            where = self.file
            methods = fields = 0
            for child in inner:
                if child.get("isImplicit"):
                    continue
                child_kind = child.get("kind")
                if child_kind in METHOD_KINDS and not child.get("explicitlyDeleted"):
                    methods += 1
                elif child_kind == "FieldDecl":
                    fields += 1
            old = self.records.get(qualified)
            if old is None or (methods, fields) > old[:2]:
                self.records[qualified] = (methods, fields, where)
            scope = qualified
        for child in inner:
            if isinstance(child, dict):
                self.walk(child, scope)


def main():
    walker = Walker()
    for path in sys.argv[1:] or ["-"]:
        with (open(path) if path != "-" else sys.stdin) as f:
            text = f.read()
        walker.names = {}  # ids are addresses in one clang run: another run's mean nothing here
        for obj in objects(text):
            walker.file = "?"
            walker.walk(obj, "")
    for qualified, (methods, fields, where) in sorted(walker.records.items()):
        # The dump starts at the blocks of the namespace the filter matched, inside `tessera`.
        print(methods, fields, "tessera" + qualified, where)


if __name__ == "__main__":
    main()

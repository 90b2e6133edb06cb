"""pretrain/'s modules import each other without a cycle, and model/, tools/ and finetune/ import nothing from run/ (the
training loop's room): what reads a phase directory does so through pretrain/model/checkpoint_files.py.

The graph is read from the source with `ast`, not by importing: every `import` and `from ... import` statement counts,
at module level and inside functions alike (an import inside a function that closes a cycle is a cycle that only
shows later). `from package import name` is an edge to the module `package.name` where that is a module, else to the
package; an import of a module outside pretrain/ is no edge, and neither is one under `if TYPE_CHECKING:` (read by type
checkers only, never run)."""
from __future__ import annotations

import ast
from pathlib import Path

import pretrain

PACKAGE_DIR = Path(pretrain.__file__).resolve().parent
NOT_FROM_RUN = ("pretrain.model", "pretrain.tools", "pretrain.finetune")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (anywhere in its code)."""
    root = package_dir.parent
    paths = {module_name(path, root): path for path in sorted(package_dir.rglob("*.py"))}

    def known(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        imported = set()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        type_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                     for statement in node.body for inner in ast.walk(statement)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                imported.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, one level up for each dot after the first
                    parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                imported.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else known(base)
                                for alias in node.names)
        graph[module] = {name for name in imported if name is not None and name != module}
    return graph


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), None if there is none."""
    done, path = set(), []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if cycle := visit(imported):
                return cycle
        path.pop()
        done.add(module)
        return None

    return next((cycle for module in sorted(graph) if (cycle := visit(module))), None)


def test_pretrain_has_no_import_cycle():
    cycle = find_cycle(import_graph(PACKAGE_DIR))
    assert cycle is None, " -> ".join(cycle)


def test_model_tools_and_finetune_import_nothing_from_the_training_loop():
    graph = import_graph(PACKAGE_DIR)
    upward = sorted(f"{module} -> {imported}" for module, imports in graph.items() if module.startswith(NOT_FROM_RUN)
                    for imported in imports if imported.startswith("pretrain.run"))
    assert upward == []
    assert "pretrain.model.checkpoint_files" in graph["pretrain.model.model_dir"]


def test_the_graph_holds_imports_inside_functions_and_finds_their_cycle(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "sub" / "__init__.py").write_text("", encoding="utf-8")
    (package / "a.py").write_text("import os\nfrom pkg.sub import b\n", encoding="utf-8")
    (package / "sub" / "b.py").write_text("def f():\n    from ..c import g\n", encoding="utf-8")
    (package / "c.py").write_text("def g():\n    from pkg import a\n", encoding="utf-8")
    graph = import_graph(package)
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (package / "c.py").write_text("def g():\n    from pkg import sub\n", encoding="utf-8")
    assert find_cycle(import_graph(package)) is None

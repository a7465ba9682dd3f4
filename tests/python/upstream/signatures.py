"""Signature lists: the shape of an interface, the same whether it is read
from an engine's source text (``from_source``, with ``ast``: nothing of
the engine is imported) or from the classes of a double in memory
(``from_objects``, with ``inspect``). A test compares a double's list with
the list recorded from upstream at a named commit, so a double that leaves
upstream behind fails.

The list of a class: its base classes (last dotted name), its class
variables (``ClassVar`` annotations and plain assignments), its dataclass
fields (other annotations, in order, each with whether it is keyword-only),
its properties, and each method it defines: its parameters (name, kind,
whether it has a default) and its decorators among classmethod,
staticmethod and abstractmethod (``__init_subclass__`` is a classmethod
without saying so). Methods a dataclass generates (``__init__``, ``__repr__``,
``__eq__``) are left out, since the source has none. A function's list is
its parameters.

Run as a script, it prints the list of NAMES in a source file:
    python3 signatures.py FILE NAME [NAME ...]
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import sys
from typing import Any, Dict, Iterable, List

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional_only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
    inspect.Parameter.VAR_POSITIONAL: "var_positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword_only",
    inspect.Parameter.VAR_KEYWORD: "var_keyword",
}
_DECORATORS = ("classmethod", "staticmethod", "abstractmethod")
_GENERATED = {"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__match_args__"}
_IMPLICIT_CLASSMETHODS = {"__init_subclass__", "__class_getitem__"}
# What abc and typing put in a class's namespace.
_MACHINERY = {"_abc_impl", "_is_protocol", "_is_runtime_protocol"}


def _last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript):  # Generic[T], Protocol[T]
        return _last_name(node.value)
    if isinstance(node, ast.Call):
        return _last_name(node.func)
    return ast.unparse(node)


def _ast_params(args: ast.arguments) -> List[List[Any]]:
    out: List[List[Any]] = []
    positional = list(args.posonlyargs) + list(args.args)
    first_default = len(positional) - len(args.defaults)
    for i, a in enumerate(positional):
        kind = "positional_only" if i < len(args.posonlyargs) else "positional"
        out.append([a.arg, kind, i >= first_default])
    if args.vararg:
        out.append([args.vararg.arg, "var_positional", False])
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append([a.arg, "keyword_only", d is not None])
    if args.kwarg:
        out.append([args.kwarg.arg, "var_keyword", False])
    return out


def _dataclass_decorator(node: ast.ClassDef):
    for d in node.decorator_list:
        if _last_name(d) == "dataclass":
            return d
    return None


def _keyword_true(call: ast.AST, name: str) -> bool:
    return isinstance(call, ast.Call) and any(
        k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def _class_from_ast(node: ast.ClassDef) -> Dict[str, Any]:
    decorator = _dataclass_decorator(node)
    all_kw_only = _keyword_true(decorator, "kw_only")
    class_vars: List[str] = []
    fields: List[List[Any]] = []
    properties: List[str] = []
    methods: Dict[str, Any] = {}
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if "ClassVar" in ast.unparse(item.annotation) or decorator is None:
                class_vars.append(item.target.id)
            else:
                field_call = item.value if isinstance(item.value, ast.Call) and _last_name(item.value) == "field" else None
                fields.append([item.target.id, all_kw_only or _keyword_true(field_call, "kw_only")])
        elif isinstance(item, ast.Assign):
            class_vars.extend(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            named = {_last_name(d) for d in item.decorator_list}
            if "property" in named:
                properties.append(item.name)
                continue
            decorators = named & set(_DECORATORS)
            if item.name in _IMPLICIT_CLASSMETHODS:
                decorators.add("classmethod")
            methods[item.name] = {"params": _ast_params(item.args), "decorators": sorted(decorators)}
    listed: Dict[str, Any] = {"bases": [_last_name(b) for b in node.bases], "class_vars": sorted(class_vars),
                              "properties": sorted(properties), "methods": methods}
    if decorator is not None:
        listed["dataclass_fields"] = fields
    return listed


def from_source(text: str, names: Iterable[str]) -> Dict[str, Any]:
    """The list of each of ``names`` (top-level classes and functions) in
    ``text``. Raises KeyError naming one that is not there."""
    tree = ast.parse(text)
    found: Dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = _class_from_ast(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = {"params": _ast_params(node.args)}
    return {name: found[name] for name in names}


def _object_params(function) -> List[List[Any]]:
    return [[p.name, _KINDS[p.kind], p.default is not inspect.Parameter.empty]
            for p in inspect.signature(function, follow_wrapped=False).parameters.values()]


def _is_class_var(annotation: Any) -> bool:
    return "ClassVar" in (annotation if isinstance(annotation, str) else repr(annotation))


def _class_from_object(cls: type) -> Dict[str, Any]:
    is_dataclass = dataclasses.is_dataclass(cls) and "__dataclass_fields__" in cls.__dict__
    annotations = cls.__dict__.get("__annotations__", {})
    class_vars = [n for n, a in annotations.items() if _is_class_var(a) or not is_dataclass]
    fields = [n for n, a in annotations.items() if is_dataclass and not _is_class_var(a)]
    properties: List[str] = []
    methods: Dict[str, Any] = {}
    for name, value in cls.__dict__.items():
        decorators = []
        function = value
        if isinstance(value, classmethod):
            decorators.append("classmethod")
            function = value.__func__
        elif isinstance(value, staticmethod):
            decorators.append("staticmethod")
            function = value.__func__
        if isinstance(value, property):
            properties.append(name)
            continue
        if not inspect.isfunction(function):
            if not name.startswith("__") and name not in _MACHINERY and name not in annotations:
                class_vars.append(name)
            continue
        if function.__module__ in ("typing", "abc", "dataclasses"):
            continue  # put there by Protocol and the like
        made_at = function.__code__.co_filename
        if is_dataclass and name in _GENERATED and (made_at == "<string>" or made_at.endswith("dataclasses.py")):
            continue  # made by @dataclass, not written in the class
        if getattr(function, "__isabstractmethod__", False):
            decorators.append("abstractmethod")
        methods[name] = {"params": _object_params(function), "decorators": sorted(decorators)}
    listed: Dict[str, Any] = {"bases": [b.__name__ for b in cls.__bases__ if b is not object],
                              "class_vars": sorted(class_vars), "properties": sorted(properties),
                              "methods": methods}
    if is_dataclass:
        kw_only = {f.name: f.kw_only is True for f in dataclasses.fields(cls)}
        listed["dataclass_fields"] = [[name, kw_only[name]] for name in fields]
    return listed


def from_objects(namespace: Dict[str, Any], names: Iterable[str]) -> Dict[str, Any]:
    """The list of each of ``names`` in ``namespace`` (a module's
    ``__dict__`` or any mapping of name to class or function)."""
    out: Dict[str, Any] = {}
    for name in names:
        value = namespace[name]
        out[name] = _class_from_object(value) if inspect.isclass(value) else {"params": _object_params(value)}
    return out


def differences(recorded: Dict[str, Any], actual: Dict[str, Any], where: str = "") -> List[str]:
    """Every place ``actual`` departs from ``recorded``, one line each."""
    lines: List[str] = []
    for key in sorted(set(recorded) | set(actual)):
        path = f"{where}.{key}" if where else key
        if key not in actual:
            lines.append(f"{path}: missing (upstream has {json.dumps(recorded[key])})")
        elif key not in recorded:
            lines.append(f"{path}: not in upstream ({json.dumps(actual[key])})")
        elif isinstance(recorded[key], dict) and isinstance(actual[key], dict):
            lines.extend(differences(recorded[key], actual[key], path))
        elif recorded[key] != actual[key]:
            lines.append(f"{path}: upstream {json.dumps(recorded[key])}, here {json.dumps(actual[key])}")
    return lines


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: signatures.py FILE NAME [NAME ...]")
    with open(sys.argv[1], encoding="utf-8") as f:
        print(json.dumps(from_source(f.read(), sys.argv[2:]), indent=1))

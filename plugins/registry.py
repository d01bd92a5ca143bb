"""Find a model plugin by name: a built-in short name or ``module:Class``."""

from __future__ import annotations

import importlib

from plugins.base import DuplexModelPlugin

BUILTIN: dict[str, str] = {
    "tone": "plugins.tone:TonePlugin",
    "cascade": "plugins.cascade.plugin:CascadePlugin",
}


def load_plugin(name: str) -> DuplexModelPlugin:
    """Instantiate the plugin; raises ``ValueError`` with a clear reason."""
    target = BUILTIN.get(name, name)
    module_name, _, class_name = target.partition(":")
    if not class_name:
        known = ", ".join(sorted(BUILTIN))
        raise ValueError(f"unknown plugin {name!r}: use one of {known} or module:Class")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load plugin {target!r}: {exc}") from exc
    plugin = cls()
    if not isinstance(plugin, DuplexModelPlugin):
        raise ValueError(f"{target} does not implement DuplexModelPlugin")
    return plugin

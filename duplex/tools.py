"""The tools a session offers its model, and how freely it may call them.

OpenAI Realtime's ``tools`` (type ``function``: ``name``, ``description``,
JSON Schema ``parameters``) and ``tool_choice`` (``auto``, ``none``,
``required`` or ``{type: "function", name}``), on the session and per
``response.create``. Both dialects use the same shapes. GA's
``parallel_tool_calls`` (true by default) says whether one response may make
several calls; false: at most one.

A tool the gateway cannot offer (any type but ``function``: OpenAI's ``mcp``
servers) is refused with an error naming the field, never dropped: a client
that asked for it must learn that it will not be called.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from duplex import fields as f
from duplex import limits
from duplex.errors import InvalidRequest

MAX_TOOLS = 128  # OpenAI's limit for a request's tools
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
CHOICES = ("auto", "none", "required")
EMPTY_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(EMPTY_PARAMETERS))

    def wire(self) -> dict[str, Any]:
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": dict(self.parameters)}


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """``mode`` is ``auto``, ``none``, ``required``, or ``function`` with ``name``."""

    mode: str = "auto"
    name: str | None = None

    def wire(self) -> str | dict[str, Any]:
        if self.mode == "function":
            return {"type": "function", "name": self.name}
        return self.mode


@dataclass(frozen=True, slots=True)
class ToolSet:
    """What a reply may call: the tools and the choice, checked against each
    other, and whether it may make several calls (``parallel``)."""

    tools: tuple[Tool, ...] = ()
    choice: ToolChoice = ToolChoice()
    parallel: bool = True

    @property
    def callable(self) -> tuple[Tool, ...]:
        """The tools the model may call under ``choice`` (none under ``none``)."""
        if self.choice.mode == "none":
            return ()
        if self.choice.mode == "function":
            return tuple(t for t in self.tools if t.name == self.choice.name)
        return self.tools

    @property
    def must_call(self) -> bool:
        return self.choice.mode in ("required", "function")


NO_TOOLS = ToolSet()


def parse_tools(value: object, param: str) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise f.wrong_type(param, "an array", value)
    if len(value) > MAX_TOOLS:
        raise InvalidRequest(f"Invalid '{param}': array too long. Expected an array with "
                             f"maximum length {MAX_TOOLS}, but got an array with length "
                             f"{len(value)} instead.", code="array_above_max_length",
                             param=param)
    tools: list[Tool] = []
    for i, raw in enumerate(value):
        tool = _tool(raw, f"{param}[{i}]")
        if any(t.name == tool.name for t in tools):
            raise InvalidRequest(f"Duplicate tool name: '{tool.name}'.", code="invalid_value",
                                 param=f"{param}[{i}].name")
        tools.append(tool)
    return tuple(tools)


def _tool(raw: object, param: str) -> Tool:
    obj = f.obj(raw, param)
    kind = obj.get("type", "function")
    if kind != "function":  # mcp servers and the like: not served, so never dropped
        raise f.wrong_value(f"{param}.type", kind, ("function",))
    name = obj.get("name")
    if name is None:
        raise InvalidRequest(f"Missing required parameter: '{param}.name'.",
                             code="missing_required_parameter", param=f"{param}.name")
    if not isinstance(name, str):
        raise f.wrong_type(f"{param}.name", "a string", name)
    if not _NAME.fullmatch(name):
        raise InvalidRequest(f"Invalid '{param}.name': string does not match pattern. "
                             "Expected a string that matches the pattern "
                             "'^[a-zA-Z0-9_-]{1,64}$'.", code="invalid_value",
                             param=f"{param}.name")
    description = limits.bounded(f.text(obj, "description", "", param),
                                 limits.TOOL_DESCRIPTION, f"{param}.description")
    parameters = obj.get("parameters")
    if parameters is None:
        return Tool(name, description)
    schema = f.obj(parameters, f"{param}.parameters")
    if schema.get("type", "object") != "object":
        raise InvalidRequest(f"Invalid schema for function '{name}': schema must be a JSON "
                             "Schema of 'type: \"object\"'.", code="invalid_function_parameters",
                             param=f"{param}.parameters")
    limits.bounded_json(schema, limits.TOOL_PARAMETERS, f"{param}.parameters")
    return Tool(name, description, dict(schema))


def parse_tool_choice(value: object, param: str) -> ToolChoice:
    if isinstance(value, str):
        if value not in CHOICES:
            raise f.wrong_value(param, value, CHOICES)
        return ToolChoice(value)
    obj = f.obj(value, param)
    kind = obj.get("type")
    if kind != "function":
        raise f.wrong_value(f"{param}.type", kind, ("function",))
    name = obj.get("name")
    if not isinstance(name, str):
        raise f.wrong_type(f"{param}.name", "a string", name)
    return ToolChoice("function", name)


def toolset(tools: tuple[Tool, ...], choice: ToolChoice, param: str,
            parallel: bool = True) -> ToolSet:
    """The set, once a named choice is checked to name one of the tools."""
    if choice.mode == "function" and not any(t.name == choice.name for t in tools):
        raise InvalidRequest(f"Tool choice '{choice.name}' not found in 'tools' parameter.",
                             code="invalid_value", param=f"{param}.name")
    return ToolSet(tools, choice, parallel)


def response_toolset(session: ToolSet, tools: tuple[Tool, ...] | None,
                     choice: ToolChoice | None, parallel: bool | None = None) -> ToolSet:
    """A ``response.create``'s own tools, choice and ``parallel_tool_calls``,
    each defaulting to the session's."""
    return toolset(session.tools if tools is None else tools,
                   session.choice if choice is None else choice, "response.tool_choice",
                   session.parallel if parallel is None else parallel)


def update_toolset(current: ToolSet, obj: Mapping[str, Any], parent: str) -> ToolSet:
    """``current`` with the ``tools``/``tool_choice``/``parallel_tool_calls`` of
    ``obj`` (absent: as they were)."""
    tools = current.tools
    choice = current.choice
    if obj.get("tools") is not None:
        tools = parse_tools(obj["tools"], f.path(parent, "tools"))
    if obj.get("tool_choice") is not None:
        choice = parse_tool_choice(obj["tool_choice"], f.path(parent, "tool_choice"))
    parallel = f.flag(obj, "parallel_tool_calls", current.parallel, parent)
    return toolset(tools, choice, f.path(parent, "tool_choice"), parallel)

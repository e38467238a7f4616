"""The OpenAPI 3.1 schema of the REST API, served at ``/api/v1/openapi.json``."""

from __future__ import annotations

from typing import Any

from memlane import __version__

__all__ = ["openapi_schema"]


def _query(name: str, description: str, kind: str = "string") -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": kind},
    }


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


_PAGING = [
    _query("q", "only records whose JSON contains this text (case-insensitive)"),
    _query("offset", "records to skip", "integer"),
    _query("limit", "records per page (1-500, default 50)", "integer"),
    _query("sort", "the field to sort by (a column of the rows; 400 names the allowed ones)"),
    _query("descending", "true: sort from the largest", "boolean"),
    _query("since", "only records at or after this ISO 8601 date/time (the kind's main time)"),
    _query("until", "only records at or before this ISO 8601 date/time"),
]
_ERROR = {
    "description": "error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_PAGE = {
    "description": "one page",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Page"}}},
}
_OBJECT = {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}


def _list(summary: str, filters: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": [*filters, *_PAGING],
            "responses": {"200": _PAGE, "400": _ERROR, "401": _ERROR},
        }
    }


def _delete(what: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": f"delete {what} by id",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Ids"}}},
            },
            "responses": {
                "200": {
                    "description": "what was deleted and what was not found",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Deleted"}}
                    },
                },
                "400": _ERROR,
                "401": _ERROR,
                "413": _ERROR,
                "415": _ERROR,
            },
        }
    }


def _patch(summary: str, parameters: list[dict[str, Any]], body: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": summary,
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object", **body}}},
        },
        "responses": {
            "200": _OBJECT,
            "400": _ERROR,
            "401": _ERROR,
            "404": _ERROR,
            "413": _ERROR,
            "415": _ERROR,
        },
    }


_ANY = {"description": "any JSON value"}
_USER = (
    "this user's: an id, a merged id, channel:id or a display name (400 with the candidates "
    "when several users share it); an id no user record holds is taken as it is"
)
_CONVERSATIONS = _list("conversations: turns, tokens, budget use, last activity", [])


def openapi_schema() -> dict[str, Any]:
    """The schema: every path, its parameters, and the shapes of pages, ids and errors."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "memlane",
            "version": __version__,
            "description": "Browse, search, edit and delete what agents remember.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "string"}},
                },
                "Ids": {
                    "type": "object",
                    "required": ["ids"],
                    "properties": {
                        "ids": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "string", "minLength": 1},
                        }
                    },
                },
                "Deleted": {
                    "type": "object",
                    "properties": {
                        "deleted": {"type": "array", "items": {"type": "string"}},
                        "not_found": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "Page": {
                    "type": "object",
                    "properties": {
                        "items": {"type": "array", "items": {"type": "object"}},
                        "total": {"type": "integer"},
                        "offset": {"type": "integer"},
                        "limit": {"type": "integer"},
                    },
                },
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/facts/": _list(
                "long-term facts; id: global:KEY or SCOPE:SCOPE_ID:KEY",
                [
                    _query("scope", "session, user, agent or global"),
                    _query("scope_id", "the id within scope"),
                    _query("user_id", _USER),
                    _query("agent_id", "facts of this agent"),
                    _query("session_id", "facts of this session"),
                    _query("type", "fact type, e.g. user_preference"),
                ],
            ),
            "/api/v1/facts/batch-delete/": _delete("facts"),
            "/api/v1/facts/{id}": {
                "patch": _patch(
                    "change a fact's value and/or confidence (logged)",
                    [_path("id")],
                    {
                        "properties": {
                            "value": _ANY,
                            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                        }
                    },
                )
            },
            "/api/v1/episodes/": _list(
                "episodes, most recent first",
                [
                    _query("agent_id", "this agent's"),
                    _query("user_id", _USER),
                    _query("success", "true or false", "boolean"),
                ],
            ),
            "/api/v1/episodes/{id}": {
                "get": {
                    "summary": "one episode in full",
                    "parameters": [_path("id")],
                    "responses": {"200": _OBJECT, "404": _ERROR},
                }
            },
            "/api/v1/episodes/batch-delete/": _delete("episodes"),
            "/api/v1/procedures/": _list("learned procedures", [_query("type", "procedure type")]),
            "/api/v1/procedures/batch-delete/": _delete("procedures"),
            "/api/v1/memory-users/": _list("memory users", []),
            "/api/v1/memory-users/batch-delete/": _delete(
                "users (and their identifier index entries)"
            ),
            "/api/v1/memory-users/{id}": {
                "patch": _patch(
                    "rename a user (logged)",
                    [_path("id")],
                    {
                        "required": ["display_name"],
                        "properties": {"display_name": {"type": ["string", "null"]}},
                    },
                ),
                "delete": {
                    "summary": (
                        "delete a user; cascade=true forgets every record of that person "
                        "(facts, episodes, conversations, channel ids), dry_run=true lists them"
                    ),
                    "parameters": [
                        _path("id"),
                        _query("cascade", "true: every record of the person", "boolean"),
                        _query("dry_run", "true: list what would go, delete nothing", "boolean"),
                    ],
                    "responses": {"200": _OBJECT, "400": _ERROR, "401": _ERROR, "404": _ERROR},
                },
            },
            "/api/v1/checkpoints/": _CONVERSATIONS,
            "/api/v1/checkpoints/batch-delete/": _delete("conversations"),
            "/api/v1/conversations/": _CONVERSATIONS,
            "/api/v1/conversations/batch-delete/": _delete("conversations"),
            "/api/v1/totals/": {
                "get": {
                    "summary": "how many records of each kind, and the store's bytes",
                    "responses": {"200": _OBJECT, "401": _ERROR},
                }
            },
            "/api/v1/conversations/{id}": {
                "get": {
                    "summary": (
                        "a conversation: its own budget, summary, the turns sent now, and the "
                        "whole transcript (summarised turns included)"
                    ),
                    "parameters": [_path("id")],
                    "responses": {"200": _OBJECT, "404": _ERROR},
                }
            },
            "/api/v1/working/": {
                "get": {"summary": "working-memory scopes", "responses": {"200": _OBJECT}}
            },
            "/api/v1/working/{scope}/": {
                "get": {
                    "summary": "a working-memory scope's facts",
                    "parameters": [_path("scope")],
                    "responses": {"200": _OBJECT},
                }
            },
            "/api/v1/working/{scope}/batch-delete/": _delete("working-memory facts by key"),
            "/api/v1/working/{scope}/{key}": {
                "patch": _patch(
                    "set a working-memory fact's value (and importance); logged. The key is "
                    "the last segment, percent-encoded (a '/' in it as %2F, '%' as %25, '?' "
                    "as %3F, '#' as %23) and decoded once, so any key can be named",
                    [
                        _path("scope"),
                        {
                            **_path("key"),
                            "description": "percent-encoded UTF-8, decoded once; may hold '/'",
                        },
                    ],
                    {
                        "required": ["value"],
                        "properties": {
                            "value": _ANY,
                            "importance": {"type": "number", "minimum": 0, "maximum": 1},
                        },
                    },
                )
            },
            "/api/v1/search/": {
                "get": {
                    "summary": "ranked search over facts, procedures and episodes",
                    "parameters": [
                        {**_query("q", "the words to search for"), "required": True},
                        _query("type", "all, facts, procedures or episodes"),
                        _query(
                            "user_id", "facts visible to this user (id, channel:id or display name)"
                        ),
                        _query("agent_id", "facts visible to this agent"),
                        _query("session_id", "facts visible to this session"),
                        _query("limit", "at most this many", "integer"),
                    ],
                    "responses": {"200": _OBJECT, "400": _ERROR},
                }
            },
        },
    }

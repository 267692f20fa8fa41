"""JSON Schema clients' view of the pipeline models: what editors and `check-jsonschema` read.

pydantic writes a tagged union (a `targets:` entry, a recipe) as `oneOf` plus the OpenAPI
`discriminator` keyword. JSON Schema has no such keyword: a validator ignores it, tries every
branch, and an editor shows the first branch's complaint ('Value must be "torch"') for an entry
that means `coreml` but has a typo in one key. Rewritten as one `if`/`then` per tag, a client
checks the tag against the known ones first and then only the branch the tag names.
"""

from __future__ import annotations

from typing import Any


def tagged_unions_as_if_then(schema: Any) -> Any:
    """A copy of `schema` with every `oneOf` + `discriminator` (with a mapping) as `if`/`then` branches."""
    if isinstance(schema, list):
        return [tagged_unions_as_if_then(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    node = {key: tagged_unions_as_if_then(value) for key, value in schema.items()}
    tag = node.get("discriminator")
    if isinstance(tag, dict) and tag.get("mapping") and "oneOf" in node:
        prop = tag["propertyName"]
        order = [branch.get("$ref") for branch in node["oneOf"]]  # the union's order: the registry's
        mapping = dict(sorted(tag["mapping"].items(), key=lambda item: order.index(item[1]) if item[1] in order
                              else len(order)))
        del node["discriminator"], node["oneOf"]
        node.update({
            "type": "object",
            "required": [prop],
            "properties": {prop: {"enum": list(mapping), "description": f"One of: {', '.join(mapping)}."}},
            "allOf": [{"if": {"properties": {prop: {"const": value}}, "required": [prop]}, "then": {"$ref": ref}}
                      for value, ref in mapping.items()],
        })
    return node

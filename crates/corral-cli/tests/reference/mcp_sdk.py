"""The official MCP Python SDK (`mcp`) against corral, over stdio and over streamable HTTP.

Usage: mcp_sdk.py CORRAL_BINARY WORKDIR URL TOKEN

- stdio: spawns `CORRAL_BINARY mcp --principal agent` in WORKDIR (its corral.yaml);
- HTTP: connects to URL/mcp (a running `corral serve`) with `Authorization: Bearer TOKEN`.

For each, prints what a client sees: the server's name and version, whether the tool list
holds files.read (with a described `path`), a read's text, and a refused call's error. Last,
one JSON document on stdout.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def attr(obj, *names):
    """The first of `names` that `obj` has (the SDK's 1.x camelCase, 2.x snake_case)."""
    for n in names:
        if hasattr(obj, n):
            return getattr(obj, n)
    raise AttributeError(f"{type(obj).__name__} has none of {names}")


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def exercise(session):
    init = await session.initialize()
    tools = (await session.list_tools()).tools
    by_name = {t.name: t for t in tools}
    read = by_name.get("files.read")
    described = bool(
        read
        and attr(read, "input_schema", "inputSchema")
        .get("properties", {})
        .get("path", {})
        .get("description")
    )
    ok = await session.call_tool("files.read", {"path": "notes.txt"})
    refused = await session.call_tool("commands.run", {"argv": ["id"]})
    info = attr(init, "server_info", "serverInfo")
    return {
        "server": [info.name, info.version],
        "has_read": read is not None,
        "described": described,
        "read": [bool(attr(ok, "is_error", "isError")), text_of(ok)],
        "refused": [bool(attr(refused, "is_error", "isError")), text_of(refused)],
    }


async def over_stdio(corral, workdir):
    params = StdioServerParameters(
        command=corral, args=["mcp", "--principal", "agent"], cwd=workdir
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            return await exercise(session)


async def over_http(url, token):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url + "/mcp", http_client=client) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                return await exercise(session)


async def main():
    corral, workdir, url, token = sys.argv[1:5]
    out = {
        "stdio": await over_stdio(corral, workdir),
        "http": await over_http(url, token),
    }
    print(json.dumps(out))


asyncio.run(main())

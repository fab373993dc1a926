"""Drives `quire mcp` with the Python MCP SDK over stdio against a live `quire serve`.

Every tool once where it succeeds and once where it fails (the failure is a tool error
carrying the Mark status), a three-way merge on a conflict (clean and with markers), the
client's name recorded as `agent` on writes, and a resource subscription notified by a
change. Prints "all checks passed" at the end; any failed check raises.

Run by server/tests/real_clients.rs; by hand:
    python drive.py --quire target/debug/quire --server http://127.0.0.1:6309 \
        --token "$QUIRE_TOKEN" --prefix /try/
"""

import argparse
import asyncio
import re
import warnings

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client, types

AGENT = "quire-test-agent"
TOOLS = {
    "fetch", "list", "versions", "lookup", "publish", "append", "archive",
    "discover", "backlinks",
}
# A guard against a hang, never reached when the server behaves.
WAIT = 30


def text_of(result):
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def meta_of(text):
    """The Mark metadata block at the head of a tool answer, as a dict."""
    match = re.match(r"---\n(.*?)---\n", text, re.S)
    assert match, f"no metadata block in {text!r}"
    pairs = {}
    for line in match.group(1).splitlines():
        key, _, value = line.partition(": ")
        pairs[key] = value.strip('"')
    return pairs


def body_of(text):
    return re.sub(r"\A---\n.*?---\n", "", text, count=1, flags=re.S)


class Checks:
    def __init__(self, session):
        self.session = session
        self.count = 0

    async def ok(self, tool, **arguments):
        result = await self.session.call_tool(tool, arguments)
        text = text_of(result)
        assert not result.is_error, f"{tool} {arguments} failed: {text}"
        self.count += 1
        return meta_of(text), body_of(text)

    async def fails(self, tool, status, **arguments):
        result = await self.session.call_tool(tool, arguments)
        text = text_of(result)
        assert result.is_error, f"{tool} {arguments} should fail with {status}: {text}"
        meta = meta_of(text)
        assert meta.get("status") == status, f"{tool}: wanted {status}, got {text}"
        self.count += 1
        return meta, body_of(text)


def server_params(args, token):
    command = [ "mcp", "--server", args.server]
    if token:
        command += ["--token", token]
    if args.server.startswith("mark://"):
        command += ["--ca", args.ca]
    # No QUIRE_TOKEN in the child's environment: the token is only what --token says.
    return StdioServerParameters(command=args.quire, args=command, env={"RUST_LOG": "warn"})


async def drive(args):
    p = args.prefix
    updates = []
    updated = anyio.Event()

    async def on_message(message):
        inner = getattr(message, "root", message)
        if isinstance(inner, types.ResourceUpdatedNotification):
            updates.append(inner.params.uri)
            updated.set()

    params = server_params(args, args.token)
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write,
            client_info=types.Implementation(name=AGENT, version="1.0"),
            message_handler=on_message,
        ) as session:
            init = await session.initialize()
            assert init.server_info.name == "quire", init
            listed = await session.list_tools()
            names = {tool.name for tool in listed.tools}
            assert names == TOOLS, names
            publish = next(t for t in listed.tools if t.name == "publish")
            assert "expected_version" in publish.input_schema.get("required", []), publish.input_schema
            c = Checks(session)
            hello = f"{p}hello.md"
            original = "# Hello\n\nline one\nline two\nline three\n\n## Part\n\npart text\n"

            # publish: create-only, then the same create refused
            meta, _ = await c.ok("publish", path=hello, body=original, expected_version=0,
                                 metadata={"title": "Hello world", "tags": "greeting"})
            assert meta["status"] == "created" and meta["version"] == "1", meta
            meta, _ = await c.fails("publish", "conflict", path=hello, body="# x\n", expected_version=0)
            assert "merge" not in meta, meta
            await c.fails("publish", "bad-request", path=f"{p}not-markdown.txt", body="x", expected_version=0)

            # fetch: current, pinned, a section; the agent's name recorded
            meta, body = await c.ok("fetch", path=hello)
            assert body == original and meta["version"] == "1", (meta, body)
            # the token's label leads; the client's own name follows in parentheses
            assert re.fullmatch(rf"\S.* \({re.escape(AGENT)}\)", meta.get("agent", "")), meta
            assert meta.get("title") == "Hello world", meta
            meta, body = await c.ok("fetch", path=hello + "#part")
            assert body == "## Part\n\npart text\n" and meta["section"] == "part", (meta, body)
            meta, body = await c.ok("fetch", path=hello, version=1, section="Part")
            assert body.startswith("## Part"), body
            await c.fails("fetch", "not-found", path=hello + "#missing")
            await c.fails("fetch", "not-found", path=f"{p}missing.md")
            await c.fails("fetch", "not-found", path=hello, version=9)

            # a three-way merge: another writer changed line three, this agent line one
            await c.ok("publish", path=hello, expected_version=1,
                       body=original.replace("line three", "line THREE"))
            meta, merged = await c.fails("publish", "conflict", path=hello, expected_version=1,
                                         on_conflict="merge",
                                         body=original.replace("line one", "line ONE"))
            assert meta["merge"] == "clean" and meta["server-version"] == "2", meta
            assert "line ONE" in merged and "line THREE" in merged and "<<<<<<<" not in merged, merged
            meta, _ = await c.ok("publish", path=hello, body=merged, expected_version=2)
            assert meta["version"] == "3", meta
            # both changed line two: markers, and `fail` answers the plain conflict
            await c.ok("publish", path=hello, expected_version=3,
                       body=merged.replace("line two", "line two (theirs)"))
            meta, marked = await c.fails("publish", "conflict", path=hello, expected_version=3,
                                         on_conflict="merge",
                                         body=merged.replace("line two", "line two (mine)"))
            assert meta["merge"] == "conflicts", meta
            assert "<<<<<<< ours\nline two (mine)\n=======\nline two (theirs)\n>>>>>>> theirs\n" in marked, marked
            meta, plain = await c.fails("publish", "conflict", path=hello, expected_version=3,
                                        body="# plain\n")
            assert "merge" not in meta and "version 4" in plain, (meta, plain)

            # append
            meta, _ = await c.ok("append", path=hello, body="appended\n", expected_version=4)
            assert meta["version"] == "5", meta
            await c.fails("append", "conflict", path=hello, body="again\n", expected_version=4)
            await c.fails("append", "not-found", path=f"{p}missing.md", body="x\n", expected_version=1)

            # list, paged
            await c.ok("publish", path=f"{p}second.md", body="# Second\n", expected_version=0,
                       metadata={"tags": "greeting"})
            meta, body = await c.ok("list", path=p)
            assert "hello.md" in body and "second.md" in body and meta["complete"] == "true", body
            meta, body = await c.ok("list", path=p, page_size=1)
            assert meta["complete"] == "false" and meta["entries"] == "1", meta
            meta, body = await c.ok("list", path=p, page_size=1, cursor=meta["next-cursor"])
            assert "second.md" in body, body
            await c.fails("list", "not-found", path=f"{p}nowhere/")
            await c.fails("list", "bad-request", path=p, page_size=5000)

            # versions
            meta, body = await c.ok("versions", path=hello)
            assert meta["total"] == "5" and meta["chain-valid"] == "true", meta
            assert f"]({hello}/v1)" in body, body
            await c.fails("versions", "not-found", path=f"{p}missing.md")

            # lookup: catalog, and body where the world has it (else answered from the catalog)
            meta, body = await c.ok("lookup", query="hello", scope=p)
            assert int(meta["matches"]) >= 1 and hello in body, (meta, body)
            meta, body = await c.ok("lookup", query="*", scope=p, filter="tag=greeting", limit=5)
            assert meta["matches"] == "1" and f"{p}second.md" in body, (meta, body)
            meta, body = await c.ok("lookup", query="part text", scope=p, match="body")
            assert meta["match"] in ("body", "catalog"), meta
            await c.fails("lookup", "bad-request", query="x", scope=p)
            await c.fails("lookup", "not-found", query="hello", scope=f"{p}nowhere/")

            # backlinks
            await c.ok("publish", path=f"{p}links/to-hello.md", expected_version=0,
                       body="# Links\n\nSee [hello](../hello.md#part) and [out](https://example.com/).\n")
            meta, body = await c.ok("backlinks", path=hello, scope=p)
            assert meta["matches"] == "1" and f"{p}links/to-hello.md" in body, (meta, body)
            assert meta["complete"] == "true", meta
            meta, body = await c.ok("backlinks", path=f"{p}second.md", scope=p)
            assert meta["matches"] == "0", body
            await c.fails("backlinks", "not-found", path=hello, scope=f"{p}nowhere/")

            # discover: the manifest, once it exists
            manifest = "/.well-known/agent-manifest.md"
            existing = await session.call_tool("fetch", {"path": manifest})
            if existing.is_error:
                await c.fails("discover", "not-found")
                await c.ok("publish", path=manifest, expected_version=0,
                           body="# Agent manifest\n\nRead /notes/ first.\n")
            meta, body = await c.ok("discover")
            assert body.startswith("# Agent manifest"), body

            # archive
            meta, _ = await c.ok("archive", path=f"{p}second.md")
            assert meta["archived"] == "true", meta
            await c.fails("fetch", "archived", path=f"{p}second.md")
            await c.fails("archive", "not-found", path=f"{p}missing.md")

            # resources: listed, read, and a subscription told of a change
            resources = await session.list_resources()
            uris = {r.uri for r in resources.resources}
            hello_uri = next((u for u in uris if u.endswith(hello)), None)
            assert hello_uri, uris
            read_back = await session.read_resource(hello_uri)
            assert read_back.contents[0].text.startswith("# Hello"), read_back
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await session.subscribe_resource(hello_uri)
            meta, _ = await c.fails("fetch", "not-found", path=hello, version=99)
            meta, _ = await c.ok("fetch", path=hello)
            await c.ok("append", path=hello, body="watched\n", expected_version=int(meta["version"]))
            with anyio.fail_after(WAIT):
                await updated.wait()
            assert updates[0] == hello_uri, updates
            print(f"{c.count} tool checks passed; notified of {updates[0]}")

    # Without a token, writes are refused with the Mark status.
    async with stdio_client(server_params(args, None)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            c = Checks(session)
            await c.fails("publish", "unauthorized", path=f"{p}anon.md", body="# x\n", expected_version=0)
            await c.ok("fetch", path=f"{p}hello.md")
    print("all checks passed")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quire", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--prefix", default="/mcp/")
    parser.add_argument("--ca")
    asyncio.run(drive(parser.parse_args()))


if __name__ == "__main__":
    main()

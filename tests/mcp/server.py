"""A real MCP server written with the ``mcp`` SDK, for the tests: ``python server.py`` speaks
stdio, ``python server.py http PORT`` streamable HTTP on 127.0.0.1:PORT.

Tools: ``echo`` (read-only), ``write_note`` (changes things: writes NOTES_FILE), ``crash`` (the
process exits), ``shout`` (a long text holding the TEST_SECRET value), ``whoami`` (the env and cwd
it sees), ``hang`` (answers after ``seconds``: a call that hangs).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("test")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def write_note(text: str) -> str:
    """Append a line to the notes file."""
    with open(os.environ.get("NOTES_FILE", "notes.txt"), "a") as f:
        f.write(text + "\n")
    return "written"


@server.tool()
def crash() -> str:
    """Stop the server process at once."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def shout(times: int) -> str:
    """A long answer that quotes the secret."""
    return ("secret " + os.environ.get("TEST_SECRET", "none") + " ") * times


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami() -> str:
    """The server's working directory, the TEST_SECRET it got, its pid (in its own PID namespace
    when it runs in a sandbox) and its start time (clock ticks since boot: the same everywhere)."""
    with open("/proc/self/stat") as fh:
        start = fh.read().rsplit(")", 1)[1].split()[19]
    secret = "set" if os.environ.get("TEST_SECRET") else "unset"
    return f"cwd={os.getcwd()} secret={secret} pid={os.getpid()} start={start}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def hang(seconds: float) -> str:
    """Answer only after ``seconds``."""
    time.sleep(seconds)
    return "too late"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()

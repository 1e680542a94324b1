"""How Emacs and other clients reach the worker.

The EPC server and its codec (Emacs), the Python client (scripts, tests,
benchmarks), the MCP server and the JSON-lines SDK (other agents), with
the rendezvous that lets those find a running worker and the reviews they
ask of its Emacs.  The transport knows messages, not tools: it decodes a
request, hands it to :class:`forj_py.service.Worker`, and encodes the
answer or the events.
"""

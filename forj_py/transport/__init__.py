"""How Emacs and other clients reach the worker: the EPC server, the test client, the codec.

The transport knows messages, not tools: it decodes a request, hands it to
:class:`forj_py.service.Service`, and encodes the answer or the events.
"""

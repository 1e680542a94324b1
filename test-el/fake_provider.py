"""A local HTTP server that speaks the providers' streaming wire formats.

The ERT tests of forj-provider*.el start it, point a provider's URL at it,
and let forj's real curl requests hit it.  The first path segment picks the
scenario, ``<family>-<case>``: ``http://127.0.0.1:PORT/openai-text/v1``.
A scenario may end in ``.TAG`` (``openai-ratelimitedonce.7``): scenarios
that answer differently the second time count requests per tag.
Every request is appended to the log file (argv[1]) as one JSON line with
its method, path, headers and body, so tests can check what was sent.
``GET .../models`` and ``GET /api/tags`` list models as an
OpenAI-compatible server and Ollama do.

The event streams follow each provider's published streaming format:
OpenAI chat completions (``data: {chunk}`` ... ``data: [DONE]``),
Anthropic Messages (named events ``message_start`` ... ``message_stop``)
and Gemini ``streamGenerateContent?alt=sse`` (``data: {response}``).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOG = sys.argv[1]
SEEN: Counter[str] = Counter()
SEEN_LOCK = threading.Lock()


def sse(data: Any, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


# --- OpenAI-compatible chat completions ------------------------------------------


def openai_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def openai(case: str) -> list[bytes]:
    if case == "text":
        return [
            openai_chunk({"role": "assistant", "content": ""}),
            openai_chunk({"content": "Hello"}),
            openai_chunk({"content": ", world"}),
            openai_chunk({}, "stop"),
            sse("[DONE]"),
        ]
    if case == "tools":
        return [
            openai_chunk({"role": "assistant", "content": "Reading."}),
            openai_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_abc",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": ""},
                        }
                    ]
                }
            ),
            openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"pa'}}]}),
            openai_chunk(
                {"tool_calls": [{"index": 0, "function": {"arguments": 'th": "a.txt"}'}}]}
            ),
            openai_chunk({}, "tool_calls"),
            sse("[DONE]"),
        ]
    if case == "cut":
        return [openai_chunk({"content": "Half a"}), b'data: {"id": "chatcmpl-1", "choi']
    if case == "length":
        return [
            openai_chunk({"content": "A long answer that"}),
            openai_chunk({}, "length"),
            sse("[DONE]"),
        ]
    if case == "lengthcalls":
        # Fenced calls, as forj asks a model without native tools: one whole,
        # one cut in the middle.
        whole = '```tool-call\n{"id": "w1", "name": "list_files", "args": {}}\n```\n'
        return [
            openai_chunk({"content": "Two calls.\n\n" + whole}),
            openai_chunk({"content": '```tool-call\n{"id": "w2", "name": "read_f'}),
            openai_chunk({}, "length"),
            sse("[DONE]"),
        ]
    if case == "cuttool":
        return [
            openai_chunk({"role": "assistant", "content": "Writing."}),
            openai_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_cut",
                            "type": "function",
                            "function": {
                                "name": "write_file",
                                "arguments": '{"path": "a.txt", "con',
                            },
                        }
                    ]
                }
            ),
            openai_chunk({}, "length"),
            sse("[DONE]"),
        ]
    if case == "refusal":
        return [
            openai_chunk({"role": "assistant", "content": None, "refusal": ""}),
            openai_chunk({"refusal": "I'm sorry, I can't help"}),
            openai_chunk({"refusal": " with that."}),
            openai_chunk({}, "stop"),
            sse("[DONE]"),
        ]
    if case == "filter":
        return [
            openai_chunk({"content": "Here is"}),
            openai_chunk({}, "content_filter"),
            sse("[DONE]"),
        ]
    if case == "usage":
        # With stream_options.include_usage the last chunk before [DONE] has
        # the usage and an empty choices list; prompt_tokens includes the
        # cached tokens.
        return [
            openai_chunk({"role": "assistant", "content": "Hello"}),
            openai_chunk({}, "stop"),
            sse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 1700000000,
                    "model": "fake",
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 1200,
                        "completion_tokens": 50,
                        "total_tokens": 1250,
                        "prompt_tokens_details": {"cached_tokens": 1024},
                        "completion_tokens_details": {"reasoning_tokens": 0},
                    },
                }
            ),
            sse("[DONE]"),
        ]
    if case == "noids":
        # llama.cpp and some Ollama models: tool calls with no id at all.
        return [
            openai_chunk({"role": "assistant", "content": "Reading."}),
            openai_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                        }
                    ]
                }
            ),
            openai_chunk({}, "tool_calls"),
            sse("[DONE]"),
        ]
    if case == "noindex":
        # Each call whole in its own chunk, with no index (as some servers send).
        def whole(path: str) -> bytes:
            return openai_chunk(
                {
                    "tool_calls": [
                        {
                            "type": "function",
                            "function": {
                                "name": "read_file",
                                "arguments": json.dumps({"path": path}),
                            },
                        }
                    ]
                }
            )

        return [
            openai_chunk({"role": "assistant", "content": ""}),
            whole("a.txt"),
            whole("b.txt"),
            openai_chunk({}, "tool_calls"),
            sse("[DONE]"),
        ]
    if case == "vllmerror":
        return [
            sse(
                {
                    "object": "error",
                    "message": "This model's maximum context length is 4096 tokens.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            )
        ]
    if case == "streamerror":
        # llama.cpp's server: the prompt does not fit, said inside the stream.
        return [
            openai_chunk({"role": "assistant", "content": ""}),
            sse(
                {
                    "error": {
                        "code": 400,
                        "message": "Requested tokens (25227) exceed context window of 8192",
                        "type": "exceed_context_size_error",
                    }
                }
            ),
        ]
    if case == "errorline":
        # Older llama.cpp servers: an `error:' line, which is no SSE field.
        return [
            openai_chunk({"role": "assistant", "content": ""}),
            b'error: {"code":500,"message":"Requested tokens (25227) exceed context window'
            b' of 8192","type":"server_error"}\n\n',
        ]
    if case == "badutf8":
        return [
            openai_chunk({"content": "ok "}),
            b'data: {"choices":[{"index":0,"delta":{"content":"caf\xe9 \xff"}}]}\n\n',
            openai_chunk({}, "stop"),
            sse("[DONE]"),
        ]
    raise KeyError(case)


# --- Anthropic Messages ------------------------------------------------------------


def anthropic(case: str) -> list[bytes]:
    start = sse(
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "fake",
                "stop_reason": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            },
        },
        "message_start",
    )
    stop = [
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 5},
            },
            "message_delta",
        ),
        sse({"type": "message_stop"}, "message_stop"),
    ]
    text_block = [
        sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        ),
        sse({"type": "ping"}, "ping"),
        sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hello"},
            },
            "content_block_delta",
        ),
        sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": ", world"},
            },
            "content_block_delta",
        ),
        sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
    ]
    if case == "text":
        return [start, *text_block, *stop]
    if case == "tools":
        tool = [
            sse(
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "read_file",
                        "input": {},
                    },
                },
                "content_block_start",
            ),
            sse(
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": '{"path": '},
                },
                "content_block_delta",
            ),
            sse(
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": '"a.txt"}'},
                },
                "content_block_delta",
            ),
            sse({"type": "content_block_stop", "index": 1}, "content_block_stop"),
        ]
        return [start, *text_block, *tool, *stop]
    if case == "overloaded":
        return [
            start,
            *text_block[:3],
            sse(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                "error",
            ),
        ]
    if case == "cut":
        return [start, *text_block[:3]]

    def ended(reason: str) -> list[bytes]:
        return [
            sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
                "message_delta",
            ),
            sse({"type": "message_stop"}, "message_stop"),
        ]

    if case == "refusal":
        return [start, *text_block, *ended("refusal")]
    if case == "refusalbare":
        return [start, *ended("refusal")]
    if case == "maxtokens":
        return [start, *text_block, *ended("max_tokens")]
    if case == "cuttool":
        cut = [
            sse(
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {
                        "type": "tool_use",
                        "id": "toolu_02",
                        "name": "write_file",
                        "input": {},
                    },
                },
                "content_block_start",
            ),
            sse(
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": '{"path": "a.txt", "cont',
                    },
                },
                "content_block_delta",
            ),
            sse({"type": "content_block_stop", "index": 1}, "content_block_stop"),
        ]
        return [start, *text_block, *cut, *ended("max_tokens")]
    if case == "usage":
        # Prompt tokens in three parts: full price, read from the cache and
        # written to it; the output count grows in message_delta.
        cached_start = sse(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "fake",
                    "stop_reason": None,
                    "usage": {
                        "input_tokens": 20,
                        "cache_creation_input_tokens": 1500,
                        "cache_read_input_tokens": 3000,
                        "output_tokens": 1,
                    },
                },
            },
            "message_start",
        )
        end = sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 42},
            },
            "message_delta",
        )
        return [cached_start, *text_block, end, stop[1]]
    if case == "thinking":
        return [
            start,
            *anthropic_thinking(0),
            *anthropic_tool(2, "toolu_think", "a.txt"),
            *ended("tool_use"),
        ]
    if case == "wholeinput":
        # The input whole at the block's start, no input_json_delta.
        return [
            start,
            sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {
                        "type": "tool_use",
                        "id": "toolu_whole",
                        "name": "read_file",
                        "input": {"path": "a.txt"},
                    },
                },
                "content_block_start",
            ),
            sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            *ended("tool_use"),
        ]
    if case == "pause":
        return [start, *text_block, *ended("pause_turn")]
    if case == "badutf8":
        return [
            start,
            text_block[0],
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"caf\xe9 \xff"}}\n\n',
            text_block[4],
            *stop,
        ]
    raise KeyError(case)


THINKING = "The user wants a.txt; I will read it."
THINKING_SIGNATURE = "EqQBCkYIARgCKkBSIG-thinking-signature=="
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"


def anthropic_thinking(index: int) -> list[bytes]:
    """A thinking block streamed in pieces, its signature last, then a redacted one."""

    def delta(d: dict[str, Any]) -> bytes:
        return sse(
            {"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta"
        )

    return [
        sse(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "thinking", "thinking": ""},
            },
            "content_block_start",
        ),
        delta({"type": "thinking_delta", "thinking": THINKING[:20]}),
        delta({"type": "thinking_delta", "thinking": THINKING[20:]}),
        delta({"type": "signature_delta", "signature": THINKING_SIGNATURE}),
        sse({"type": "content_block_stop", "index": index}, "content_block_stop"),
        sse(
            {
                "type": "content_block_start",
                "index": index + 1,
                "content_block": {"type": "redacted_thinking", "data": REDACTED},
            },
            "content_block_start",
        ),
        sse({"type": "content_block_stop", "index": index + 1}, "content_block_stop"),
    ]


def anthropic_tool(index: int, tool_id: str, path: str) -> list[bytes]:
    return [
        sse(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {
                    "type": "tool_use",
                    "id": tool_id,
                    "name": "read_file",
                    "input": {},
                },
            },
            "content_block_start",
        ),
        sse(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps({"path": path})},
            },
            "content_block_delta",
        ),
        sse({"type": "content_block_stop", "index": index}, "content_block_stop"),
    ]


# --- Gemini --------------------------------------------------------------------------


def gemini_chunk(parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return sse(
        {
            "candidates": [candidate],
            "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 12},
            "modelVersion": "fake",
        }
    )


def gemini(case: str) -> list[bytes]:
    if case == "text":
        return [gemini_chunk([{"text": "Hello"}]), gemini_chunk([{"text": ", world"}], "STOP")]
    if case == "tools":
        return [
            gemini_chunk([{"text": "Reading."}]),
            gemini_chunk(
                [{"functionCall": {"name": "read_file", "args": {"path": "a.txt"}}}], "STOP"
            ),
        ]
    if case == "cut":
        return [gemini_chunk([{"text": "Half a"}]), b'data: {"candidates": [{"content": ']
    if case == "usage":
        # Every chunk repeats the usage so far; promptTokenCount includes
        # the cached tokens, thinking tokens are counted apart.
        def chunk(text: str, output: int, finish: str | None = None) -> bytes:
            candidate: dict[str, Any] = {
                "content": {"parts": [{"text": text}], "role": "model"},
                "index": 0,
            }
            if finish:
                candidate["finishReason"] = finish
            return sse(
                {
                    "candidates": [candidate],
                    "usageMetadata": {
                        "promptTokenCount": 1200,
                        "cachedContentTokenCount": 1000,
                        "candidatesTokenCount": output,
                        "thoughtsTokenCount": 8,
                        "totalTokenCount": 1200 + output + 8,
                    },
                    "modelVersion": "fake",
                }
            )

        return [chunk("Hello", 5), chunk(", world", 40, "STOP")]
    if case == "badutf8":
        return [
            b'data: {"candidates":[{"content":{"parts":[{"text":"caf\xe9 \xff"}],"role":"model"}}]}'
            b"\n\n",
            gemini_chunk([{"text": "!"}], "STOP"),
        ]
    if case == "maxtokens":
        return [gemini_chunk([{"text": "Hello"}]), gemini_chunk([{"text": ", wor"}], "MAX_TOKENS")]
    if case == "recitation":
        return [gemini_chunk([{"text": "Once upon"}]), gemini_chunk([], "RECITATION")]
    if case == "withids":
        return [
            gemini_chunk(
                [
                    {
                        "functionCall": {
                            "id": "fc-123",
                            "name": "read_file",
                            "args": {"path": "a.txt"},
                        },
                        "thoughtSignature": "SIG-ID",
                    }
                ],
                "STOP",
            )
        ]
    if case == "signature":
        # Gemini 3: a thought signature on the text part and on the call.
        return [
            gemini_chunk([{"text": "Reading.", "thoughtSignature": "SIG-TEXT"}]),
            gemini_chunk(
                [
                    {
                        "functionCall": {"name": "read_file", "args": {"path": "a.txt"}},
                        "thoughtSignature": "SIG-CALL-1",
                    }
                ],
                "STOP",
            ),
        ]
    if case == "safety":
        return [
            gemini_chunk([{"text": "Here"}]),
            sse(
                {
                    "candidates": [
                        {
                            "content": {"parts": [], "role": "model"},
                            "finishReason": "SAFETY",
                            "index": 0,
                            "safetyRatings": [
                                {
                                    "category": "HARM_CATEGORY_HARASSMENT",
                                    "probability": "NEGLIGIBLE",
                                },
                                {
                                    "category": "HARM_CATEGORY_DANGEROUS_CONTENT",
                                    "probability": "HIGH",
                                    "blocked": True,
                                },
                            ],
                        }
                    ]
                }
            ),
        ]
    if case == "blocked":
        return [
            sse(
                {
                    "promptFeedback": {
                        "blockReason": "PROHIBITED_CONTENT",
                        "safetyRatings": [
                            {"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "HIGH"}
                        ],
                    },
                    "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 10},
                }
            )
        ]
    raise KeyError(case)


STREAMS = {"openai": openai, "anthropic": anthropic, "gemini": gemini}

# --- A model with a small window, for compaction ------------------------------------
#
# Every reply reports a prompt of 900 tokens, so a second request in a
# 1000-token window is over forj's threshold.  A request that asks for a
# summary gets one.

SUMMARY_ASK = "Write a summary that replaces"
SUMMARY = "SUMMARY-OF-EARLIER: the user asked what notes.txt says; it says remember the milk."


READ_CALL = (
    "Reading.\n\n```tool-call\n"
    '{"id": "r1", "name": "read_file", "args": {"path": "notes.txt"}}\n```\n'
)


def compact(family: str, body: str, with_tools: bool = False, long: bool = False) -> list[bytes]:
    if family != "openai":
        raise KeyError(family)
    if SUMMARY_ASK in body:
        text = SUMMARY
    elif with_tools and "remember the milk" not in body:
        # Until the model has read notes.txt, it asks to.
        text = READ_CALL
    elif long and "SUMMARY-OF-EARLIER" not in body:
        # Before the summary, a reply long enough to scroll through.
        text = "\n".join(f"long line {i}" for i in range(1, 251))
    else:
        text = "Answered."
    # 92% of an 8,000-token window: the next request is compacted first.
    usage = {"prompt_tokens": 7340, "completion_tokens": 20, "total_tokens": 7360}
    return [
        openai_chunk({"role": "assistant", "content": text}),
        openai_chunk({}, "stop"),
        sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}),
        sse("[DONE]"),
    ]


# --- Conversations over several requests ---------------------------------------------
#
# ``<family>-<case>.<tag>``: the Nth request of a tag gets the Nth stream.


def openai_call(path: str, call_id: str | None = None) -> list[bytes]:
    """A reply of one call, with no id (as llama.cpp sends them) unless CALL_ID."""
    return [
        openai_chunk(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "index": 0,
                        **({"id": call_id} if call_id else {}),
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
                    }
                ],
            }
        ),
        openai_chunk({}, "tool_calls"),
        sse("[DONE]"),
    ]


def openai_text(text: str) -> list[bytes]:
    return [
        openai_chunk({"role": "assistant", "content": text}),
        openai_chunk({}, "stop"),
        sse("[DONE]"),
    ]


def gemini_call(path: str, signature: str) -> list[bytes]:
    return [
        gemini_chunk(
            [
                {
                    "functionCall": {"name": "read_file", "args": {"path": path}},
                    "thoughtSignature": signature,
                }
            ],
            "STOP",
        )
    ]


def anthropic_message(blocks: list[bytes], reason: str) -> list[bytes]:
    return [
        sse(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "fake",
                    "stop_reason": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
            "message_start",
        ),
        *blocks,
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason},
                "usage": {"output_tokens": 5},
            },
            "message_delta",
        ),
        sse({"type": "message_stop"}, "message_stop"),
    ]


def anthropic_text(index: int, text: str) -> list[bytes]:
    return [
        sse(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        ),
        sse(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": text},
            },
            "content_block_delta",
        ),
        sse({"type": "content_block_stop", "index": index}, "content_block_stop"),
    ]


CONVERSATIONS: dict[str, list[list[bytes]]] = {
    "openai-noidloop": [openai_call("a.txt"), openai_call("b.txt"), openai_text("Both read.")],
    # A server that numbers its calls from zero in every reply.
    "openai-dupidloop": [
        openai_call("a.txt", "functions.read_file:0"),
        openai_call("b.txt", "functions.read_file:0"),
        openai_text("Both read."),
    ],
    "gemini-sigloop": [
        gemini_call("a.txt", "SIG-A"),
        gemini_call("b.txt", "SIG-B"),
        [gemini_chunk([{"text": "Both read."}], "STOP")],
    ],
    "anthropic-thinkloop": [
        anthropic_message(
            [*anthropic_thinking(0), *anthropic_tool(2, "toolu_1", "a.txt")], "tool_use"
        ),
        anthropic_message(anthropic_text(0, "Done."), "end_turn"),
    ],
    "anthropic-pauseloop": [
        anthropic_message(anthropic_text(0, "Still searching"), "pause_turn"),
        anthropic_message(anthropic_text(0, "Found it."), "end_turn"),
    ],
}


def native_call(family: str, name: str, args: dict[str, Any], prompt: int = 10) -> list[bytes]:
    """One reply that is a single native call of tool ``name``, in FAMILY's stream.

    ``prompt`` is the prompt's tokens the reply's usage reports.
    """
    if family == "openai":
        usage = {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}
        return [
            openai_chunk({"role": "assistant", "content": ""}),
            openai_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": f"call_{name}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                    ]
                }
            ),
            openai_chunk({}, "tool_calls"),
            sse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": usage,
                }
            ),
            sse("[DONE]"),
        ]
    if family == "anthropic":
        return [
            sse(
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_1",
                        "type": "message",
                        "role": "assistant",
                        "model": "fake",
                        "content": [],
                        "usage": {"input_tokens": prompt, "output_tokens": 1},
                    },
                },
                "message_start",
            ),
            sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "id": f"toolu_{name}", "name": name},
                },
                "content_block_start",
            ),
            sse(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)},
                },
                "content_block_delta",
            ),
            sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 5},
                },
                "message_delta",
            ),
            sse({"type": "message_stop"}, "message_stop"),
        ]
    return [usage_chunk([{"functionCall": {"name": name, "args": args}}], prompt)]


def usage_chunk(parts: list[dict[str, Any]], prompt: int) -> bytes:
    """A last Gemini chunk whose usage counts ``prompt`` tokens of prompt."""
    return sse(
        {
            "candidates": [
                {"content": {"parts": parts, "role": "model"}, "index": 0, "finishReason": "STOP"}
            ],
            "usageMetadata": {
                "promptTokenCount": prompt,
                "candidatesTokenCount": 5,
                "totalTokenCount": prompt + 5,
            },
        }
    )


def text_reply(family: str, text: str, prompt: int) -> list[bytes]:
    """One reply of ``text`` in FAMILY's stream, its usage counting ``prompt`` tokens."""
    if family == "openai":
        usage = {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}
        return [
            openai_chunk({"role": "assistant", "content": text}),
            openai_chunk({}, "stop"),
            sse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": usage,
                }
            ),
            sse("[DONE]"),
        ]
    if family == "anthropic":
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "fake",
            "content": [],
            "usage": {"input_tokens": prompt, "output_tokens": 1},
        }
        return [
            sse({"type": "message_start", "message": message}, "message_start"),
            sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
                "content_block_start",
            ),
            sse(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                },
                "content_block_delta",
            ),
            sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 20},
                },
                "message_delta",
            ),
            sse({"type": "message_stop"}, "message_stop"),
        ]
    return [usage_chunk([{"text": text}], prompt)]


def compact_native(family: str, body: str) -> list[bytes]:
    """A model with native calls whose window fills after one batch.

    It reads notes.txt, reporting a prompt of 6,500 tokens (over 80% of an
    8,000-token window, so the next request is compacted first), writes
    the summary when asked, then answers.
    """
    if SUMMARY_ASK in body:
        return text_reply(family, SUMMARY, 900)
    if "remember the milk" not in body:
        return native_call(family, "read_file", {"path": "notes.txt"}, prompt=6500)
    return text_reply(family, "Answered.", 900)


def load_tools(family: str, body: str) -> list[bytes]:
    """A model that loads the git tools, then calls git_status, then answers.

    Each step is chosen from what the request carries: the git tools
    offered or not, git_status's result present or not.
    """
    if '"git_status"' not in body:
        return native_call(family, "load_tools", {"family": "git"})
    if '\\"ahead\\"' not in body and '"ahead"' not in body:
        return native_call(family, "git_status", {})
    return STREAMS[family]("text")


ERROR_BODIES = {
    "openai": lambda message, kind: {
        "error": {"message": message, "type": kind, "param": None, "code": None}
    },
    "anthropic": lambda message, kind: {
        "type": "error",
        "error": {"type": kind, "message": message},
    },
    "gemini": lambda message, kind: [
        {"error": {"code": 400, "message": message, "status": kind.upper()}}
    ],
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode("utf-8", "replace")
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(
                json.dumps({"path": self.path, "headers": dict(self.headers.items()), "body": body})
                + "\n"
            )
        scenario = self.path.strip("/").split("/")[0]
        if self.path.endswith("/api/show"):
            # Ollama's model details: the window it runs the model with.
            if scenario.startswith("openai-ollamashow"):
                show = {
                    "parameters": "num_ctx                        6144\nstop   <|im_end|>",
                    "model_info": {"qwen2.context_length": 32768},
                }
                self._json(200, show)
            else:
                self._raw(404, "text/plain", b"not found")
            return
        with SEEN_LOCK:
            SEEN[scenario] += 1
            seen = SEEN[scenario]
        family, _, case = scenario.partition(".")[0].partition("-")
        base = scenario.partition(".")[0]
        key = (
            self.headers.get("x-api-key")
            or self.headers.get("x-goog-api-key")
            or (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        )
        if base in CONVERSATIONS:
            steps = CONVERSATIONS[base]
            self._stream(steps[min(seen, len(steps)) - 1])
        elif case == "pausealways":
            self._stream(anthropic_message(anthropic_text(0, "Still going"), "pause_turn"))
        elif case == "hang":
            # Accepts the request and never answers.
            time.sleep(30)
        elif case == "stall":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(STREAMS[family]("text")[0])
            self.wfile.flush()
            time.sleep(30)
        elif case == "error200":
            # A proxy or a local server that answers 200 with a JSON error.
            self._json(
                200, ERROR_BODIES[family]("The model fake-model does not exist", "not_found_error")
            )
        elif case == "echokey":
            # A proxy that repeats the key it was given.
            self._json(
                401, ERROR_BODIES[family](f"Invalid API key {key} for this proxy", "invalid_key")
            )
        elif case == "keytext":
            # A reply that writes the key, cut across chunks.
            self._stream(
                [
                    openai_chunk({"role": "assistant", "content": "Your key is " + key[:6]}),
                    openai_chunk({"content": key[6:] + " and more."}),
                    openai_chunk({}, "stop"),
                    sse("[DONE]"),
                ]
            )
        elif case == "badkey":
            # Gemini answers a wrong key with 400 INVALID_ARGUMENT.
            self._json(
                400,
                ERROR_BODIES[family](
                    "API key not valid. Please pass a valid API key.", "invalid_argument"
                ),
            )
        elif case == "keycall":
            # A call whose arguments carry the key.
            self._stream(
                [
                    openai_chunk(
                        {
                            "role": "assistant",
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "call_key",
                                    "type": "function",
                                    "function": {
                                        "name": "write_file",
                                        "arguments": json.dumps({"path": "k", "content": [key]}),
                                    },
                                }
                            ],
                        }
                    ),
                    openai_chunk({}, "tool_calls"),
                    sse("[DONE]"),
                ]
            )
        elif case == "keycut":
            # A reply that ends in the middle of the key.
            self._stream(
                [
                    openai_chunk({"role": "assistant", "content": "Your key is " + key[:10]}),
                    openai_chunk({}, "stop"),
                    sse("[DONE]"),
                ]
            )
        elif case == "ratelimitedonce" and seen == 1:
            self._json(
                429,
                ERROR_BODIES[family]("Rate limit reached, slow down", "rate_limit_error"),
                {"Retry-After": "1"},
            )
        elif case == "overloadedtwice" and seen <= 2:
            status = 529 if family == "anthropic" else 503
            self._json(status, ERROR_BODIES[family]("Overloaded", "overloaded_error"))
        elif case in ("ratelimitedonce", "overloadedtwice"):
            self._stream(STREAMS[family]("text"))
        elif case == "ratelimitedlong":
            self._json(
                429,
                ERROR_BODIES[family]("Daily quota used up", "rate_limit_error"),
                {"Retry-After": "3600"},
            )
        elif case == "unauthorized":
            self._json(401, ERROR_BODIES[family]("Incorrect API key provided", "invalid_key"))
        elif case == "ratelimited":
            self._json(
                429,
                ERROR_BODIES[family]("Rate limit reached, slow down", "rate_limit_error"),
                {"Retry-After": "7"},
            )
        elif case == "html":
            page = b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"
            self._raw(502, "text/html", page)
        elif case == "empty":
            self._raw(200, "text/event-stream", b"")
        elif case == "compact":
            self._stream(compact(family, body))
        elif case == "compacttools":
            self._stream(compact(family, body, with_tools=True))
        elif case == "compactlong":
            self._stream(compact(family, body, long=True))
        elif case in ("llamacpp", "ollamashow"):
            self._stream(STREAMS[family]("text"))
        elif case == "compactnative":
            self._stream(compact_native(family, body))
        elif case == "loadtools":
            self._stream(load_tools(family, body))
        elif case == "notsse":
            self._raw(200, "text/html", b"<html><body>Sign in to continue</body></html>")
        else:
            self._stream(STREAMS[family](case))

    def do_GET(self) -> None:
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(json.dumps({"path": self.path, "headers": dict(self.headers.items())}) + "\n")
        scenario = self.path.strip("/").split("/")[0]
        path = self.path.partition("?")[0]
        if path.endswith("/props") and scenario.startswith("openai-llamacpp"):
            # llama.cpp's server settings: the window of its slots.
            self._json(200, {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1})
        elif path.endswith("/api/tags"):
            # Ollama's own listing.
            self._json(
                200,
                {
                    "models": [
                        {
                            "name": "qwen2.5-coder:7b",
                            "model": "qwen2.5-coder:7b",
                            "size": 4683087332,
                        },
                        {"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 2019393189},
                    ]
                },
            )
        elif path.endswith("/models") and scenario.startswith("gemini-"):
            # Two pages, as Gemini pages its list.
            flash = {
                "name": "models/gemini-9-flash",
                "supportedGenerationMethods": ["generateContent"],
            }
            if "pageToken=page2" in self.path:
                self._json(200, {"models": [flash]})
                return
            self._json(
                200,
                {
                    "models": [
                        {
                            "name": "models/gemini-9-pro",
                            "supportedGenerationMethods": ["generateContent", "countTokens"],
                        },
                        {
                            "name": "models/text-embedding-9",
                            "supportedGenerationMethods": ["embedContent"],
                        },
                    ],
                    "nextPageToken": "page2",
                },
            )
        elif path.endswith("/models") and scenario.startswith("anthropic-"):
            if self.headers.get("anthropic-version") != "2023-06-01":
                self._json(
                    400,
                    ERROR_BODIES["anthropic"]("anthropic-version missing", "invalid_request_error"),
                )
                return
            self._json(
                200,
                {
                    "data": [
                        {"type": "model", "id": "claude-test-9", "display_name": "Claude Test 9"},
                        {"type": "model", "id": "claude-test-8", "display_name": "Claude Test 8"},
                    ],
                    "has_more": False,
                },
            )
        elif path.endswith("/models") and scenario.startswith("openai-ollama"):
            # An Ollama too old for /v1/models.
            self._raw(404, "text/plain", b"404 page not found")
        elif path.endswith("/models"):
            self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": "local-coder",
                            "object": "model",
                            "created": 1700000000,
                            "owned_by": "me",
                        },
                        {
                            "id": "local-small",
                            "object": "model",
                            "created": 1700000000,
                            "owned_by": "me",
                        },
                    ],
                },
            )
        else:
            self._raw(404, "text/plain", b"not found")

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(status, "application/json", json.dumps(body).encode(), headers)

    def _raw(
        self, status: int, kind: str, data: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, chunks: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(chunk)
            self.wfile.flush()
            time.sleep(0.005)
        self.close_connection = True


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

"""The official `openai` SDK against corral's LLM proxy (run by tests/it/openai_sdk.rs).

Usage: openai_client.py BASE_URL TOKEN. Prints one JSON object: what each call returned, as
the SDK parsed it (a non-streaming completion, a stream, a stream with usage, a stream with
a tool call, the model list, and a provider error as the SDK's APIStatusError), then the
Responses API: a response, a raw event stream, and the SDK's `responses.stream` helper (which
checks the event sequence as it accumulates it) on a response with a function call.
"""

import json
import sys

import openai
from openai import OpenAI


def main() -> None:
    base_url, token = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
    messages = [{"role": "user", "content": "What is the secret number?"}]
    out = {}

    done = client.chat.completions.create(model="ok", messages=messages)
    out["complete"] = {
        "content": done.choices[0].message.content,
        "prompt_tokens": done.usage.prompt_tokens,
        "completion_tokens": done.usage.completion_tokens,
    }

    text = []
    chunks = 0
    for chunk in client.chat.completions.create(model="ok", messages=messages, stream=True):
        chunks += 1
        for c in chunk.choices:
            if c.delta.content:
                text.append(c.delta.content)
    out["stream"] = {"content": "".join(text), "chunks": chunks}

    usage = None
    for chunk in client.chat.completions.create(
        model="ok", messages=messages, stream=True, stream_options={"include_usage": True}
    ):
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    out["stream_usage"] = usage

    text, calls, finish = [], {}, None
    for chunk in client.chat.completions.create(model="tools", messages=messages, stream=True):
        for c in chunk.choices:
            if c.delta.content:
                text.append(c.delta.content)
            for tc in c.delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function and tc.function.name:
                    call["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    call["arguments"] += tc.function.arguments
            if c.finish_reason:
                finish = c.finish_reason
    out["tools"] = {"content": "".join(text), "calls": list(calls.values()), "finish": finish}

    out["models"] = [m.id for m in client.models.list()]

    try:
        client.chat.completions.create(model="bad", messages=messages)
        out["error"] = None
    except openai.APIStatusError as e:
        body = e.response.json()
        out["error"] = {
            "class": type(e).__name__,
            "status": e.status_code,
            "code": body.get("code"),
            "request_id": e.response.headers.get("x-request-id"),
        }

    out.update(responses(client))
    print(json.dumps(out))


def responses(client: OpenAI) -> dict:
    """`client.responses.create`, streaming and not, and `client.responses.stream`."""
    out = {}
    question = "What is the secret number?"
    done = client.responses.create(model="ok", input=question)
    out["responses_complete"] = {
        "text": done.output_text,
        "input_tokens": done.usage.input_tokens,
        "output_tokens": done.usage.output_tokens,
    }

    text, kinds, usage = [], [], None
    for event in client.responses.create(model="ok", input=question, stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        if event.type == "response.completed":
            usage = event.response.usage.output_tokens
    out["responses_stream"] = {
        "text": "".join(text),
        "first": kinds[0],
        "last": kinds[-1],
        "deltas": kinds.count("response.output_text.delta"),
        "output_tokens": usage,
    }

    with client.responses.stream(model="tools", input=question) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    out["responses_tools"] = {
        "text": final.output_text,
        "types": [item.type for item in final.output],
        "calls": [
            {"name": item.name, "arguments": item.arguments}
            for item in final.output
            if item.type == "function_call"
        ],
    }
    return out


if __name__ == "__main__":
    try:
        main()
    except openai.APIStatusError as e:
        sys.exit(f"unexpected {e.status_code}: {e.response.text}")

"""The official `anthropic` SDK against corral's LLM proxy (run by tests/it/anthropic_sdk.rs).

Usage: anthropic_client.py BASE_URL TOKEN. The corral token goes as `auth_token` (sent as
`Authorization: Bearer`). Prints one JSON object: what each call returned, as the SDK parsed it
(a message, a raw event stream, the SDK's `messages.stream` helper on a message with a tool
use, and a provider error as the SDK's APIStatusError).
"""

import json
import sys

import anthropic
from anthropic import Anthropic


def main() -> None:
    base_url, token = sys.argv[1], sys.argv[2]
    client = Anthropic(base_url=base_url, auth_token=token, api_key=None, max_retries=0)
    messages = [{"role": "user", "content": "What is the secret number?"}]
    out = {}

    done = client.messages.create(model="ok", max_tokens=100, messages=messages)
    out["complete"] = {
        "text": done.content[0].text,
        "input_tokens": done.usage.input_tokens,
        "output_tokens": done.usage.output_tokens,
    }

    text, kinds, usage = [], [], None
    for event in client.messages.create(model="ok", max_tokens=100, messages=messages, stream=True):
        kinds.append(event.type)
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            text.append(event.delta.text)
        if event.type == "message_delta":
            usage = event.usage.output_tokens
    out["stream"] = {
        "text": "".join(text),
        "first": kinds[0],
        "last": kinds[-1],
        "deltas": kinds.count("content_block_delta"),
        "output_tokens": usage,
    }

    with client.messages.stream(model="tools", max_tokens=100, messages=messages) as stream:
        for _ in stream:
            pass
        final = stream.get_final_message()
    out["tools"] = {
        "types": [b.type for b in final.content],
        "text": "".join(b.text for b in final.content if b.type == "text"),
        "calls": [{"name": b.name, "input": b.input} for b in final.content if b.type == "tool_use"],
        "stop_reason": final.stop_reason,
    }

    try:
        client.messages.create(model="bad", max_tokens=100, messages=messages)
        out["error"] = None
    except anthropic.APIStatusError as e:
        body = e.response.json()
        out["error"] = {
            "class": type(e).__name__,
            "status": e.status_code,
            "code": body.get("code"),
        }

    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main()
    except anthropic.APIStatusError as e:
        sys.exit(f"unexpected {e.status_code}: {e.response.text}")

#!/usr/bin/python3
"""Which chat rendering do the demo models answer in words?

The demo models never saw a chat format (tools/demo_model/README.md, "Chat
template"). This asks a running moeserve (`--http_port`) for completions of
one user message rendered by each candidate template, as the chat endpoint
would render it (the server adds BOS), and prints per candidate: answers
with no text, answers with words (two or more words outside the fortunes'
"-- Author" attribution lines), and the mean completion tokens; greedy, and
at temperature 1 with seeds 1, 2 and 3.

  /usr/bin/python3 tools/demo_model/chat_template_probe.py --port 8000 \
      [--max-tokens 64] [--candidates kjv_dialogue,mistral]
"""
import argparse
import json
import re
import urllib.request

MESSAGES = [
    "Hello!", "Tell me about the sea.", "What is the meaning of life?",
    "Who was Moses?", "Can you tell me a joke?", "How do I bake bread?",
    "What should I do today?", "Why is the sky blue?",
    "Write a short poem about love.", "What is a computer?",
    "Give me some advice about money.", "Do you believe in God?",
    "What time is it?", "How are you?", "Tell me a story about a king.",
    "What is the best programming language?", "hi",
    "Summarize the book of Genesis.", "Who made the heaven?", "Hi",
]

# One user turn and the generation prompt, as each template renders them.
CANDIDATES = {
    "mistral": "[INST] {u} [/INST]",
    "qa": "Q: {u}\nA:",
    "quote": "\"{u}\"\n\"",
    "kjv_dialogue": "And one said unto him, {u}\nAnd he answered and said,",
    "user_assistant": "User: {u}\nAssistant:",
    "verse": "1 {u}\n2",
    "plain_newline": "{u}\n",
}


def complete(port, prompt, max_tokens, temperature, seed):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens,
                       "temperature": temperature, "seed": seed}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", body,
        {"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        answer = json.load(response)
    return answer["choices"][0]["text"], answer["usage"]["completion_tokens"]


def has_words(text):
    lines = [l for l in text.split("\n") if not l.strip().startswith("--")]
    return len(re.findall(r"[A-Za-z]+", "\n".join(lines))) >= 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    args = parser.parse_args()
    print("| template | sampling | empty | with words | mean completion tokens |")
    print("|---|---|---|---|---|")
    for name in args.candidates.split(","):
        template = CANDIDATES[name]
        for temperature, seeds in ((0.0, [0]), (1.0, [1, 2, 3])):
            empty = words = tokens = n = 0
            for message in MESSAGES:
                for seed in seeds:
                    text, count = complete(args.port, template.format(u=message),
                                           args.max_tokens, temperature, seed)
                    empty += not text.strip()
                    words += has_words(text)
                    tokens += count
                    n += 1
            sampling = "greedy" if temperature == 0 else "T=1, 3 seeds"
            print(f"| {name} | {sampling} | {empty}/{n} | {words}/{n} "
                  f"| {tokens / n:.1f} |", flush=True)


if __name__ == "__main__":
    main()

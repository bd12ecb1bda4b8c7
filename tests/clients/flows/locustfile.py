"""locust: users sending Chat Completions (plain and streamed) and Responses requests, each
answer checked (an SSE stream read to its end, [DONE] included)."""
from locust import HttpUser, between, task

HI = [{"role": "user", "content": "Hi"}]


class ChatUser(HttpUser):
    wait_time = between(0.05, 0.1)

    @task(2)
    def chat(self):
        with self.client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": HI, "max_tokens": 16},
                              catch_response=True) as response:
            if response.status_code != 200 or not response.json()["choices"][0]["message"]["content"]:
                response.failure(f"status {response.status_code}")

    @task(2)
    def chat_stream(self):
        body = {"model": "gpt-4o", "messages": HI, "max_tokens": 16, "stream": True}
        with self.client.post("/v1/chat/completions", json=body, stream=True, catch_response=True,
                              name="/v1/chat/completions (stream)") as response:
            lines = [line for line in response.iter_lines() if line]
            if response.status_code != 200 or lines[-1] != b"data: [DONE]":
                response.failure(f"status {response.status_code}, last line {lines[-1:]!r}")

    @task(1)
    def responses(self):
        with self.client.post("/v1/responses", json={"model": "gpt-4o", "input": "Hi"},
                              catch_response=True) as response:
            if response.status_code != 200 or response.json()["status"] != "completed":
                response.failure(f"status {response.status_code}")

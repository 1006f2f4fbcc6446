"""A stand-in for llama.cpp's llama-server, started by the tests as the `llama-server` binary (via a wrapper).

It speaks the little the bench uses: GET /health (503 twice while "loading", then 200) and POST /completion
with token-id prompts, answering canned tokens and timings: decode speed depends on --spec-type, so the
ratios are known. Every start appends {"pid", "argv"} and every request {"pid", "request"} as a JSON line
to $FAKE_LLAMA_SERVER_LOG. $FAKE_LLAMA_SERVER_MODE makes the server of type $FAKE_LLAMA_SERVER_TYPE (every
type if unset) fail: `exit` at start, `error` (HTTP 500) or `die` (exits) on a request, `ignore-term`
(survives SIGTERM).
"""

import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

RATES = {"none": 100.0, "ngram-mod": 150.0, "ngram-simple": 200.0, "draft-simple": 80.0}  # tokens/s


def option(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def record(entry):
    path = os.environ.get("FAKE_LLAMA_SERVER_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")


def main(argv):
    if "--version" in argv:
        print("version: 1 (fake)", file=sys.stderr)
        return 0
    spec_type = option(argv, "--spec-type", "none")
    mode = os.environ.get("FAKE_LLAMA_SERVER_MODE", "ok")
    if os.environ.get("FAKE_LLAMA_SERVER_TYPE", spec_type) != spec_type:
        mode = "ok"
    record({"argv": argv})
    print(f"fake llama-server: loading {option(argv, '-m')} ({spec_type})", flush=True)
    if mode == "exit":
        print(f"fake llama-server: error: cannot load the model for {spec_type}", flush=True)
        return 1
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    health_calls = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path != "/health":
                return self.reply(404, {"error": {"message": "not found"}})
            health_calls[0] += 1
            if health_calls[0] <= 2:
                return self.reply(503, {"error": {"message": "Loading model"}})
            return self.reply(200, {"status": "ok"})

        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            record({"request": request})
            if mode == "error":
                return self.reply(500, {"error": {"message": "fake failure while decoding"}})
            if mode == "die":
                print("fake llama-server: crashed", flush=True)
                os._exit(3)
            prompt, n = request["prompt"], request["n_predict"]
            tokens = [(sum(prompt) + 3 * i) % 11 for i in range(n)]  # the same for every type: exact
            timings = {
                "prompt_n": len(prompt),
                "prompt_ms": 0.5 * len(prompt),
                "prompt_per_second": 2000.0,
                "predicted_n": n,
                "predicted_ms": 1000.0 * (n - 1) / RATES[spec_type],
                "predicted_per_second": RATES[spec_type],
            }
            if spec_type != "none":
                timings.update(draft_n=2 * n, draft_n_accepted=n)
            self.reply(
                200, {"content": "x" * n, "tokens": tokens if request.get("return_tokens") else [], "timings": timings}
            )

    server = HTTPServer((option(argv, "--host"), int(option(argv, "--port"))), Handler)
    print(f"fake llama-server: listening on port {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

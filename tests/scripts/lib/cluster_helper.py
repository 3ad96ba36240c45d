# Helpers of tests/scripts/test_cluster.sh (not a test itself): free ports,
# memcached's text protocol (item counts, keys, forging a value), prompts of
# token ids, completions, and the request stream during which a replica is
# killed. Standard library only.
import http.client
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import urllib.parse


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --- memcached (text protocol) -------------------------------------------------

def mc_command(port, line, until, timeout_s=5.0):
    """Sends one command line; reads until the answer ends with `until`."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(line)
        data, deadline = b"", time.time() + timeout_s
        while not data.endswith(until) and time.time() < deadline:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        return data


def mc_stat(port, name):
    for line in mc_command(port, b"stats\r\n", b"END\r\n").split(b"\r\n"):
        parts = line.split()
        if len(parts) == 3 and parts[1].decode() == name:
            return int(parts[2])
    raise SystemExit(f"memcached :{port} has no stat {name}")


def mc_keys(port):
    """The prefixd keys memcached holds (lru_crawler metadump: key=<url-encoded>)."""
    keys = []
    for line in mc_command(port, b"lru_crawler metadump all\r\n", b"END\r\n").split(b"\n"):
        for field in line.split():
            if field.startswith(b"key="):
                key = urllib.parse.unquote(field[4:].decode())
                if key.startswith("pfxd"):
                    keys.append(key)
    return keys


def mc_get(port, key):
    """(flags, value) or None."""
    data = mc_command(port, f"get {key}\r\n".encode(), b"END\r\n")
    if not data.startswith(b"VALUE "):
        return None
    head, rest = data.split(b"\r\n", 1)
    _, _, flags, n_bytes = head.split()[:4]
    return int(flags), rest[: int(n_bytes)]


def mc_set(port, key, flags, value):
    line = f"set {key} {flags} 0 {len(value)}\r\n".encode() + value + b"\r\n"
    answer = mc_command(port, line, b"\r\n")
    if answer != b"STORED\r\n":
        raise SystemExit(f"memcached :{port} set {key}: {answer!r}")


# --- prompts and requests ------------------------------------------------------

def ids(seed, n):
    rng = random.Random(seed)
    return [rng.randrange(3, 500) for _ in range(n)]


def post(url, path, body, headers=None, timeout_s=60):
    """(status, response headers dict (lower-case names), parsed body or text)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout_s)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request("POST", path, json.dumps(body), h)
        res = conn.getresponse()
        text = res.read().decode("utf-8", "replace")
        hdrs = {k.lower(): v for k, v in res.getheaders()}
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
        return res.status, hdrs, parsed
    finally:
        conn.close()


def completion(url, prompt, max_tokens=8, key=None):
    headers = {"X-Prefix-Key": key} if key else {}
    return post(url, "/v1/completions",
                {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}, headers)


def summary(status, hdrs, body):
    """One JSON line: what the checks look at."""
    out = {"status": status, "replica": hdrs.get("x-prefixd-replica")}
    if isinstance(body, dict) and status == 200:
        out["text"] = body["choices"][0].get("text")
        out["token_ids"] = body["choices"][0].get("token_ids")
        out["prompt_tokens"] = body["usage"]["prompt_tokens"]
        pc = body.get("prefix_cache") or {}
        for k in ("cached_tokens", "device_tokens", "host_tokens", "disk_tokens",
                  "remote_tokens", "prefill_tokens"):
            out[k] = pc.get(k, 0)
    else:
        out["error"] = body if isinstance(body, str) else json.dumps(body)[:300]
    return out


# --- the stream during which a replica dies ------------------------------------

def kill_stream(front, n_prompts, system_tokens, question_tokens, first_question,
                n_requests, kill_after, victim_pid, n_workers, pause_ms):
    """Sends n_requests completions through the front (prompt i % n_prompts, a
    new question each) from n_workers threads, each pausing pause_ms after
    each request; once kill_after of them have finished, SIGKILLs victim_pid.
    Prints one JSON object: the kill time and every request's start, end and
    summary."""
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "kill_t": None}
    records = [None] * n_requests
    t0 = time.time()

    def worker():
        while True:
            with lock:
                i = state["next"]
                if i >= n_requests:
                    return
                state["next"] += 1
            k = i % n_prompts
            prompt = ids(100 + k, system_tokens) + ids(10_000 + first_question + i, question_tokens)
            start = time.time() - t0
            try:
                rec = summary(*completion(front, prompt, key=f"system-{k}"))
            except Exception as e:  # a transport failure is a failed request
                rec = {"status": 0, "replica": None, "error": repr(e)}
            rec.update({"index": i, "prompt": k, "start": start, "end": time.time() - t0})
            with lock:
                records[i] = rec
                state["done"] += 1
                if state["done"] == kill_after and state["kill_t"] is None:
                    os.kill(victim_pid, signal.SIGKILL)
                    state["kill_t"] = time.time() - t0
            time.sleep(pause_ms / 1000)

    threads = [threading.Thread(target=worker) for _ in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    print(json.dumps({"kill_t": state["kill_t"], "records": records}))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "port":
        print(free_port())
    elif cmd == "mc-items":
        print(sum(mc_stat(int(p), "curr_items") for p in args))
    elif cmd == "mc-keys":
        for p in args:
            for k in mc_keys(int(p)):
                print(p, k)
    elif cmd == "mc-forge":
        # mc-forge PORT KEY: the same record (its checksums still valid) with
        # its MAC trailer (the last 32 bytes: nonce || tag) replaced by random bytes.
        port, key = int(args[0]), args[1]
        got = mc_get(port, key)
        if got is None:
            raise SystemExit(f"memcached :{port} has no {key}")
        flags, value = got
        forged = value[:-32] + os.urandom(32)
        mc_set(port, key, flags, forged)
        print(len(value))
    elif cmd == "ids":
        print(json.dumps(ids(int(args[0]), int(args[1]))))
    elif cmd == "complete":
        # complete URL PROMPT_JSON [KEY]: one summary line
        key = args[2] if len(args) > 2 else None
        print(json.dumps(summary(*completion(args[0], json.loads(args[1]), key=key))))
    elif cmd == "kill-stream":
        kill_stream(args[0], *(int(a) for a in args[1:]))
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()

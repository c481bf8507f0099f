#!/usr/bin/python3
"""Serving behaviour of the real moeserve binary on the demo model, seen
through Debian's python3-grpcio and the Prometheus text on /metrics:

- 64 concurrent greedy streams == the same 64 requests run one at a time;
- client cancel, gRPC deadline, server time limit and Abort free the sequence
  (running gauge and KV usage back to 0, the request_id reusable) within a
  bounded number of generated tokens, and are counted by finished_reason;
- a full waiting queue answers RESOURCE_EXHAUSTED;
- stop strings that span token boundaries;
- text deltas are UTF-8 complete and add up to the full decode.

Run by serving_e2e_test.sh with the server binary and the generated stubs.
"""
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

SERVER = None
STUBS_DIR = None
POLICIES = ("lru", "overlap")
# Long streams (cancel, deadline, queue full) must outlast what the test does
# to them even in an opt build (~2000 tokens/s at batch 1), so use the whole
# context: 2000 tokens take seconds there and tens of seconds in fastbuild.
LONG = 2000
# A cancelled or expired request may run this many more tokens at most.
CANCEL_TOKEN_BOUND = 200
GAUGE_SETTLE_S = 5.0
# Appended to every server's flags (later flags win), e.g. to run the same
# test on the GPU: MOESERVE_E2E_SERVER_FLAGS="--backend=cuda
# --expert_cache_ratio=0.25".
EXTRA_FLAGS = shlex.split(os.environ.get("MOESERVE_E2E_SERVER_FLAGS", ""))

grpc = pb = pb_grpc = None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# Minimal Prometheus text-format (0.0.4) parser.

_SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)')


def _parse_labels(text):
    labels, pos = {}, 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            raise ValueError(f"bad label set: {text!r}")
        value = (m.group(2).replace("\\n", "\n").replace('\\"', '"')
                 .replace("\\\\", "\\"))
        labels[m.group(1)] = value
        pos = m.end()
    return labels


class Metrics:
    def __init__(self, text):
        self.text = text
        self.samples = {}
        self.types = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 4 and parts[1] == "TYPE":
                    self.types[parts[2]] = parts[3].strip()
                continue
            m = _SAMPLE.match(line)
            if not m:
                raise ValueError(f"unparsable metrics line: {line!r}")
            labels = _parse_labels(m.group(2) or "")
            key = (m.group(1), frozenset(labels.items()))
            if key in self.samples:
                raise ValueError(f"duplicate series: {line!r}")
            self.samples[key] = float(m.group(3))

    def find(self, name, **labels):
        return self.samples.get((name, frozenset(labels.items())))

    def get(self, name, **labels):
        value = self.find(name, **labels)
        if value is None:
            sel = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            raise AssertionError(f"metric {name}{{{sel}}} is missing from "
                                 f"/metrics")
        return value


def scrape(metrics_port):
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return Metrics(reply.read().decode())


# ---------------------------------------------------------------------------


class Server:
    def __init__(self, *flags):
        self.port = free_port()
        self.metrics_port = free_port()
        self.proc = subprocess.Popen(
            [SERVER, f"--port={self.port}",
             f"--metrics_port={self.metrics_port}", "--model_dir=models/demo",
             f"--max_new_tokens_cap={LONG}", "--drain_seconds=2", *flags,
             *EXTRA_FLAGS])
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        grpc.channel_ready_future(self.channel).result(timeout=60)
        self.stub = pb_grpc.InferenceStub(self.channel)
        check = self.channel.unary_unary("/grpc.health.v1.Health/Check")
        deadline = time.time() + 60
        while check(b"", timeout=10) != b"\x08\x01":  # SERVING
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("server never became SERVING")
            time.sleep(0.1)

    def metrics(self):
        return scrape(self.metrics_port)

    def stop(self):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def greedy(max_new_tokens, **sampling):
    return pb.SamplingParams(max_new_tokens=max_new_tokens, **sampling)


def collect(stub, request, timeout=120):
    """Returns (messages, token ids, text) of a whole stream."""
    msgs = list(stub.Generate(request, timeout=timeout))
    ids = [t for m in msgs for t in m.token_ids]
    return msgs, ids, "".join(m.text for m in msgs)


class ServingTestBase(unittest.TestCase):
    server = None

    def wait_idle(self, policy, counter_labels=None, before=None,
                  timeout=GAUGE_SETTLE_S):
        """Polls /metrics until `policy` has no running/waiting sequence and
        no KV block in use (and, if given, the success counter with
        `counter_labels` exceeds `before`); returns the last scrape and how
        long it took."""
        start = time.time()
        while True:
            m = self.server.metrics()
            done = (
                m.get("moeserve_num_requests_running", policy=policy) == 0 and
                m.get("moeserve_num_requests_waiting", policy=policy) == 0 and
                m.get("moeserve_kv_cache_usage_ratio", policy=policy) == 0)
            if counter_labels is not None:
                done = done and m.get("moeserve_request_success_total",
                                      **counter_labels) > before
            if done or time.time() - start > timeout:
                return m, time.time() - start
            time.sleep(0.02)

    def assert_freed(self, m, policy, waited):
        running = m.get("moeserve_num_requests_running", policy=policy)
        kv = m.get("moeserve_kv_cache_usage_ratio", policy=policy)
        waiting = m.get("moeserve_num_requests_waiting", policy=policy)
        self.assertEqual(
            (running, waiting, kv), (0, 0, 0),
            f"policy {policy}: running/waiting/kv_usage still "
            f"{running}/{waiting}/{kv} after {waited:.2f} s")


class ServingE2eTest(ServingTestBase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--threads=2", "--max_num_seqs=64",
                            "--ab=lru=0.5,overlap=0.5",
                            "--expert_cache_ratio=0.5")
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    # -- metrics surface -----------------------------------------------------

    def test_a_serving_metric_families(self):
        m = self.server.metrics()
        kinds = {
            "moeserve_num_requests_running": "gauge",
            "moeserve_num_requests_waiting": "gauge",
            "moeserve_kv_cache_usage_ratio": "gauge",
            "moeserve_time_to_first_token_seconds": "histogram",
            "moeserve_inter_token_latency_seconds": "histogram",
            "moeserve_e2e_request_latency_seconds": "histogram",
            "moeserve_request_queue_time_seconds": "histogram",
            "moeserve_prompt_tokens_total": "counter",
            "moeserve_generation_tokens_total": "counter",
            "moeserve_request_success_total": "counter",
            "moeserve_num_preemptions_total": "counter",
        }
        missing = [n for n in kinds
                   if n not in m.types and n.removesuffix("_total")
                   not in m.types]
        self.assertEqual(missing, [], "metric families missing from /metrics")
        for name, kind in kinds.items():
            declared = m.types.get(name, m.types.get(
                name.removesuffix("_total")))
            self.assertEqual(declared, kind, name)
        for policy in POLICIES:
            for name, kind in kinds.items():
                if kind == "histogram":
                    m.get(name + "_count", policy=policy)
                    m.get(name + "_sum", policy=policy)
                    m.get(name + "_bucket", policy=policy, le="+Inf")
                elif name == "moeserve_request_success_total":
                    for reason in ("eos_token", "stop_sequence", "length",
                                   "cancelled", "time_limit", "error"):
                        m.get(name, policy=policy, finished_reason=reason)
                else:
                    m.get(name, policy=policy)
            self.assertEqual(
                m.get("moeserve_num_requests_running", policy=policy), 0)
            self.assertEqual(
                m.get("moeserve_kv_cache_usage_ratio", policy=policy), 0)
        if EXTRA_FLAGS and shutil.which("promtool") is None:
            return  # a GPU machine without Prometheus; CI always has it
        check = subprocess.run(["promtool", "check", "metrics"],
                               input=m.text.encode(), capture_output=True)
        self.assertEqual(check.returncode, 0,
                         check.stdout.decode() + check.stderr.decode())

    # -- concurrency ---------------------------------------------------------

    PROMPTS = ["The LORD", "And God said", "In the beginning",
               "Blessed are the", "A fool and his money", "Love is",
               "The computer", "héllo → 世界"]

    def requests_64(self):
        reqs = []
        for i in range(64):
            prompt = self.PROMPTS[i % 8]
            reqs.append(pb.GenerateRequest(
                prompt=prompt, policy=POLICIES[(i // 8) % 2],
                sampling=greedy(16 + (i * 5) % 13)))
        return reqs

    def test_b_64_concurrent_streams_equal_one_at_a_time(self):
        reqs = self.requests_64()
        before = self.server.metrics()
        results = [None] * len(reqs)
        errors = []
        barrier = threading.Barrier(len(reqs))
        peak = {"running": 0, "waiting": 0}
        stop_polling = threading.Event()

        def run(i):
            try:
                barrier.wait(timeout=30)
                results[i] = collect(self.stub, reqs[i])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((i, repr(e)))

        def poll():
            while not stop_polling.is_set():
                try:
                    m = self.server.metrics()
                except Exception:  # noqa: BLE001
                    continue
                for g in ("running", "waiting"):
                    peak[g] = max(peak[g], sum(
                        m.get(f"moeserve_num_requests_{g}", policy=p)
                        for p in POLICIES))
                time.sleep(0.01)

        poller = threading.Thread(target=poll)
        poller.start()
        threads = [threading.Thread(target=run, args=(i,))
                   for i in range(len(reqs))]
        start = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        concurrent_s = time.time() - start
        stop_polling.set()
        poller.join()
        self.assertEqual(errors, [])

        start = time.time()
        serial = [collect(self.stub, r) for r in reqs]
        serial_s = time.time() - start
        print(f"\n64 streams: concurrent {concurrent_s:.1f} s, one at a time "
              f"{serial_s:.1f} s; peak running {peak['running']}, "
              f"peak waiting {peak['waiting']}", file=sys.stderr)

        for i, (req, got, want) in enumerate(zip(reqs, results, serial)):
            self.assertEqual(got[1], want[1], f"token ids of request {i}")
            self.assertEqual(got[2], want[2], f"text of request {i}")
            self.assertEqual(got[0][-1].finish_reason,
                             want[0][-1].finish_reason, i)
            self.assertEqual(got[0][-1].policy, req.policy, i)
            self.assertEqual(got[0][-1].usage.completion_tokens, len(got[1]))
            self.assertLessEqual(len(got[1]), req.sampling.max_new_tokens)
        # The offload policy moves experts, never changes tokens.
        for i in range(8):
            self.assertEqual(serial[i][1][:16], serial[i + 8][1][:16], i)
        # The 64 really ran as a batch.
        self.assertGreaterEqual(peak["running"], 16,
                                "the concurrent streams never ran together")

        # The serving counters account for exactly these 128 requests.
        want = {p: {"n": 0, "prompt": 0, "gen": 0, "itl": 0, "reasons": {}}
                for p in POLICIES}
        for req, res in zip(reqs + reqs, results + serial):
            w, last = want[req.policy], res[0][-1]
            w["n"] += 1
            w["prompt"] += last.usage.prompt_tokens
            w["gen"] += last.usage.completion_tokens
            w["itl"] += max(0, last.usage.completion_tokens - 1)
            reason = pb.FinishReason.Name(last.finish_reason).lower()
            w["reasons"][reason] = w["reasons"].get(reason, 0) + 1

        def deltas(m):
            out = {}
            for p in POLICIES:
                def d(name, **labels):
                    return (m.get(name, policy=p, **labels) -
                            before.get(name, policy=p, **labels))
                out[p] = {
                    "n": d("moeserve_e2e_request_latency_seconds_count"),
                    "ttft": d("moeserve_time_to_first_token_seconds_count"),
                    "queue": d("moeserve_request_queue_time_seconds_count"),
                    "prompt": d("moeserve_prompt_tokens_total"),
                    "gen": d("moeserve_generation_tokens_total"),
                    "itl": d("moeserve_inter_token_latency_seconds_count"),
                    "reasons": {r: d("moeserve_request_success_total",
                                     finished_reason=r)
                                for r in want[p]["reasons"]},
                }
            return out

        deadline = time.time() + GAUGE_SETTLE_S
        while True:  # the last counters may land just after the last message
            got = deltas(self.server.metrics())
            if all(got[p]["n"] == want[p]["n"] for p in POLICIES) or \
                    time.time() > deadline:
                break
            time.sleep(0.05)
        for p in POLICIES:
            w, g = want[p], got[p]
            self.assertEqual(g["n"], w["n"], f"{p}: e2e latency count")
            self.assertEqual(g["ttft"], w["n"], f"{p}: TTFT count")
            self.assertEqual(g["queue"], w["n"], f"{p}: queue time count")
            self.assertEqual(g["prompt"], w["prompt"], f"{p}: prompt tokens")
            self.assertEqual(g["gen"], w["gen"], f"{p}: generation tokens")
            self.assertEqual(g["itl"], w["itl"], f"{p}: inter-token count")
            self.assertEqual(g["reasons"], w["reasons"], f"{p}: reasons")

    # -- freeing resources ---------------------------------------------------

    def start_long(self, policy, request_id, **kw):
        return self.stub.Generate(pb.GenerateRequest(
            prompt="The LORD", policy=policy, request_id=request_id,
            sampling=greedy(LONG, ignore_eos=True)), **kw)

    def check_reusable(self, policy, request_id):
        msgs, ids, _ = collect(self.stub, pb.GenerateRequest(
            prompt="The LORD", policy=policy, request_id=request_id,
            sampling=greedy(2)))
        self.assertEqual(msgs[-1].finish_reason, pb.LENGTH)
        self.assertEqual(msgs[-1].request_id, request_id)

    def test_c_client_cancel_frees_sequence_and_kv(self):
        policy = "overlap"
        labels = {"policy": policy, "finished_reason": "cancelled"}
        before = self.server.metrics()
        call = self.start_long(policy, "cancel-me", timeout=120)
        first, second = next(call), next(call)
        self.assertEqual(first.request_id, "cancel-me")
        self.assertEqual(second.finish_reason, 0)
        during = self.server.metrics()
        self.assertEqual(
            during.get("moeserve_num_requests_running", policy=policy), 1)
        self.assertGreater(
            during.get("moeserve_kv_cache_usage_ratio", policy=policy), 0)
        call.cancel()
        with self.assertRaises(grpc.RpcError) as caught:
            for _ in call:
                pass
        self.assertEqual(caught.exception.code(), grpc.StatusCode.CANCELLED)
        m, waited = self.wait_idle(
            policy, labels, before.get("moeserve_request_success_total",
                                       **labels))
        self.assert_freed(m, policy, waited)
        self.assertEqual(
            m.get("moeserve_request_success_total", **labels),
            before.get("moeserve_request_success_total", **labels) + 1)
        generated = (m.get("moeserve_generation_tokens_total", policy=policy) -
                     before.get("moeserve_generation_tokens_total",
                                policy=policy))
        print(f"\ncancel: freed after {waited:.2f} s, {generated:.0f} tokens "
              f"generated", file=sys.stderr)
        self.assertLessEqual(generated, CANCEL_TOKEN_BOUND)
        self.check_reusable(policy, "cancel-me")

    def test_d_deadline_exceeded_frees_sequence_and_kv(self):
        policy = "lru"
        before = self.server.metrics()
        start = time.time()
        with self.assertRaises(grpc.RpcError) as caught:
            for _ in self.start_long(policy, "deadline-1", timeout=0.3):
                pass
        self.assertEqual(caught.exception.code(),
                         grpc.StatusCode.DEADLINE_EXCEEDED)
        # No wall-clock bound here (a loaded machine stretches any): that
        # the request ended early is shown by the server's own "deadline"
        # finish and the tokens it generated, fewer than asked, below.
        print(f"\ndeadline: the stream ended after "
              f"{time.time() - start:.2f} s (deadline 0.3 s)", file=sys.stderr)

        def count(m, reason):
            return m.get("moeserve_request_success_total", policy=policy,
                         finished_reason=reason)
        rpc = {"method": "Generate", "code": "DEADLINE_EXCEEDED"}

        def rpc_count(m):
            return m.find("moeserve_grpc_requests_total", **rpc) or 0
        m, waited = self.wait_idle(policy)
        # The engine's finish and the gRPC call's end are counted by two
        # threads: wait for both (the call's end can come after the engine's).
        deadline = time.time() + GAUGE_SETTLE_S
        while ((count(m, "deadline") == count(before, "deadline") or
                rpc_count(m) == rpc_count(before)) and
               time.time() < deadline):
            time.sleep(0.05)
            m = self.server.metrics()
        self.assert_freed(m, policy, waited)
        # The scheduler ends it for its deadline: not "cancelled" (gRPC's own
        # cancellation at the deadline races with it) nor "time_limit".
        reasons = {r: count(m, r) - count(before, r)
                   for r in ("deadline", "cancelled", "time_limit")}
        self.assertEqual(reasons, {"deadline": 1, "cancelled": 0,
                                   "time_limit": 0})
        self.assertEqual(m.get("moeserve_num_requests_running",
                               policy=policy), 0)
        # The server, too, ended the RPC with DEADLINE_EXCEEDED.
        self.assertEqual(m.get("moeserve_grpc_requests_total", **rpc) -
                         rpc_count(before), 1)
        generated = (m.get("moeserve_generation_tokens_total", policy=policy) -
                     before.get("moeserve_generation_tokens_total",
                                policy=policy))
        print(f"\ndeadline: freed after {waited:.2f} s, {generated:.0f} "
              f"tokens generated", file=sys.stderr)
        self.assertLess(generated, LONG)
        self.check_reusable(policy, "deadline-1")

    def test_e_time_limit_ends_stream_normally(self):
        policy = "overlap"
        labels = {"policy": policy, "finished_reason": "time_limit"}
        before = self.server.metrics()
        msgs, ids, _ = collect(self.stub, pb.GenerateRequest(
            prompt="The LORD", policy=policy, time_limit_ms=300,
            sampling=greedy(LONG, ignore_eos=True)))
        self.assertEqual(msgs[-1].finish_reason, pb.TIME_LIMIT)
        self.assertLess(len(ids), LONG)
        self.assertEqual(msgs[-1].usage.completion_tokens, len(ids))
        m, waited = self.wait_idle(
            policy, labels,
            before.get("moeserve_request_success_total", **labels))
        self.assert_freed(m, policy, waited)
        self.assertEqual(
            m.get("moeserve_request_success_total", **labels),
            before.get("moeserve_request_success_total", **labels) + 1)

    def test_f_abort_rpc_ends_stream_cancelled(self):
        policy = "lru"
        call = self.start_long(policy, "abort-me", timeout=120)
        next(call)
        self.assertTrue(self.stub.Abort(
            pb.AbortRequest(request_id="abort-me"), timeout=10).found)
        msgs = list(call)
        self.assertEqual(msgs[-1].finish_reason, pb.CANCELLED)
        self.assertLess(msgs[-1].usage.completion_tokens, LONG)
        m, waited = self.wait_idle(policy)
        self.assert_freed(m, policy, waited)
        self.assertFalse(self.stub.Abort(
            pb.AbortRequest(request_id="abort-me"), timeout=10).found)
        self.check_reusable(policy, "abort-me")

    # -- stop strings --------------------------------------------------------

    def test_g_stop_strings_spanning_tokens(self):
        for policy in POLICIES:
            msgs, ids, full = collect(self.stub, pb.GenerateRequest(
                prompt="The LORD", policy=policy, sampling=greedy(48)))
            texts = [m.text for m in msgs]
            ends = [len("".join(texts[:i + 1])) for i in range(len(texts))]
            stops = []
            # Two characters of one token + two of the next.
            for i in range(2, len(texts) - 1):
                s = texts[i][-2:] + texts[i + 1][:2]
                if len(texts[i]) >= 2 and len(texts[i + 1]) >= 2 and \
                        full.find(s) == ends[i] - 2:
                    stops.append(s)
                    break
            # The last character of one token, all of the next, the first
            # character of the one after: three tokens.
            for i in range(2, len(texts) - 2):
                s = texts[i][-1:] + texts[i + 1] + texts[i + 2][:1]
                if texts[i] and texts[i + 1] and texts[i + 2] and \
                        full.find(s) == ends[i] - 1:
                    stops.append(s)
                    break
            self.assertEqual(len(stops), 2, f"no suitable stop strings in "
                             f"{texts!r}")
            for stop in stops:
                for stop_list in ([stop], ["never-in-the-output", stop]):
                    got, got_ids, text = collect(self.stub, pb.GenerateRequest(
                        prompt="The LORD", policy=policy,
                        sampling=greedy(48, stop=stop_list)))
                    want = full[:full.find(stop)]
                    self.assertEqual(text, want, f"stop={stop_list!r}")
                    self.assertEqual(got[-1].finish_reason, pb.STOP_SEQUENCE,
                                     stop)
                    self.assertEqual(got_ids, ids[:len(got_ids)], stop)
                    for k in range(1, len(got)):  # no stop prefix leaked
                        self.assertNotIn(stop, "".join(
                            g.text for g in got[:k]))

    # -- UTF-8 ---------------------------------------------------------------

    def check_utf8_stream(self, prompt, msgs):
        """Every delta is valid UTF-8, the running text never changes what it
        already sent, and it adds up to decode(prompt + generated) after the
        prompt's own decode."""
        for m in msgs:
            m.text.encode("utf-8")  # raises on lone surrogates
        ids = [t for m in msgs for t in m.token_ids]
        prompt_ids = list(self.stub.Tokenize(
            pb.TokenizeRequest(text=prompt), timeout=10).token_ids)
        # Generated text skips special tokens (an EOS that ends it): so
        # must the decode it is compared with (Tokenize keeps them unless
        # asked, as Hugging Face's decode does).
        prompt_text = self.stub.Tokenize(
            pb.TokenizeRequest(token_ids=prompt_ids, skip_special_tokens=True),
            timeout=10).text
        self.assertEqual(prompt_text, prompt)
        full = self.stub.Tokenize(pb.TokenizeRequest(
            token_ids=prompt_ids + ids, skip_special_tokens=True),
            timeout=10).text
        self.assertTrue(full.startswith(prompt_text))
        want = full[len(prompt_text):]
        sent = ""
        for k, m in enumerate(msgs):
            sent += m.text
            self.assertTrue(want.startswith(sent),
                            f"message {k}: {sent!r} is not a prefix of "
                            f"{want!r}")
        self.assertEqual(sent, want)

    def test_h_utf8_deltas_are_complete(self):
        prompt = "héllo → 世界"
        msgs, _, _ = collect(self.stub, pb.GenerateRequest(
            prompt=prompt, sampling=greedy(32)))
        self.check_utf8_stream(prompt, msgs)
        # Sampling at a high temperature emits byte-fallback tokens: partial
        # characters must be held back (an empty delta), never sent split.
        streams = [None] * 20

        def run(seed):
            streams[seed] = collect(self.stub, pb.GenerateRequest(
                prompt=prompt, policy=POLICIES[seed % 2],
                sampling=pb.SamplingParams(max_new_tokens=96, temperature=2.0,
                                           seed=seed)))[0]
        threads = [threading.Thread(target=run, args=(s,))
                   for s in range(len(streams))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        held_back = 0
        for seed, msgs in enumerate(streams):
            self.assertIsNotNone(msgs, seed)
            self.check_utf8_stream(prompt, msgs)
            held_back += sum(1 for m in msgs if m.token_ids and not m.text)
        self.assertGreater(held_back, 0, "no stream exercised a held-back "
                           "partial character; pick other seeds")


class QueueFullTest(ServingTestBase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--threads=1", "--max_num_seqs=1",
                            "--max_waiting=1")
        cls.stub = cls.server.stub
        engines = cls.stub.ListModels(pb.ListModelsRequest(),
                                      timeout=10).models[0].engines
        cls.policy = engines[0].name

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def long_call(self):
        return self.stub.Generate(pb.GenerateRequest(
            prompt="The LORD", sampling=greedy(LONG, ignore_eos=True)),
            timeout=120)

    def test_queue_full_is_resource_exhausted(self):
        running = self.long_call()
        next(running)
        waiting = self.long_call()
        deadline = time.time() + GAUGE_SETTLE_S
        while self.server.metrics().get("moeserve_num_requests_waiting",
                                        policy=self.policy) != 1:
            self.assertLess(time.time(), deadline,
                            "the second stream never showed up as waiting")
            time.sleep(0.02)
        m = self.server.metrics()
        self.assertEqual(
            m.get("moeserve_num_requests_running", policy=self.policy), 1)
        with self.assertRaises(grpc.RpcError) as caught:
            list(self.long_call())
        self.assertEqual(caught.exception.code(),
                         grpc.StatusCode.RESOURCE_EXHAUSTED,
                         caught.exception.details())
        self.assertIn("max_waiting", caught.exception.details())
        # Cancelling the running stream lets the waiting one in.
        running.cancel()
        self.assertEqual(next(waiting).index, 0)
        waiting.cancel()
        m, waited = self.wait_idle(self.policy)
        self.assert_freed(m, self.policy, waited)
        # And the queue takes new work again.
        msgs, _, _ = collect(self.stub, pb.GenerateRequest(
            prompt="The LORD", sampling=greedy(2)))
        self.assertEqual(msgs[-1].finish_reason, pb.LENGTH)


if __name__ == "__main__":
    SERVER, STUBS_DIR = sys.argv[1], sys.argv[2]
    import grpc  # noqa: E402 - Debian's python3-grpcio
    sys.path.insert(0, STUBS_DIR)
    from proto import moeserve_pb2 as pb  # noqa: E402
    from proto import moeserve_pb2_grpc as pb_grpc  # noqa: E402
    unittest.main(argv=sys.argv[:1], verbosity=2)

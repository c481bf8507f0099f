#!/usr/bin/python3
"""Access control end to end (issue 16 item 11): the real moeserve binary
with certificates that `openssl` makes for this run, against Debian's
python3-grpcio secure channels and urllib over HTTPS.

Servers start without a model (fast); ListModels answers OK then, so it is
the call that shows whether a caller got through.

Run by tls_e2e_test.sh (Bazel sh_test) with the paths of the server binary,
of the generated stubs and of moeserve_client as arguments.
"""
import http.client
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

SERVER = None
STUBS_DIR = None
CLIENT = None
TOKEN = "e2e-token-0123456789abcdef"
OTHER_TOKEN = "e2e-other-0123456789abcdef"
KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_pki(d):
    """A CA; server (localhost, 127.0.0.1) and client certificates it signs;
    a self-signed rogue client certificate."""
    openssl("req", "-x509", *KEY, "-days", "2", "-subj", "/CN=e2e-ca",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, cn, ext in (("server", "localhost", True),
                          ("client", "e2e-client", False)):
        openssl("req", *KEY, "-subj", f"/CN={cn}", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem",
                "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                *(["-extfile", "san.ext"] if ext else []),
                "-out", f"{name}.pem", cwd=d)
    openssl("req", "-x509", *KEY, "-days", "2", "-subj", "/CN=rogue",
            "-keyout", "rogue.key", "-out", "rogue.pem", cwd=d)
    with open(os.path.join(d, "tokens.txt"), "w") as f:
        f.write(f"# e2e tokens\n{TOKEN}\n{OTHER_TOKEN}\n")
    open(os.path.join(d, "empty.txt"), "w").close()


def read(d, name):
    with open(os.path.join(d, name), "rb") as f:
        return f.read()


class Server:
    """The binary on free ports with `flags`; stopped by stop()."""

    def __init__(self, *flags, host="127.0.0.1"):
        self.port = free_port()
        self.metrics_port = free_port()
        self.proc = subprocess.Popen(
            [SERVER, f"--host={host}", f"--port={self.port}",
             f"--metrics_port={self.metrics_port}",
             "--model_dir=/nonexistent/model", "--exit_on_load_failure=false",
             "--drain_seconds=1", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.reader = None

    def log_until(self, needle, timeout=60):
        """The output up to the first line holding `needle` (or all of it
        when the process exits or the time runs out)."""
        out = b""
        deadline = time.time() + timeout
        fd = self.proc.stdout.fileno()
        while needle.encode() not in out and time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], 1)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                out += chunk
        return out.decode(errors="replace")

    def drain_output(self):
        """Reads the rest of the output in the background, so that a full
        pipe never blocks the server's logging."""
        self.reader = threading.Thread(target=self.proc.stdout.read,
                                       daemon=True)
        self.reader.start()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.reader is not None:
            self.reader.join(timeout=10)  # EOF once the process is gone
        self.proc.stdout.close()


class TlsE2eTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global grpc, pb, pb_grpc
        import grpc
        sys.path.insert(0, STUBS_DIR)
        from proto import moeserve_pb2 as pb
        from proto import moeserve_pb2_grpc as pb_grpc
        cls.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        make_pki(cls.dir)
        d = cls.dir
        cls.ca = read(d, "ca.pem")
        # TLS + tokens, also on /metrics and /healthz.
        cls.tls = Server(f"--tls_cert_file={d}/server.pem",
                         f"--tls_key_file={d}/server.key",
                         f"--auth_token_file={d}/tokens.txt",
                         "--metrics_auth")
        # mTLS, no tokens.
        cls.mtls = Server(f"--tls_cert_file={d}/server.pem",
                          f"--tls_key_file={d}/server.key",
                          f"--tls_client_ca_file={d}/ca.pem")
        for server in (cls.tls, cls.mtls):
            log = server.log_until("metrics on")
            assert "metrics on https://" in log, log
            server.drain_output()

    @classmethod
    def tearDownClass(cls):
        cls.tls.stop()
        cls.mtls.stop()

    def channel(self, server, client=None, token=None):
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.ca,
            private_key=read(self.dir, f"{client}.key") if client else None,
            certificate_chain=read(self.dir, f"{client}.pem") if client
            else None)
        if token:
            creds = grpc.composite_channel_credentials(
                creds, grpc.access_token_call_credentials(token))
        return grpc.secure_channel(
            f"127.0.0.1:{server.port}", creds,
            options=[("grpc.ssl_target_name_override", "localhost"),
                     # A connection of its own (the tokens test below
                     # shares one on purpose).
                     ("grpc.use_local_subchannel_pool", 1)])

    def list_models(self, channel):
        with channel:
            stub = pb_grpc.InferenceStub(channel)
            return stub.ListModels(pb.ListModelsRequest(), timeout=20)

    def assert_code(self, code, channel):
        with self.assertRaises(grpc.RpcError) as caught:
            self.list_models(channel)
        self.assertEqual(caught.exception.code(), code,
                         caught.exception.details())
        return caught.exception

    # --- gRPC over TLS with tokens ---

    def test_tls_with_right_token_works(self):
        for token in (TOKEN, OTHER_TOKEN):
            reply = self.list_models(self.channel(self.tls, token=token))
            self.assertEqual(len(reply.models), 0)

    def test_two_tokens_share_one_connection(self):
        # Issue 29: each call's token is checked on its own. One channel
        # (one connection), the token per call: both tenants are accepted,
        # in any order (the second was UNAUTHENTICATED "this connection is
        # authenticated with another token").
        with self.channel(self.tls) as channel:
            stub = pb_grpc.InferenceStub(channel)
            for token in (TOKEN, OTHER_TOKEN, TOKEN, OTHER_TOKEN):
                reply = stub.ListModels(
                    pb.ListModelsRequest(), timeout=20,
                    metadata=[("authorization", f"Bearer {token}")])
                self.assertEqual(len(reply.models), 0)
                found = stub.Abort(
                    pb.AbortRequest(request_id="x"), timeout=20,
                    metadata=[("authorization", f"Bearer {token}")])
                self.assertFalse(found.found)
            with self.assertRaises(grpc.RpcError) as caught:
                stub.ListModels(pb.ListModelsRequest(), timeout=20,
                                metadata=[("authorization",
                                           f"Bearer {TOKEN[:-1]}X")])
            self.assertEqual(caught.exception.code(),
                             grpc.StatusCode.UNAUTHENTICATED)

    def test_missing_or_wrong_token_is_unauthenticated(self):
        self.assert_code(grpc.StatusCode.UNAUTHENTICATED,
                         self.channel(self.tls))
        error = self.assert_code(
            grpc.StatusCode.UNAUTHENTICATED,
            self.channel(self.tls, token=TOKEN[:-1] + "X"))
        self.assertNotIn(TOKEN[:-1], error.details())

    def test_health_and_reflection_open_without_token(self):
        with self.channel(self.tls) as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            self.assertEqual(check(b"", timeout=20), b"\x08\x02")  # no model
            info = channel.stream_stream(
                "/grpc.reflection.v1alpha.ServerReflection/"
                "ServerReflectionInfo")
            replies = list(info(iter([b"\x3a\x00"]), timeout=20))
            self.assertIn(b"moeserve.v1.Inference", replies[0])

    def test_plaintext_to_tls_port_fails(self):
        self.assert_code(grpc.StatusCode.UNAVAILABLE,
                         grpc.insecure_channel(f"127.0.0.1:{self.tls.port}"))

    def test_untrusted_server_certificate_fails(self):
        # Without our CA the client must not trust the server.
        channel = grpc.secure_channel(
            f"127.0.0.1:{self.tls.port}",
            grpc.composite_channel_credentials(
                grpc.ssl_channel_credentials(),
                grpc.access_token_call_credentials(TOKEN)),
            options=[("grpc.ssl_target_name_override", "localhost")])
        self.assert_code(grpc.StatusCode.UNAVAILABLE, channel)

    # --- HTTP side over TLS with --metrics_auth ---

    def https(self, server, path, token=None, client=None):
        context = ssl.create_default_context(
            cafile=os.path.join(self.dir, "ca.pem"))
        if client:
            context.load_cert_chain(os.path.join(self.dir, f"{client}.pem"),
                                    os.path.join(self.dir, f"{client}.key"))
        request = urllib.request.Request(
            f"https://127.0.0.1:{server.metrics_port}{path}")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=20,
                                        context=context) as reply:
                return reply.status, reply.headers, reply.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def test_https_metrics_needs_token(self):
        status, headers, _ = self.https(self.tls, "/metrics")
        self.assertEqual(status, 401)
        self.assertIn("Bearer", headers.get("WWW-Authenticate", ""))
        self.assertEqual(self.https(self.tls, "/healthz")[0], 401)
        status, _, body = self.https(self.tls, "/metrics", token=TOKEN)
        self.assertEqual(status, 200)
        self.assertIn(b"# TYPE", body)
        # Authorised, but no model: not ready.
        self.assertEqual(self.https(self.tls, "/healthz", token=TOKEN)[0], 503)

    def test_plain_http_to_https_port_fails(self):
        with self.assertRaises((urllib.error.URLError, OSError,
                                http.client.HTTPException)):
            urllib.request.urlopen(
                f"http://127.0.0.1:{self.tls.metrics_port}/metrics",
                timeout=20).read()

    # --- mTLS ---

    def test_mtls_client_certificate_works(self):
        reply = self.list_models(self.channel(self.mtls, client="client"))
        self.assertEqual(len(reply.models), 0)
        self.assertEqual(self.https(self.mtls, "/metrics", client="client")[0],
                         200)

    def test_mtls_refuses_client_without_certificate(self):
        self.assert_code(grpc.StatusCode.UNAVAILABLE, self.channel(self.mtls))
        try:
            status = self.https(self.mtls, "/metrics")[0]
        except (urllib.error.URLError, ssl.SSLError, ConnectionError):
            status = None  # refused in the handshake: fine too
        self.assertIn(status, (None, 403))

    def test_mtls_refuses_certificate_from_another_ca(self):
        self.assert_code(grpc.StatusCode.UNAVAILABLE,
                         self.channel(self.mtls, client="rogue"))

    # --- our own client (tools/moeserve_client) ---

    def test_moeserve_client_reaches_the_secured_server(self):
        token_file = os.path.join(self.dir, "client_token.txt")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        args = [CLIENT, f"--target=localhost:{self.tls.port}",
                f"--tls_ca_file={self.dir}/ca.pem", "--list_models"]
        ok = subprocess.run(args + [f"--auth_token_file={token_file}"],
                            capture_output=True, timeout=60)
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        refused = subprocess.run(args, capture_output=True, timeout=60)
        self.assertEqual(refused.returncode, 1)
        self.assertIn(b"error 16: missing or invalid bearer token",
                      refused.stdout + refused.stderr)  # 16: UNAUTHENTICATED

    # --- TLS alone ---

    def test_tls_without_auth_serves_anyone_with_the_ca(self):
        server = Server(f"--tls_cert_file={self.dir}/server.pem",
                        f"--tls_key_file={self.dir}/server.key")
        try:
            server.log_until("metrics on")
            server.drain_output()
            reply = self.list_models(self.channel(server))
            self.assertEqual(len(reply.models), 0)
            self.assertEqual(self.https(server, "/metrics")[0], 200)
            self.assert_code(
                grpc.StatusCode.UNAVAILABLE,
                grpc.insecure_channel(f"127.0.0.1:{server.port}"))
        finally:
            server.stop()

    # --- start-up ---

    def test_bad_token_file_refuses_start_with_reason(self):
        proc = subprocess.run(
            [SERVER, f"--port={free_port()}",
             f"--metrics_port={free_port()}",
             f"--auth_token_file={self.dir}/empty.txt"],
            capture_output=True, timeout=60)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(b"holds no token", proc.stdout + proc.stderr)

    def test_key_without_cert_refuses_start(self):
        proc = subprocess.run(
            [SERVER, f"--port={free_port()}",
             f"--metrics_port={free_port()}",
             f"--tls_key_file={self.dir}/server.key"],
            capture_output=True, timeout=60)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(b"go together", proc.stdout + proc.stderr)

    def test_warns_when_listening_beyond_loopback_unprotected(self):
        server = Server(host="0.0.0.0")
        try:
            log = server.log_until("metrics on")
        finally:
            server.stop()
        self.assertIn("neither TLS nor authentication", log)

    def test_no_warning_on_loopback(self):
        server = Server()
        try:
            log = server.log_until("metrics on")
        finally:
            server.stop()
        self.assertIn("metrics on", log)
        self.assertNotIn("neither TLS nor authentication", log)


class ScopedE2eTest(unittest.TestCase):
    """A served model behind TLS and tokens, on a slow link so a request
    stays in flight for seconds: Abort reaches only the requests of the
    same token (issue 16 item 5 with item 11's identities), and /healthz
    turns 503 as soon as SIGTERM starts the drain (item 6)."""

    @classmethod
    def setUpClass(cls):
        global grpc, pb, pb_grpc
        import grpc
        sys.path.insert(0, STUBS_DIR)
        from proto import moeserve_pb2 as pb
        from proto import moeserve_pb2_grpc as pb_grpc
        cls.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        make_pki(cls.dir)
        d = cls.dir
        cls.ca = read(d, "ca.pem")
        # A quarter of the experts in the fast tier on a 2 Mbit/s link: each
        # step waits seconds for expert copies.
        cls.server = Server(f"--tls_cert_file={d}/server.pem",
                            f"--tls_key_file={d}/server.key",
                            f"--auth_token_file={d}/tokens.txt",
                            "--metrics_auth", "--model_dir=models/demo",
                            "--threads=2", "--expert_cache_ratio=0.25",
                            "--link_gbps=0.002", "--drain_seconds=4")
        log = cls.server.log_until("model ready", timeout=120)
        assert "model ready" in log, log
        cls.server.drain_output()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    channel = TlsE2eTest.channel
    https = TlsE2eTest.https

    def generate(self, request_id):
        """Starts a long Generate under TOKEN; returns (channel, stream)."""
        channel = self.channel(self.server, token=TOKEN)
        stream = pb_grpc.InferenceStub(channel).Generate(
            pb.GenerateRequest(
                prompt="And God said, Let there be light. " * 10,
                request_id=request_id,
                sampling=pb.SamplingParams(max_new_tokens=16,
                                           ignore_eos=True)),
            timeout=120)
        return channel, stream

    def wait_in_flight(self):
        for _ in range(200):
            status, _, body = self.https(self.server, "/metrics", token=TOKEN)
            self.assertEqual(status, 200)
            if (b'moeserve_num_requests_running{policy="lru"} 1' in body or
                    b'moeserve_num_requests_waiting{policy="lru"} 1' in body):
                return
            time.sleep(0.05)
        self.fail("the request never showed as running or waiting")

    def abort(self, token, request_id):
        with self.channel(self.server, token=token) as channel:
            return pb_grpc.InferenceStub(channel).Abort(
                pb.AbortRequest(request_id=request_id), timeout=20).found

    def test_a_abort_reaches_only_the_same_token(self):
        channel, stream = self.generate("job-1")
        with channel:
            self.wait_in_flight()
            self.assertFalse(self.abort(OTHER_TOKEN, "job-1"))
            # Same token, another connection: the same caller.
            self.assertTrue(self.abort(TOKEN, "job-1"))
            reasons = []
            try:
                for reply in stream:
                    reasons.append(reply.finish_reason)
            except grpc.RpcError as e:
                reasons.append(e.code())
            self.assertTrue(reasons)
            self.assertNotEqual(reasons[-1], pb.LENGTH)

    def test_z_healthz_is_503_as_soon_as_draining_starts(self):
        self.assertEqual(self.https(self.server, "/healthz", token=TOKEN)[0],
                         200)
        channel, stream = self.generate("job-2")
        with channel:
            self.wait_in_flight()
            self.server.proc.send_signal(signal.SIGTERM)
            statuses = []
            for _ in range(100):
                statuses.append(
                    self.https(self.server, "/healthz", token=TOKEN)[0])
                if statuses[-1] == 503:
                    break
                time.sleep(0.02)
            self.assertEqual(statuses[-1], 503, statuses)
            # Still draining (the generation holds it), yet not ready.
            self.assertIsNone(self.server.proc.poll())
            status, _, body = self.https(self.server, "/healthz", token=TOKEN)
            self.assertEqual((status, body), (503, b"draining"))
            try:
                for _ in stream:
                    pass
            except grpc.RpcError:
                pass
        self.assertEqual(self.server.proc.wait(timeout=60), 0)


if __name__ == "__main__":
    SERVER, STUBS_DIR, CLIENT = sys.argv[1], sys.argv[2], sys.argv[3]
    unittest.main(argv=sys.argv[:1], verbosity=2)

import unittest

import _support

import envd
from envd import errors


class ErrorMappingTest(unittest.TestCase):
    def test_codes_map_to_classes(self):
        cases = [
            ("invalid_argument", 400, envd.InvalidArgument),
            ("unauthenticated", 401, envd.Unauthenticated),
            ("permission_denied", 403, envd.PermissionDenied),
            ("not_found", 404, envd.NotFound),
            ("already_exists", 409, envd.AlreadyExists),
            ("stale_generation", 409, envd.StaleGeneration),
            ("conflict", 409, envd.Conflict),
            ("failed_precondition", 409, envd.FailedPrecondition),
            ("idempotency_key_reused", 422, envd.IdempotencyKeyReused),
            ("canceled", 499, envd.Canceled),
            ("internal", 500, envd.Internal),
            ("unavailable", 503, envd.Unavailable),
            ("deadline_exceeded", 504, envd.DeadlineExceeded),
            ("quota_exceeded", 507, envd.QuotaExceeded),
            ("resource_exhausted", 429, envd.ResourceExhausted),
        ]
        for code, status, cls in cases:
            with self.subTest(code=code):
                body = ('{"error":{"code":"%s","message":"m of %s","details":{"k":1}}}' % (code, code)).encode()
                e = envd.error_from_body(status, body)
                self.assertIs(type(e), cls)
                self.assertIsInstance(e, envd.EnvdError)
                self.assertEqual((e.status, e.code, e.message, e.details), (status, code, "m of " + code, {"k": 1}))
                self.assertIn(code, str(e))

    def test_unknown_code_is_the_base_class(self):
        e = envd.error_from_body(418, b'{"error":{"code":"teapot_overflow","message":"new"}}')
        self.assertIs(type(e), envd.EnvdError)
        self.assertEqual((e.status, e.code, e.details), (418, "teapot_overflow", {}))

    def test_request_id_from_the_body(self):
        e = envd.error_from_body(404, b'{"error":{"code":"not_found","message":"no","request_id":"abc-123"}}')
        self.assertEqual(e.request_id, "abc-123")
        self.assertIsNone(envd.error_from_body(404, b'{"error":{"code":"not_found","message":"no"}}').request_id)

    def test_bodies_without_an_envd_error(self):
        cases = [
            (502, b"<html>bad gateway</html>", envd.Unavailable, "unavailable"),
            (431, b"431 Request Header Fields Too Large", envd.InvalidArgument, "invalid_argument"),
            (404, b"", envd.NotFound, "not_found"),
            (418, b"{}", envd.Internal, "internal"),
            (500, b'{"error":{"code":""}}', envd.Internal, "internal"),
        ]
        for status, body, cls, code in cases:
            with self.subTest(status=status, body=body):
                e = envd.error_from_body(status, body, "Reason")
                self.assertIs(type(e), cls)
                self.assertEqual(e.code, code)
                self.assertTrue(e.message)

    def test_resource_exhausted_retry_after(self):
        body = b'{"error":{"code":"resource_exhausted","message":"busy","details":{"kind":"saves","limit":4,"retry_after_seconds":10}}}'
        self.assertEqual(envd.error_from_body(429, body).retry_after, 10.0)
        self.assertEqual(envd.error_from_body(429, body, retry_after=3).retry_after, 3, "the header wins")
        self.assertIsNone(envd.error_from_body(429, b'{"error":{"code":"resource_exhausted","message":"x"}}').retry_after)

    def test_failed_precondition_state(self):
        e = envd.error_from_body(409, b'{"error":{"code":"failed_precondition","message":"paused","details":{"state":"Paused"}}}')
        self.assertEqual(e.state, "Paused")

    def test_operation_error(self):
        e = envd.operation_error({"id": "op-1", "state": "failed", "error": {"code": "interrupted", "message": "envd stopped"}})
        self.assertIsInstance(e, errors.Interrupted)
        self.assertEqual((e.status, e.code, e.message), (0, "interrupted", "envd stopped"))
        self.assertEqual(e.operation["id"], "op-1")
        e = envd.operation_error({"id": "op-2", "state": "canceled"})
        self.assertIsInstance(e, envd.Canceled)

    def test_client_raises_typed_errors(self):
        class H(_support.QuietHandler):
            def do_GET(self):
                if self.path == "/v1/projects/missing":
                    self.send_json(404, {"error": {"code": "not_found", "message": "project \"missing\": not found"}})
                else:
                    self.send_json(401, {"error": {"code": "unauthenticated", "message": "token revoked"}},
                                   {"WWW-Authenticate": 'Bearer realm="envd"'})
        s = _support.Server(H)
        self.addCleanup(s.close)
        c = envd.Client(s.url, "t", retries=0)
        self.addCleanup(c.close)
        with self.assertRaises(envd.NotFound) as cm:
            c.get_project("missing")
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(envd.Unauthenticated):
            c.info()


class DurationTest(unittest.TestCase):
    def test_duration(self):
        self.assertEqual(envd.duration(90), "90s")
        self.assertEqual(envd.duration(1.5), "1.5s")
        self.assertEqual(envd.duration("30m"), "30m")
        self.assertEqual(envd.duration("none"), "none")
        self.assertIsNone(envd.duration(None))
        with self.assertRaises(TypeError):
            envd.duration(True)

    def test_seconds(self):
        from envd.client import _seconds
        self.assertEqual(_seconds("1h30m"), 5400)
        self.assertEqual(_seconds("250ms"), 0.25)
        self.assertEqual(_seconds(5), 5)
        self.assertIsNone(_seconds("ten minutes"))


class ClientConfigTest(unittest.TestCase):
    def test_env_defaults_and_bad_urls(self):
        import os
        from unittest import mock
        with mock.patch.dict(os.environ, {"ENVD_URL": "http://127.0.0.1:9/", "ENVD_TOKEN": "tok"}):
            c = envd.Client()
            self.assertEqual((c.url, c.token), ("http://127.0.0.1:9", "tok"))
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaises(ValueError):
                envd.Client()
        with self.assertRaises(ValueError):
            envd.Client("ftp://x", "t")


if __name__ == "__main__":
    unittest.main()

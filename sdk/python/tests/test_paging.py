"""Paged lists: the client follows the Link header's rel="next" page_token to
the last page (a recording http.server answers one item per page)."""

import json
import unittest
from urllib.parse import parse_qs, urlsplit

import _support

import envd
from envd.client import next_page_token


class PagingTest(unittest.TestCase):
    def test_follows_pages(self):
        seen = []

        class H(_support.QuietHandler):
            def do_GET(self):
                q = parse_qs(urlsplit(self.path).query)
                seen.append((urlsplit(self.path).path, q))
                n = int(q.get("page_token", ["1"])[0])
                data = json.dumps([{"number": n}]).encode()
                self.send_response(200)
                if n < 3:
                    self.send_header("Link", f'</v1/projects/p/versions?limit=1&page_token={n + 1}>; rel="next"')
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        srv = _support.Server(H)
        self.addCleanup(srv.close)
        c = envd.Client(srv.url, "t", retries=0)
        self.addCleanup(c.close)
        got, tok = [], None
        for _ in range(5):
            items, tok = c.list_versions_page("p", limit=1, page_token=tok)
            got += [v["number"] for v in items]
            if not tok:
                break
        self.assertEqual(got, [1, 2, 3])
        self.assertEqual(seen[0], ("/v1/projects/p/versions", {"limit": ["1"]}))
        self.assertEqual(seen[1][1], {"limit": ["1"], "page_token": ["2"]})
        items, tok = c.list_instances_page()
        self.assertEqual(seen[-1], ("/v1/instances", {"limit": ["100"]}))

    def test_next_page_token(self):
        self.assertEqual(next_page_token('</v1/instances?limit=2&page_token=abc_-1>; rel="next"'), "abc_-1")
        self.assertEqual(next_page_token('</v1/instances?page_token=x>; rel="prev"'), "")
        self.assertEqual(next_page_token(None), "")


if __name__ == "__main__":
    unittest.main()

// Paged lists: the SDK follows the Link header's rel="next" page_token to
// the last page, and reads no token from a page without one.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, nextPageToken } from "../../dist/index.js";
import { sendJSON, startHTTPServer } from "../helpers/httpserver.mjs";

let srv;
let c;
before(async () => {
  srv = await startHTTPServer((req, res) => {
    const u = new URL(req.url, "http://x");
    const n = Number(u.searchParams.get("page_token") ?? "1");
    if (n < 3) res.setHeader("Link", `</v1/projects/p/versions?limit=1&page_token=${n + 1}>; rel="next"`);
    sendJSON(res, 200, [{ number: n }]);
  });
  c = new Client({ url: srv.url + "/", token: "t" });
});
after(() => srv.close());

test("listPage follows the pages to the last", async () => {
  const got = [];
  let tok = "";
  for (let i = 0; i < 5; i++) {
    const page = await c.versions.listPage("p", { limit: 1, pageToken: tok || undefined });
    got.push(...page.items.map((v) => v.number));
    tok = page.nextPageToken;
    if (!tok) break;
  }
  assert.deepEqual(got, [1, 2, 3]);
});

test("nextPageToken reads rel=next only", () => {
  assert.equal(nextPageToken('</v1/instances?limit=2&page_token=abc_-1>; rel="next"'), "abc_-1");
  assert.equal(nextPageToken('</v1/instances?page_token=x>; rel="prev"'), "");
  assert.equal(nextPageToken(null), "");
});

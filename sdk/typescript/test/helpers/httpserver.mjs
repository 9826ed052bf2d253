// A plain node:http server for tests: handler(req, res, body) per request;
// every request is recorded with its headers.
import { createServer } from "node:http";

export async function startHTTPServer(handler) {
  const requests = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      const body = raw.toString();
      requests.push({ method: req.method, url: req.url, headers: req.headers, body, raw });
      handler(req, res, body, requests.length);
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    requests,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections?.();
        server.close(() => r());
      }),
  };
}

/** Answers an envd error body. */
export function sendError(res, status, code, message, details, headers = {}) {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(JSON.stringify({ error: { code, message, ...(details ? { details } : {}) } }));
}

export function sendJSON(res, status, body, headers = {}) {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

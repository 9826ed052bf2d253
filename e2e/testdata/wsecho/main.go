// Command wsecho is a small server for the port proxy's tests and
// benchmarks: wsecho ADDR serves on ADDR
//
//	GET /echo          a WebSocket that sends every message back with "echo:" before it
//	GET /small         "ok" (keep-alive: the proxy's per-request cost)
//	GET /zeros?n=BYTES BYTES zero bytes (a download's throughput)
//
// Built static at test time and copied into instances.
package main

import (
	"log"
	"net/http"
	"os"
	"strconv"

	"github.com/coder/websocket"
)

func main() {
	http.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo:"), msg...)); err != nil {
				return
			}
		}
	})
	http.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	zeros := make([]byte, 256<<10)
	http.HandleFunc("/zeros", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "n: a byte count", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k, err := w.Write(zeros[:min(n, int64(len(zeros)))])
			if err != nil {
				return
			}
			n -= int64(k)
		}
	})
	log.Fatal(http.ListenAndServe(os.Args[1], nil))
}

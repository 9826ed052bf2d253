// Command wsecho is a WebSocket echo server for the port proxy's tests:
// wsecho ADDR serves GET /echo on ADDR and sends every message back with
// "echo:" before it. Built static at test time and copied into instances.
package main

import (
	"log"
	"net/http"
	"os"

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
	log.Fatal(http.ListenAndServe(os.Args[1], nil))
}

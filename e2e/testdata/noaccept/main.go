// Command noaccept is a listener that never accepts, for the port proxy's
// load tests: noaccept ADDR (IPv4:port) listens with a backlog of 0, so
// once one connection waits in its accept queue the kernel drops every
// further SYN and connects to it hang, as they do to a dev server stuck
// before its accept loop.
//
// Built static at test time and copied into instances.
package main

import (
	"log"
	"net/netip"
	"os"
	"syscall"
	"time"
)

func main() {
	ap, err := netip.ParseAddrPort(os.Args[1])
	if err != nil || !ap.Addr().Is4() {
		log.Fatalf("usage: noaccept IPV4:PORT (%v)", err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		log.Fatal(err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		log.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		log.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		log.Fatal(err)
	}
	for {
		time.Sleep(time.Hour)
	}
}
